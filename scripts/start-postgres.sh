#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for the test suite and print
# its URL (export it as M3_TEST_POSTGRES_URL). Installs the server from Debian's
# packages when the machine has none. Idempotent: reuses a running server.
set -euo pipefail

PGPORT="${M3_PG_PORT:-55432}"
PGDATA="${M3_PG_DATA:-/tmp/m3-postgres-$PGPORT}"
URL="postgresql+psycopg://m3@127.0.0.1:$PGPORT/postgres"

find_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
  done
  return 1
}

if ! PGBIN="$(find_bin)"; then
  echo "installing PostgreSQL server" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  PGBIN="$(find_bin)"
fi

# The server refuses to run as root: run it as the unprivileged 'postgres' user.
RUNAS=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  RUNAS=(runuser -u postgres --)
fi

init_cluster() {
  rm -rf "$PGDATA"
  mkdir -p "$PGDATA"
  if [ "$(id -u)" = 0 ]; then chown postgres "$PGDATA"; fi
  "${RUNAS[@]}" "$PGBIN/initdb" -D "$PGDATA" -U m3 --auth=trust --no-sync >/dev/null
}

start_server() {
  "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGDATA -c fsync=off -c max_connections=200" \
    start >/dev/null
}

[ -s "$PGDATA/PG_VERSION" ] || init_cluster
if ! "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  # A cluster left behind by a killed run may not start again: start afresh.
  start_server || { init_cluster && start_server; }
fi
echo "$URL"
