#!/bin/sh
# The container's entrypoint: find or write the service configuration, then exec m3grpc.
#
# The configuration, first that applies:
#   M3_CONFIG_TOML   the whole TOML file in one variable (written to $M3_RUNTIME_DIR/m3.toml)
#   M3_CONFIG        the path of a mounted TOML file (default /etc/m3grpc/m3.toml, if present)
#   otherwise one is written from M3_DATABASE (default /data/m3.sqlite, the volume;
#                    an SQLite path or a postgresql+psycopg:// URL), M3_ALLOW_INSECURE
#                    (1: `allow_insecure = true`; the service refuses 0.0.0.0 without TLS
#                    and authentication otherwise; a given configuration says it itself)
#                    and M3_EXAMPLE_SERVER (1, the default: bind the bundled example MCP
#                    server, $M3_EXAMPLES_DIR/shipping_server.py, as `shipping`, so that
#                    a first run shows a whole round; 0: bind nothing)
# Always:
#   M3_LISTEN        HOST:PORT served on (default 0.0.0.0:50051; overrides the file's listen)
#   M3_LOG_LEVEL     debug, info, warning or error (default info)
#   M3_DB_UPGRADE    1: run `m3grpc db upgrade` before serving (default 0; an empty
#                    database gets its schema on first start either way)
#   M3_RUNTIME_DIR   where a written configuration goes (default /tmp/m3grpc)
#   M3_EXAMPLES_DIR  where the example server is (default /usr/local/share/m3grpc/examples)
#
# Arguments: none, or options (-...): `m3grpc serve` with those options added; an
# m3grpc command (serve, db, check-config, health): `m3grpc ARGS` with M3_CONFIG
# exported, so `docker run IMAGE db upgrade` migrates the configured database;
# anything else is run as given.
set -eu

fail() {
    echo "m3grpc-entrypoint: $*" >&2
    exit 2
}

# A TOML basic string: JSON's escaping is valid TOML.
toml_string() {
    python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"
}

runtime_dir="${M3_RUNTIME_DIR:-/tmp/m3grpc}"
listen="${M3_LISTEN:-0.0.0.0:50051}"
log_level="${M3_LOG_LEVEL:-info}"

if [ -n "${M3_CONFIG_TOML:-}" ] || [ -n "${M3_CONFIG:-}" ] || [ -f /etc/m3grpc/m3.toml ]; then
    [ -z "${M3_ALLOW_INSECURE:-}" ] ||
        fail "set allow_insecure in the configuration, not M3_ALLOW_INSECURE beside it"
    [ -z "${M3_EXAMPLE_SERVER:-}" ] ||
        fail "bind servers in the configuration, not with M3_EXAMPLE_SERVER beside it"
fi
if [ -n "${M3_CONFIG_TOML:-}" ]; then
    [ -z "${M3_DATABASE:-}" ] || fail "set database in M3_CONFIG_TOML, not M3_DATABASE beside it"
    mkdir -p "$runtime_dir"
    config="$runtime_dir/m3.toml"
    printf '%s\n' "$M3_CONFIG_TOML" >"$config"
elif [ -n "${M3_CONFIG:-}" ] || [ -f /etc/m3grpc/m3.toml ]; then
    config="${M3_CONFIG:-/etc/m3grpc/m3.toml}"
    [ -f "$config" ] || fail "M3_CONFIG=$config: no such file (mount it, or unset M3_CONFIG)"
    [ -z "${M3_DATABASE:-}" ] || fail "set database in $config, not M3_DATABASE beside it"
else
    mkdir -p "$runtime_dir"
    config="$runtime_dir/m3.toml"
    printf 'database = %s\n' "$(toml_string "${M3_DATABASE:-/data/m3.sqlite}")" >"$config"
    case "${M3_ALLOW_INSECURE:-0}" in
        1) printf 'allow_insecure = true\n' >>"$config" ;;
        0) ;;
        *) fail "M3_ALLOW_INSECURE=${M3_ALLOW_INSECURE}: 1 or 0" ;;
    esac
    case "${M3_EXAMPLE_SERVER:-1}" in
        1)
            example="${M3_EXAMPLES_DIR:-/usr/local/share/m3grpc/examples}/shipping_server.py"
            [ -f "$example" ] || fail "M3_EXAMPLE_SERVER=1: $example: no such file"
            # python3 is the image's virtual environment's, which has the MCP SDK.
            printf '[servers.shipping]\ncommand = "python3"\nargs = [%s]\nprotocol = "legacy"\n' \
                "$(toml_string "$example")" >>"$config"
            ;;
        0) ;;
        *) fail "M3_EXAMPLE_SERVER=${M3_EXAMPLE_SERVER}: 1 or 0" ;;
    esac
fi
export M3_CONFIG="$config"
export M3_LISTEN="$listen"

serve() {
    if [ "${M3_DB_UPGRADE:-0}" = "1" ]; then
        m3grpc db upgrade --config "$config"
    fi
    exec m3grpc serve --config "$config" --listen "$listen" --log-level "$log_level" "$@"
}

if [ "$#" -eq 0 ]; then
    serve
fi
case "$1" in
    -*) serve "$@" ;;
    serve) shift; serve "$@" ;;
    db | check-config | health) exec m3grpc "$@" ;;
    *) exec "$@" ;;
esac
