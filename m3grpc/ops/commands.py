"""The operator subcommands, registered on the `m3grpc` parser by m3grpc/cli.py.

Exit codes (all three commands): 0 fine; 1 a check failed (the database is
unreachable or its schema cannot be served, a binding is broken, the service is
not SERVING); 2 the input is wrong (unreadable or invalid config, missing extra).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

# cli.py's check that the server extra is installed (this layer cannot import cli).
RequireServer = Callable[[str], bool]

DEFAULT_HEALTH_PORT = 50051


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], require_server: RequireServer
) -> None:
    """Add `db`, `check-config` and `health` to the CLI's subcommands."""
    db = commands.add_parser("db", help="database schema: upgrade, status; rotate-key")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    for name, summary in (
        ("upgrade", "migrate the database to this version's schema (Alembic)"),
        ("status", "print the database's schema revision"),
        (
            "rotate-key",
            "re-encrypt every stored response with the first configured key "
            "($M3_ENCRYPTION_KEYS, else [encryption] key_file of --config)",
        ),
    ):
        sub = db_commands.add_parser(name, help=summary, description=summary)
        source = sub.add_mutually_exclusive_group()
        source.add_argument(
            "--config", help="TOML configuration file whose `database` to use (default: $M3_CONFIG)"
        )
        source.add_argument("--database", help="an SQLite path or database URL")
        sub.set_defaults(run=_runner(f"db {name}", require_server, _db))

    check = commands.add_parser(
        "check-config",
        help="validate a configuration, its server bindings and its database",
        description=(
            "Validate FILE (the model of m3grpc/api/config.py), each server binding "
            "(stdio command found, HTTP URL well formed) and the database (reachable, "
            "schema servable); print a summary. Exit 0: fine; 1: a check failed; "
            "2: FILE unreadable or invalid."
        ),
    )
    check.add_argument("file", nargs="?", help="the configuration file (default: $M3_CONFIG)")
    check.add_argument("--no-database", action="store_true", help="skip connecting to the database")
    check.set_defaults(run=_runner("check-config", require_server, _check_config))

    health = commands.add_parser(
        "health",
        help="ask a running server's gRPC health service (exit 0 when SERVING)",
        description=(
            "Call grpc.health.v1.Health/Check on a running server. Exit 0: SERVING; "
            "1: anything else, or unreachable. For container health checks."
        ),
    )
    health.add_argument(
        "--server",
        default=default_health_address(),
        help="HOST:PORT (default: $M3_SERVER, else 127.0.0.1 on the port of $M3_LISTEN, "
        f"else 127.0.0.1:{DEFAULT_HEALTH_PORT})",
    )
    health.add_argument("--service", default="", help="service name ('' : the whole server)")
    health.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    health.set_defaults(run=_runner("health", require_server, _health))


def default_health_address() -> str:
    server = os.environ.get("M3_SERVER")
    if server:
        return server
    listen = os.environ.get("M3_LISTEN", "")
    port = listen.rpartition(":")[2]
    if port.isdigit() and int(port) > 0:
        return f"127.0.0.1:{port}"
    return f"127.0.0.1:{DEFAULT_HEALTH_PORT}"


def _runner(
    command: str, require_server: RequireServer, run: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    def checked(args: argparse.Namespace) -> int:
        if not require_server(command):
            return 2
        return run(args)

    return checked


def _db(args: argparse.Namespace) -> int:
    from m3grpc.ops.db import run_db

    return run_db(args.db_command, config=args.config, database=args.database)


def _check_config(args: argparse.Namespace) -> int:
    from m3grpc.ops.check_config import run_check_config

    return run_check_config(args.file, check_database=not args.no_database)


def _health(args: argparse.Namespace) -> int:
    from m3grpc.ops.health import run_health

    return run_health(args.server, service=args.service, timeout=args.timeout)
