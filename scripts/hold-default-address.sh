#!/usr/bin/env bash
# The README's own service (`m3grpc serve --config examples/m3.toml`, its SQLite file in a
# temporary directory) on its default address, 127.0.0.1:50051, while the tests run:
# scripts/test.sh runs the suite beside it, as a user's machine may, so that a test
# which binds that port (or expects it free) fails in CI too. When something already
# listens there, that something holds it, and the tests run beside it all the same.
#
#   eval "$(bash scripts/hold-default-address.sh start)"   # sets M3_HOLD_DIR
#   bash scripts/hold-default-address.sh stop "$M3_HOLD_DIR"
#
# Run it with the project's python3 first on PATH (scripts/test.sh does).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ADDRESS="127.0.0.1:50051"

start() {
  local dir pid
  dir="$(mktemp -d -t m3-hold-XXXXXX)"
  sed "s|^database = \"m3.sqlite\"|database = \"$dir/m3.sqlite\"|" examples/m3.toml >"$dir/m3.toml"
  grep -q "^database = \"$dir/m3.sqlite\"" "$dir/m3.toml" \
    || { echo "hold-default-address: examples/m3.toml has no 'database = \"m3.sqlite\"' line" >&2; return 1; }
  grep -q "^listen = \"$ADDRESS\"" "$dir/m3.toml" \
    || { echo "hold-default-address: examples/m3.toml does not listen on $ADDRESS" >&2; return 1; }
  python3 -m m3grpc serve --config "$dir/m3.toml" </dev/null >"$dir/out" 2>"$dir/err" &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 600); do
    if grep -q "^m3grpc serving on $ADDRESS" "$dir/out"; then
      echo "hold-default-address: the example service serves on $ADDRESS (pid $pid)" >&2
      printf 'M3_HOLD_DIR=%q\n' "$dir"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      if grep -q "cannot listen on $ADDRESS" "$dir/err"; then
        echo "hold-default-address: $ADDRESS is taken already; the tests run beside its holder" >&2
        rm -f "$dir/pid"
        printf 'M3_HOLD_DIR=%q\n' "$dir"
        return 0
      fi
      echo "hold-default-address: the example service did not start:" >&2
      cat "$dir/err" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "hold-default-address: the example service was not ready within 60 s" >&2
  kill "$pid" 2>/dev/null || true
  return 1
}

stop() {
  local dir="$1" pid
  [[ -n "$dir" && -d "$dir" ]] || return 0
  if [[ -f "$dir/pid" ]]; then
    pid="$(cat "$dir/pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
