#!/usr/bin/env bash
# tmux for the interactive CLI test (tests/cli/test_interactive.py drives
# `m3grpc respond --interactive` in a tmux session). Installs Debian's package
# when the machine has none (as root, like scripts/start-postgres.sh). Idempotent.
set -euo pipefail

if ! command -v tmux >/dev/null 2>&1; then
  echo "installing tmux" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq tmux >&2
fi
tmux -V >&2
