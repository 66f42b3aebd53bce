#!/usr/bin/env bash
# Install the Node.js tools the Python tests use, from tests/node/package-lock.json:
#   - @modelcontextprotocol/server-everything  (MCP server driven over stdio; runs on Node >= 20)
#   - @modelcontextprotocol/conformance        (MCP client conformance suite; needs Node >= 22)
#   - node@22                                  (a Node 22 binary under node_modules, for conformance;
#                                               the system Node is left alone)
#
# Needs only a system `node` (>= 20) and `npm` on PATH. Idempotent: `npm ci` runs only when
# tests/node/node_modules is missing or stale (package.json / package-lock.json changed since the
# last install, or an expected file is missing). Safe to call from several processes at once.
#
# stdout: KEY=VALUE lines (absolute paths), usable as `eval "$(scripts/setup-node.sh)"`.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/tests/node"
MODULES="$NODE_DIR/node_modules"
STAMP="$MODULES/.m3-setup-stamp"

NODE22="$MODULES/node/bin/node"
CONFORMANCE_JS="$MODULES/@modelcontextprotocol/conformance/dist/index.js"
EVERYTHING_JS="$MODULES/@modelcontextprotocol/server-everything/dist/index.js"

log() { printf 'setup-node: %s\n' "$*" >&2; }

command -v node >/dev/null 2>&1 || { log "error: no 'node' on PATH (Node >= 20 required)"; exit 1; }
command -v npm >/dev/null 2>&1 || { log "error: no 'npm' on PATH"; exit 1; }
SYSTEM_NODE="$(command -v node)"

# Fingerprint of what an install depends on: both manifests and the platform.
fingerprint() {
  node -e '
    const fs = require("fs"), crypto = require("crypto");
    const h = crypto.createHash("sha256");
    for (const f of process.argv.slice(1)) h.update(fs.readFileSync(f));
    h.update(process.platform + "-" + process.arch);
    process.stdout.write(h.digest("hex"));
  ' "$NODE_DIR/package.json" "$NODE_DIR/package-lock.json"
}

is_fresh() {
  [[ -f "$STAMP" && -x "$NODE22" && -f "$CONFORMANCE_JS" && -f "$EVERYTHING_JS" ]] || return 1
  [[ "$(cat "$STAMP")" == "$(fingerprint)" ]] || return 1
  [[ "$("$NODE22" --version 2>/dev/null)" == v22.* ]] || return 1
}

install() {
  log "installing Node test tools into $MODULES (npm ci)"
  rm -f "$STAMP"
  # engine-strict off: a transitive dependency declares node >= 22 but server-everything runs on
  # the system Node 20; only the conformance CLI needs Node 22, and it gets the node@22 binary.
  npm ci --prefix "$NODE_DIR" --no-audit --no-fund --engine-strict=false >&2
  [[ -x "$NODE22" ]] || { log "error: $NODE22 missing after npm ci (node@22 preinstall script skipped?)"; exit 1; }
  [[ "$("$NODE22" --version)" == v22.* ]] || { log "error: $NODE22 is not Node 22"; exit 1; }
  [[ -f "$CONFORMANCE_JS" && -f "$EVERYTHING_JS" ]] || { log "error: packages missing after npm ci"; exit 1; }
  fingerprint >"$STAMP"
}

if ! is_fresh; then
  if command -v flock >/dev/null 2>&1; then
    # Serialize concurrent callers; re-check once the lock is held.
    exec 9>"$NODE_DIR/.setup-node.lock"
    flock 9
    is_fresh || install
    flock -u 9
  else
    install
  fi
else
  log "node_modules up to date"
fi

for kv in "M3_NODE_DIR=$NODE_DIR" "M3_SYSTEM_NODE=$SYSTEM_NODE" "M3_NODE22=$NODE22" \
  "M3_CONFORMANCE_JS=$CONFORMANCE_JS" "M3_EVERYTHING_JS=$EVERYTHING_JS"; do
  printf '%s=%q\n' "${kv%%=*}" "${kv#*=}"
done
