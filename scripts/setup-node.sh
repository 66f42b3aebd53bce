#!/usr/bin/env bash
# Install the Node.js tools the Python tests use, from tests/node/package-lock.json:
#   - @modelcontextprotocol/server-everything  (MCP server driven over stdio; runs on Node >= 20)
#   - @modelcontextprotocol/conformance        (MCP client conformance suite, newest stable; needs
#                                               Node >= 22)
#   - conformance-next                         (npm alias: the same suite, newest pre-release)
#   - node@22                                  (a Node 22 binary under node_modules, for conformance;
#                                               the system Node is left alone)
#
# Needs only a system `node` (>= 20) and `npm` on PATH. Idempotent and safe to call from several
# processes at once: `npm ci` runs only when tests/node/node_modules is missing or stale (see
# scripts/lib/npm-ci-once.sh).
#
# stdout: KEY=VALUE lines (absolute paths), usable as `eval "$(scripts/setup-node.sh)"`.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/npm-ci-once.sh
source "$ROOT/scripts/lib/npm-ci-once.sh"

NODE_DIR="$ROOT/tests/node"
MODULES="$NODE_DIR/node_modules"
NODE22="$MODULES/node/bin/node"  # written by node@22's preinstall script
CONFORMANCE_JS="$MODULES/@modelcontextprotocol/conformance/dist/index.js"
CONFORMANCE_NEXT_JS="$MODULES/conformance-next/dist/index.js"
EVERYTHING_JS="$MODULES/@modelcontextprotocol/server-everything/dist/index.js"

node22_is_v22() { [[ "$("$NODE22" --version 2>/dev/null)" == v22.* ]]; }

# engine-strict off: a transitive dependency declares node >= 22 but server-everything runs on
# the system Node 20; only the conformance CLI needs Node 22, and it gets the node@22 binary.
npm_ci_once -d "Node test tools" -x "$NODE22" -f "$CONFORMANCE_JS" -f "$CONFORMANCE_NEXT_JS" \
  -f "$EVERYTHING_JS" \
  -c node22_is_v22 "$NODE_DIR" setup-node --engine-strict=false

SYSTEM_NODE="$(command -v node)"
for kv in "M3_NODE_DIR=$NODE_DIR" "M3_SYSTEM_NODE=$SYSTEM_NODE" "M3_NODE22=$NODE22" \
  "M3_CONFORMANCE_JS=$CONFORMANCE_JS" "M3_CONFORMANCE_NEXT_JS=$CONFORMANCE_NEXT_JS" \
  "M3_EVERYTHING_JS=$EVERYTHING_JS"; do
  printf '%s=%q\n' "${kv%%=*}" "${kv#*=}"
done
