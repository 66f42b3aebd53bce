#!/usr/bin/env bash
# Install the TypeScript client's Node packages from clients/typescript/package-lock.json:
#   - @bufbuild/protobuf, @connectrpc/connect, @connectrpc/connect-node  (runtime)
#   - @bufbuild/protoc-gen-es  (the local buf plugin used by scripts/gen-proto.sh)
#   - typescript, @types/node  (build)
# All pinned to versions that run on the system Node 20.
#
# Needs only a system `node` (>= 20) and `npm` on PATH. Idempotent and safe to call from several
# processes at once: `npm ci` runs only when clients/typescript/node_modules is missing or stale
# (see scripts/lib/npm-ci-once.sh).
#
# stdout: KEY=VALUE lines (absolute paths), usable as `eval "$(scripts/setup-typescript.sh)"`.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/npm-ci-once.sh
source "$ROOT/scripts/lib/npm-ci-once.sh"

TS_DIR="$ROOT/clients/typescript"
MODULES="$TS_DIR/node_modules"
PROTOC_GEN_ES="$MODULES/.bin/protoc-gen-es"
TSC="$MODULES/.bin/tsc"
CONNECT_NODE="$MODULES/@connectrpc/connect-node/package.json"

npm_ci_once -d "TypeScript client packages" -x "$PROTOC_GEN_ES" -x "$TSC" -f "$CONNECT_NODE" \
  "$TS_DIR" setup-typescript

for kv in "M3_TS_DIR=$TS_DIR" "M3_PROTOC_GEN_ES=$PROTOC_GEN_ES" "M3_TSC=$TSC"; do
  printf '%s=%q\n' "${kv%%=*}" "${kv#*=}"
done
