#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for the test suite and print
# its URL (export it as M3_TEST_POSTGRES_URL). Idempotent: reuses a running server.
#
# The server is a cluster of its own (initdb into a directory under /tmp, pg_ctl),
# never the system's: as root it runs as the unprivileged 'postgres' user (the
# server refuses root); as any other user it runs as that user. Each user gets a
# port and a directory of their own, so two users' test runs on one machine do not
# meet: root 55432 in /tmp/m3-postgres-55432, a user 55433 + UID % 1000 in
# /tmp/m3-postgres-UID-PORT (M3_PG_PORT and M3_PG_DATA choose others).
# The server programs come from Debian's `postgresql` package, installed when the
# machine has none (as root, or through `sudo -n`; otherwise one line says how:
# scripts/lib/system-packages.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=SCRIPTDIR/lib/system-packages.sh
source "$ROOT/scripts/lib/system-packages.sh"

if [ "$(id -u)" = 0 ]; then
  PGPORT="${M3_PG_PORT:-55432}"
  PGDATA="${M3_PG_DATA:-/tmp/m3-postgres-$PGPORT}"
else
  PGPORT="${M3_PG_PORT:-$((55433 + $(id -u) % 1000))}"
  PGDATA="${M3_PG_DATA:-/tmp/m3-postgres-$(id -u)-$PGPORT}"
fi
URL="postgresql+psycopg://m3@127.0.0.1:$PGPORT/postgres"

if ! PGBIN="$(find_postgres_bin)"; then
  install_system_packages start-postgres postgresql
  PGBIN="$(find_postgres_bin)"
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
  chmod 0700 "$PGDATA"
  if [ "$(id -u)" = 0 ]; then chown postgres "$PGDATA"; fi
  # UTF8 whatever the caller's locale: with LANG unset (sudo, a minimal container)
  # initdb would pick SQL_ASCII, and psycopg then returns bytes for every string.
  "${RUNAS[@]}" "$PGBIN/initdb" -D "$PGDATA" -U m3 --auth=trust --no-sync \
    --encoding=UTF8 --locale=C >/dev/null
}

start_server() {
  "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGDATA -c fsync=off -c max_connections=200" \
    start >/dev/null
}

[ -s "$PGDATA/PG_VERSION" ] || init_cluster
if ! "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  # A cluster left behind by a killed run may not start again: start afresh.
  start_server || { init_cluster && start_server; } || {
    echo "start-postgres: the server did not start on 127.0.0.1:$PGPORT (port taken? set M3_PG_PORT); its log:" >&2
    tail -n 5 "$PGDATA/server.log" >&2 || true
    exit 1
  }
fi
echo "$URL"
