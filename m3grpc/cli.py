"""The `m3grpc` command line.

m3grpc serve [--config m3.toml] [--listen HOST:PORT] [--log-level LEVEL]
             [--log-format text|json] [--metrics-listen HOST:PORT]
             [--inbox-listen HOST:PORT]
m3grpc hash-token     (reads a token on stdin, prints its `sha256:` config form)
m3grpc db upgrade|status, check-config, health   (m3grpc/ops/)
m3grpc demo ...        (when m3grpc.demo exists)
m3grpc submit|status|result|cancel|pending|respond|watch|rounds ...
                       (remote verbs over the gRPC API: m3grpc/cli_remote/)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from m3grpc.api import process_memory
from m3grpc.cli_remote import add_commands as add_remote_commands
from m3grpc.cli_remote.exits import STDOUT_CLOSED
from m3grpc.ops.commands import register as register_ops_commands

# What `serve` and `demo` need beyond the remote client's dependencies (the
# `server` extra of the distribution).
_SERVER_MODULES = (
    "sqlalchemy",
    "alembic",
    "jsonschema",
    "mcp",
    "grpc_health",
    "grpc_reflection",
    "prometheus_client",
)


def _missing_server_modules() -> list[str]:
    return [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]


def _require_server(command: str) -> bool:
    missing = _missing_server_modules()
    if missing:
        print(
            f"m3grpc: `m3grpc {command}` needs the server extra "
            f"(pip install 'm3grpc[server]'); missing: {', '.join(missing)}",
            file=sys.stderr,
        )
    return not missing


# Memory set-up before the service's threads and libraries (shared with the worker
# processes of `workers.processes`): malloc arenas capped at two, no trio.
_limit_malloc_arenas = process_memory.limit_malloc_arenas
_skip_trio = process_memory.skip_trio


def _serve(args: argparse.Namespace) -> int:
    if not _require_server("serve"):
        return 2
    _limit_malloc_arenas()
    _skip_trio()
    # Before grpc is imported: its C core reads GRPC_VERBOSITY once, at load.
    from m3grpc.api.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    # Imported here so `m3grpc --help` stays fast and needs no grpc.
    from m3grpc.api.config import ConfigError, load_config
    from m3grpc.api.server import StartupError, serve

    try:
        config = load_config(args.config)
        asyncio.run(
            serve(
                config,
                listen=args.listen,
                metrics_listen=args.metrics_listen,
                inbox_listen=args.inbox_listen,
                config_source=args.config,
            )
        )
    except (ConfigError, StartupError) as exc:
        # One line and exit status 2, no traceback: the operator's input is wrong.
        print(f"m3grpc: {exc}", file=sys.stderr)
        return 2
    return 0


def _hash_token(args: argparse.Namespace) -> int:
    # The token comes on stdin, never as an argument (which shell history and
    # `ps` would show). hashlib here, like m3grpc.api.auth.token_hash, so that
    # this needs no server modules.
    import hashlib

    token = sys.stdin.readline().strip()
    if not token:
        print("m3grpc: hash-token reads the token from stdin; got none", file=sys.stderr)
        return 2
    print("sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest())
    return 0


# -- demo: a separate slot; the module is written elsewhere ----------------------------


def _demo_available() -> bool:
    return importlib.util.find_spec("m3grpc.demo") is not None


def _demo(argv: Sequence[str]) -> int:
    if not _require_server("demo"):
        return 2
    demo = importlib.import_module("m3grpc.demo")
    result = demo.main(list(argv))
    return int(result or 0)


# ----------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="m3grpc", description="M3 gRPC service")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--config", help="TOML configuration file (default: built-in defaults)")
    serve.add_argument("--listen", help="HOST:PORT; overrides the config (port 0: any free port)")
    serve.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"]
    )
    serve.add_argument(
        "--log-format", default="text", choices=["text", "json"], help="one line per event"
    )
    serve.add_argument(
        "--metrics-listen", help="HOST:PORT for Prometheus /metrics (default: off, or the config)"
    )
    serve.add_argument(
        "--inbox-listen",
        help="HOST:PORT for the web inbox (default: off, or the config's [inbox] listen)",
    )
    serve.set_defaults(run=_serve)
    hash_token = commands.add_parser(
        "hash-token", help="print the sha256: form of a bearer token read from stdin"
    )
    hash_token.set_defaults(run=_hash_token)
    register_ops_commands(commands, _require_server)  # db, check-config, health
    if _demo_available():
        demo = commands.add_parser("demo", help="run the demo", add_help=False)
        demo.add_argument("demo_args", nargs=argparse.REMAINDER)
    add_remote_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # the last lines' closed pipe shows here, not at exit
    except BrokenPipeError:
        # What the reader did not want is dropped, quietly, as other tools do; stdout
        # goes to /dev/null so that the interpreter's own flush at exit cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return STDOUT_CLOSED
    return code


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"] and _demo_available():
        return _demo(argv[1:])  # the demo parses its own arguments
    args = _parser().parse_args(argv)
    run = args.run
    return int(run(args))


if __name__ == "__main__":
    sys.exit(main())
