#!/usr/bin/env bash
# Chromium for the web inbox's browser tests (tests/api/test_inbox_browser.py drives it
# with Playwright, the Python package from the `dev` extra, pointed at this browser:
# Playwright's own browser download is never used). Installs Debian's `chromium` package
# when the machine has none: as root, or through `sudo -n`; otherwise it fails with one
# line naming the package and the command that installs it
# (scripts/lib/system-packages.sh). Idempotent.
#
# stdout: M3_CHROMIUM=<path>, usable as `eval "$(bash scripts/setup-chromium.sh)"`.
# stderr: progress messages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/system-packages.sh
source "$ROOT/scripts/lib/system-packages.sh"

find_chromium >/dev/null || install_system_packages setup-chromium chromium
CHROMIUM="$(find_chromium)"
echo "chromium: $CHROMIUM" >&2
echo "M3_CHROMIUM=$CHROMIUM"
