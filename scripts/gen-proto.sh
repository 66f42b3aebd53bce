#!/usr/bin/env bash
# Regenerate every language's code of the m3.v1 contract from proto/ with
# buf.gen.yaml (local plugins only):
#   m3grpc/wire/gen             Python (messages, .pyi stubs, gRPC), importable as
#                              m3grpc.wire.gen.m3.v1.*
#   clients/typescript/src/gen TypeScript (protoc-gen-es), plus the vendored
#                              google/rpc error details (clients/typescript/buf.gen.yaml)
#   clients/go/gen             Go (protoc-gen-go, protoc-gen-go-grpc)
# The output directories are replaced whole, so a second run produces no diff.
#
# Usage: bash scripts/gen-proto.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

BUF="$(bash scripts/install-buf.sh)"
bash scripts/setup-typescript.sh >/dev/null   # protoc-gen-es from the TypeScript lockfile
bash scripts/install-go-tools.sh >/dev/null   # protoc-gen-go(-grpc) pinned in clients/go/go.mod

rm -rf m3grpc/wire/gen clients/typescript/src/gen clients/go/gen
"${BUF}" generate
"${BUF}" generate --template clients/typescript/buf.gen.yaml
find m3grpc/wire/gen -type f -exec chmod 0644 {} +
echo "gen-proto: wrote m3grpc/wire/gen, clients/typescript/src/gen, clients/go/gen" >&2
