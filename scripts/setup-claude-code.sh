#!/usr/bin/env bash
# Install Anthropic's Claude Code CLI (npm package @anthropic-ai/claude-code, pinned in
# tools/claude-code/package-lock.json) for the `claude-code` harness. The native binary ships inside
# the registry package for the platform (an optional dependency per platform, e.g.
# @anthropic-ai/claude-code-linux-x64/claude), so nothing is downloaded outside `npm ci`; the
# wrapper's postinstall would only copy that file over its bin/claude.exe placeholder; it is not
# run (--ignore-scripts): the harness runs the platform package's binary itself.
#
# Idempotent and safe to call from several processes at once (see scripts/lib/npm-ci-once.sh).
#
# stdout: M3_CLAUDE_CODE_BIN=<absolute path of the native claude binary>, usable as
#         `eval "$(bash scripts/setup-claude-code.sh)"`; the harness reads M3_CLAUDE_CODE_BIN.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/npm-ci-once.sh
source "$ROOT/scripts/lib/npm-ci-once.sh"

DIR="$ROOT/tools/claude-code"
SCOPE="$DIR/node_modules/@anthropic-ai"

# The platform package's own binary (not the wrapper's bin/claude.exe, which is a placeholder
# script until the postinstall has run): the harness runs it directly, so stopping it stops
# Claude Code itself. Exactly one platform package is installed (npm picks it by os/cpu/libc).
native_binary() {
  find "$SCOPE" -mindepth 2 -maxdepth 2 -path "$SCOPE/claude-code-*/claude" -type f -perm -u+x |
    head -n 1
}
has_native_binary() { [[ -n "$(native_binary)" ]]; }

npm_ci_once -d "the Claude Code CLI" -f "$SCOPE/claude-code/package.json" -c has_native_binary \
  "$DIR" setup-claude-code --ignore-scripts

BIN="$(native_binary)"
[[ -n "$BIN" ]] || { echo "setup-claude-code: error: no native claude binary under $SCOPE" >&2; exit 1; }
printf 'M3_CLAUDE_CODE_BIN=%q\n' "$BIN"
