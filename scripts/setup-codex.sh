#!/usr/bin/env bash
# Install OpenAI's Codex CLI (npm package @openai/codex, pinned in tools/codex/package-lock.json)
# for the `codex` harness. The platform binary ships inside the registry package (an optional
# dependency per platform), so nothing is downloaded outside `npm ci`.
#
# Idempotent and safe to call from several processes at once (see scripts/lib/npm-ci-once.sh).
#
# stdout: M3_CODEX_BIN=<absolute path of the native codex binary>, usable as
#         `eval "$(bash scripts/setup-codex.sh)"`; the harness reads M3_CODEX_BIN.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/npm-ci-once.sh
source "$ROOT/scripts/lib/npm-ci-once.sh"

DIR="$ROOT/tools/codex"
LAUNCHER="$DIR/node_modules/@openai/codex/bin/codex.js"

npm_ci_once -d "the Codex CLI" -f "$LAUNCHER" "$DIR" setup-codex

# The launcher (bin/codex.js) only finds and execs the native binary; the harness runs that
# binary directly, so stopping it stops Codex itself and not a Node wrapper.
BIN="$(find "$DIR/node_modules/@openai" -path '*/vendor/*' -type f -name codex -perm -u+x | head -n 1)"
[[ -n "$BIN" ]] || { echo "setup-codex: error: no native codex binary under $DIR/node_modules" >&2; exit 1; }
printf 'M3_CODEX_BIN=%q\n' "$BIN"
