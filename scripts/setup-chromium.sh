#!/usr/bin/env bash
# Chromium for the web inbox's browser tests (tests/api/test_inbox_browser.py drives it
# with Playwright, the Python package from the `dev` extra, pointed at this browser:
# Playwright's own browser download is never used). Installs Debian's `chromium` package
# when the machine has none (as root, like scripts/setup-tmux.sh). Idempotent.
#
# stdout: M3_CHROMIUM=<path>, usable as `eval "$(bash scripts/setup-chromium.sh)"`.
# stderr: progress messages.
set -euo pipefail

find_chromium() { command -v chromium || command -v chromium-browser || true; }

if [[ -z "$(find_chromium)" ]]; then
  echo "installing chromium" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq chromium >&2
fi
CHROMIUM="$(find_chromium)"
echo "chromium: $CHROMIUM" >&2
echo "M3_CHROMIUM=$CHROMIUM"
