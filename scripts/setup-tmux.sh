#!/usr/bin/env bash
# tmux for the interactive CLI test (tests/cli/test_interactive.py drives
# `m3grpc respond --interactive` in a tmux session). Installs Debian's package when the
# machine has none: as root, or through `sudo -n`; otherwise it fails with one line
# naming the package and the command that installs it (scripts/lib/system-packages.sh).
# Idempotent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/system-packages.sh
source "$ROOT/scripts/lib/system-packages.sh"

find_tmux >/dev/null || install_system_packages setup-tmux tmux
tmux -V >&2
