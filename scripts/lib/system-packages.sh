# shellcheck shell=bash
# Sourced library: install missing Debian/Ubuntu packages, or say in one line how to.
#
#   source "$ROOT/scripts/lib/system-packages.sh"
#   install_system_packages WHO PACKAGE...
#
# As root it runs apt-get itself; as another user it uses `sudo -n` (never a password
# prompt: the test command runs unattended). When it can do neither (no sudo, or sudo
# wants a password, or no apt-get), it prints ONE line on stderr naming the packages and
# the command that installs them, and returns 1. Nothing to install: returns 0 at once.
# WHO prefixes the messages (the calling script's name). Progress goes to stderr only.

install_system_packages() {
  local who="$1"
  shift
  (($# > 0)) || return 0
  local -a as_root=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
      as_root=(sudo -n)
    else
      printf '%s: missing system packages: %s; install them with: sudo apt-get install -y %s\n' \
        "$who" "$*" "$*" >&2
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    printf "%s: missing system packages: %s (Debian's names); install them with the system's package manager\n" \
      "$who" "$*" >&2
    return 1
  fi
  printf '%s: installing %s\n' "$who" "$*" >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || return
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# What the test suite takes from the system, each found on PATH or where Debian puts it.
find_tmux() { command -v tmux; }
find_chromium() { command -v chromium || command -v chromium-browser; }
# The directory of PostgreSQL's server programs (initdb, pg_ctl).
find_postgres_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [[ -x "$dir/pg_ctl" && -x "$dir/initdb" ]]; then echo "$dir"; return 0; fi
  done
  local pg_ctl
  pg_ctl="$(command -v pg_ctl)" && [[ -x "$(dirname "$pg_ctl")/initdb" ]] && dirname "$pg_ctl"
}

# The Debian packages of those that this machine lacks, on one line ("" when none).
missing_test_packages() {
  local -a missing=()
  find_tmux >/dev/null 2>&1 || missing+=(tmux)
  find_chromium >/dev/null 2>&1 || missing+=(chromium)
  find_postgres_bin >/dev/null 2>&1 || missing+=(postgresql)
  echo "${missing[*]}"
}
