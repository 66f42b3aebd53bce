#!/usr/bin/env bash
# Regenerate the TypeScript and Go client code from proto/ with buf.gen.yaml
# (local plugins only). Deterministic: a second run produces no diff.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
BUF="$(bash scripts/install-buf.sh)"

# --- TypeScript plugin: protoc-gen-es from clients/typescript's lockfile ---
bash scripts/setup-typescript.sh >/dev/null

# --- Go plugins: pinned `go install` into .tools/bin ---
bash scripts/install-go-tools.sh >/dev/null

rm -rf clients/typescript/src/gen clients/go/gen
"${BUF}" generate
# --- TypeScript: the google.rpc error details (vendored protos) into clients/typescript/src/gen ---
"${BUF}" generate --template clients/typescript/buf.gen.yaml
