#!/usr/bin/env bash
# Install the TypeScript client's Node packages from clients/typescript/package-lock.json:
#   - @bufbuild/protobuf, @connectrpc/connect, @connectrpc/connect-node  (runtime)
#   - @bufbuild/protoc-gen-es  (the local buf plugin used by scripts/gen-clients.sh)
#   - typescript, @types/node  (build)
# All pinned to versions that run on the system Node 20.
#
# Needs only a system `node` (>= 20) and `npm` on PATH. Idempotent: `npm ci` runs only when
# clients/typescript/node_modules is missing or stale (package.json / package-lock.json changed
# since the last install, or an expected file is missing). Safe to call from several processes.
#
# stdout: KEY=VALUE lines (absolute paths), usable as `eval "$(scripts/setup-typescript.sh)"`.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TS_DIR="$ROOT/clients/typescript"
MODULES="$TS_DIR/node_modules"
STAMP="$MODULES/.m3-setup-stamp"

PROTOC_GEN_ES="$MODULES/.bin/protoc-gen-es"
TSC="$MODULES/.bin/tsc"
CONNECT_NODE="$MODULES/@connectrpc/connect-node/package.json"

log() { printf 'setup-typescript: %s\n' "$*" >&2; }

command -v node >/dev/null 2>&1 || { log "error: no 'node' on PATH (Node >= 20 required)"; exit 1; }
command -v npm >/dev/null 2>&1 || { log "error: no 'npm' on PATH"; exit 1; }

# Fingerprint of what an install depends on: both manifests, the platform and Node's major version.
fingerprint() {
  node -e '
    const fs = require("fs"), crypto = require("crypto");
    const h = crypto.createHash("sha256");
    for (const f of process.argv.slice(1)) h.update(fs.readFileSync(f));
    h.update(process.platform + "-" + process.arch + "-" + process.versions.node.split(".")[0]);
    process.stdout.write(h.digest("hex"));
  ' "$TS_DIR/package.json" "$TS_DIR/package-lock.json"
}

is_fresh() {
  [[ -f "$STAMP" && -x "$PROTOC_GEN_ES" && -x "$TSC" && -f "$CONNECT_NODE" ]] || return 1
  [[ "$(cat "$STAMP")" == "$(fingerprint)" ]] || return 1
}

install() {
  log "installing TypeScript client packages into $MODULES (npm ci)"
  rm -f "$STAMP"
  npm ci --prefix "$TS_DIR" --no-audit --no-fund >&2
  [[ -x "$PROTOC_GEN_ES" && -x "$TSC" && -f "$CONNECT_NODE" ]] || {
    log "error: packages missing after npm ci"
    exit 1
  }
  fingerprint >"$STAMP"
}

if ! is_fresh; then
  if command -v flock >/dev/null 2>&1; then
    # Serialize concurrent callers; re-check once the lock is held.
    exec 9>"$TS_DIR/.setup-typescript.lock"
    flock 9
    is_fresh || install
    flock -u 9
  else
    install
  fi
else
  log "node_modules up to date"
fi

for kv in "M3_TS_DIR=$TS_DIR" "M3_PROTOC_GEN_ES=$PROTOC_GEN_ES" "M3_TSC=$TSC"; do
  printf '%s=%q\n' "${kv%%=*}" "${kv#*=}"
done
