"""The remote verbs' command line (argparse only: building it loads no grpc).

    m3grpc submit [SPEC|-] [--binding NAME] [--prompt TEXT] [--tool T]... [--harness H]
                  [--model M]... [--human-input managed|fail] [--request-id ID]
    m3grpc status EXECUTION_ID
    m3grpc result EXECUTION_ID [--wait SECONDS]
    m3grpc cancel EXECUTION_ID
    m3grpc pending EXECUTION_ID [--wait SECONDS]
    m3grpc respond (ROUND_ID | --execution ID)
                   (--accept [JSON|@FILE|-] | --decline | --cancel | --responses JSON|@FILE|-
                    | --interactive) [--key REQUEST_KEY] [--idempotency-key KEY]
    m3grpc watch [--execution ID] [--cursor CURSOR] [--kind KIND]... [--until-terminal]
    m3grpc rounds list [--execution ID] [--status STATUS]... [--page-size N]
                       [--page-token T] [--all]
    m3grpc rounds get ROUND_ID

Every verb takes `--server HOST:PORT` (default: $M3_SERVER, else 127.0.0.1:50051,
the address `m3grpc serve` listens on by default) and `--json`. A service with
TLS or tokens is reached through the environment (m3grpc/cli_remote/security.py):
$M3_TOKEN, $M3_TLS_CA, $M3_TLS_CERT, $M3_TLS_KEY, $M3_TLS_SERVER_NAME.
Exit codes: m3grpc/cli_remote/exits.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from typing import Any

SERVER_ENV = "M3_SERVER"
# The default listen address of `m3grpc serve` (m3grpc.api.config.DEFAULT_LISTEN;
# a test keeps the two equal, this layer may not import the service's).
DEFAULT_SERVER = "127.0.0.1:50051"

EPILOG = """exit codes: 0 ok; 1 the execution did not succeed; 2 bad input; 3 not found;
4 conflict or wrong state; 5 unavailable (retry later); 6 timed out; 7 internal;
130 interrupted. Errors print one line: m3grpc: <REASON>: <message>."""

_STATUSES = (
    "pending",
    "response_validated",
    "delivery_started",
    "delivered",
    "resolved",
    "failed",
)
# WatchPending's event kinds, named as `watch --json` names each event (the client's
# m3grpc.wire.events.WATCH_EVENT_CLASSES; a test keeps the two equal, this layer
# imports no protobuf).
WATCH_KINDS = ("round_pending", "round_left_pending", "execution_finished")


def _seconds(text: str) -> float:
    """A --wait: a number of seconds (`inf`: without limit), not NaN."""
    value = float(text)  # a ValueError is argparse's "invalid _seconds value"
    if math.isnan(value):
        raise argparse.ArgumentTypeError("not a number of seconds")
    return value


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        default=os.environ.get(SERVER_ENV) or DEFAULT_SERVER,
        metavar="HOST:PORT",
        help=f"the m3grpc service (default: ${SERVER_ENV}, else {DEFAULT_SERVER})",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    return common


def add_commands(commands: Any) -> None:
    """Add the remote verbs to `m3grpc`'s subcommands (an argparse subparsers action)."""
    common = _common()

    def verb(name: str, help_text: str, key: str | None = None) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(
            name, help=help_text, description=help_text, parents=[common], epilog=EPILOG
        )
        parser.set_defaults(run=run, remote_verb=key or name)
        return parser

    submit = verb("submit", "submit an agent spec (JSON or TOML) to the service")
    submit.add_argument(
        "spec", nargs="?", metavar="SPEC", help="AgentSpec file (.json or .toml), or - for stdin"
    )
    submit.add_argument("--binding", help="the server binding to run against (the spec's server)")
    submit.add_argument("--prompt", help="the agent's prompt (overrides the spec's)")
    submit.add_argument("--tool", action="append", help="a selected tool SERVER:TOOL (repeatable)")
    submit.add_argument(
        "--harness", help="the agent harness: scripted (default), codex or claude-code"
    )
    submit.add_argument("--model", action="append", help="a model for the harness (repeatable)")
    submit.add_argument(
        "--human-input",
        choices=["fail", "managed"],
        help="managed: elicitations become pending rounds to answer; fail: only the "
        "spec's elicitation_plan answers them (default: managed, or fail for a spec "
        "with an elicitation_plan)",
    )
    submit.add_argument(
        "--request-id", help="idempotency key of the submission: the same ID, the same execution"
    )

    for name, help_text in (
        ("status", "show an execution's state"),
        ("cancel", "cancel an execution"),
    ):
        verb(name, help_text).add_argument("execution_id", metavar="EXECUTION_ID")

    result = verb("result", "wait for an execution's result (exit 1 unless it succeeded)")
    result.add_argument("execution_id", metavar="EXECUTION_ID")
    result.add_argument("--wait", type=_seconds, metavar="SECONDS", help="give up after this long")

    pending = verb("pending", "show an execution's pending round and its requested fields")
    pending.add_argument("execution_id", metavar="EXECUTION_ID")
    pending.add_argument(
        "--wait", type=_seconds, metavar="SECONDS", help="wait up to this long for a round"
    )

    respond = verb("respond", "answer a pending round")
    target = respond.add_mutually_exclusive_group(required=True)
    target.add_argument("round_id", nargs="?", metavar="ROUND_ID")
    target.add_argument("--execution", metavar="ID", help="answer this execution's pending round")
    answer = respond.add_mutually_exclusive_group(required=True)
    answer.add_argument(
        "--accept",
        nargs="?",
        const=None,
        default=argparse.SUPPRESS,
        metavar="JSON|@FILE|-",
        help="accept, with the form's content (inline JSON, a file, or - for stdin); "
        "alone for a URL request (then give ROUND_ID before it)",
    )
    answer.add_argument("--decline", action="store_true", help="decline")
    answer.add_argument("--cancel", action="store_true", help="cancel")
    answer.add_argument(
        "--responses",
        metavar="JSON|@FILE|-",
        help='every request\'s answer: {"KEY": {"action": ..., "content": {...}}}',
    )
    answer.add_argument(
        "--interactive", action="store_true", help="answer field by field at the terminal"
    )
    respond.add_argument("--key", help="the request to answer (default: every request)")
    respond.add_argument(
        "--idempotency-key", help="retry-safe key of this answer (default: a new one, printed)"
    )

    watch = verb("watch", "stream pending rounds and their changes until interrupted")
    watch.add_argument("--execution", metavar="ID", help="only this execution's events")
    watch.add_argument("--cursor", help="resume after this event's cursor")
    watch.add_argument(
        "--kind",
        action="append",
        choices=WATCH_KINDS,
        help="only events of this kind (repeatable; default: every kind); "
        "a skipped event still moves the cursor",
    )
    watch.add_argument(
        "--until-terminal",
        action="store_true",
        help="stop when an execution finishes (also when --kind leaves out "
        "execution_finished: the finish ends the watch but is not printed)",
    )

    rounds = commands.add_parser("rounds", help="inspect rounds (responses redacted)")
    which = rounds.add_subparsers(dest="rounds_command", required=True)
    listing = which.add_parser(
        "list", help="list rounds", parents=[common], epilog=EPILOG, description="list rounds"
    )
    listing.set_defaults(run=run, remote_verb="rounds list")
    listing.add_argument("--execution", metavar="ID", help="only this execution's rounds")
    listing.add_argument(
        "--status", action="append", choices=_STATUSES, help="only these statuses (repeatable)"
    )
    listing.add_argument("--page-size", type=int, default=0, help="rounds per page (default 50)")
    listing.add_argument("--page-token", help="continue from a previous page")
    listing.add_argument("--all", action="store_true", help="every page")
    get = which.add_parser(
        "get", help="show a round", parents=[common], epilog=EPILOG, description="show a round"
    )
    get.set_defaults(run=run, remote_verb="rounds get")
    get.add_argument("round_id", metavar="ROUND_ID")


def run(args: argparse.Namespace) -> int:
    """Run a remote verb; a typed error becomes one stderr line and its exit code."""
    if not hasattr(args, "accept"):  # --accept's default is "not given" (SUPPRESS)
        args.accept = None
    # Loaded here so that `m3grpc --help` and `serve` never import grpc for these.
    errors = importlib.import_module("m3grpc.errors")
    exits = importlib.import_module("m3grpc.cli_remote.exits")
    try:
        verbs = importlib.import_module("m3grpc.cli_remote.verbs")
        code: int = verbs.VERBS[args.remote_verb](args)
        return code
    except errors.M3Error as error:
        print(exits.error_line(error), file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(exits.error_document(error), indent=2), flush=True)
        return int(exits.exit_code(error))
    except KeyboardInterrupt:
        print("m3grpc: interrupted; nothing more was sent", file=sys.stderr, flush=True)
        return int(exits.INTERRUPTED)
