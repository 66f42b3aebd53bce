"""Exit codes of the remote CLI verbs, and the one-line report of a failed call.

| code | meaning |
|---|---|
| 0 | done (`result`: the execution SUCCEEDED) |
| 1 | the execution did not succeed (`result`: FAILED or CANCELLED; `pending --wait`: it finished with no round pending) |
| 2 | bad input: usage, an unreadable or invalid JSON/TOML argument, INVALID_ARGUMENT (MODEL_VALIDATION_FAILED, MANAGED_INPUT_INVALID), UNAUTHENTICATED (no or a wrong $M3_TOKEN) |
| 3 | not found: NOT_FOUND (EXECUTION_NOT_FOUND, ROUND_NOT_FOUND, SERVER_BINDING_NOT_FOUND) |
| 4 | conflict or wrong state: ABORTED, FAILED_PRECONDITION (MANAGED_INPUT_CONFLICT, MANAGED_INPUT_STATE_INVALID, MANAGED_INPUT_RECOVERY_UNAVAILABLE, ...); `respond --execution` with no round pending (NO_PENDING_ROUND) |
| 5 | unavailable, retry later: UNAVAILABLE (no server, SERVICE_SHUTTING_DOWN, STORAGE_UNAVAILABLE), RESOURCE_EXHAUSTED (WORK_QUEUE_FULL, RATE_LIMITED) |
| 6 | timed out: DEADLINE_EXCEEDED (RESULT_WAIT_TIMEOUT, the call's deadline), `pending --wait` ran out |
| 7 | internal or unexpected: INTERNAL, UNKNOWN, any other status |
| 130 | interrupted (Ctrl-C) before the verb finished; `watch` ends with 0 instead |
| 141 | stdout closed before everything was printed (piped into `head -1`): nothing more is printed, and no traceback (every `m3grpc` command) |

A failed call prints one line on stderr, `m3grpc: <REASON>: <message>`, where
REASON is the ErrorInfo reason (or the gRPC code name when the status carries
none); with `--json` the same error also goes to stdout as
`{"error": {"reason", "code", "message", "metadata", "field_violations"}}`.
"""  # noqa: E501

from __future__ import annotations

from typing import Any

from m3grpc.errors import M3Error, ManagedInputValidationError, ModelValidationError

OK = 0
NOT_SUCCEEDED = 1
BAD_INPUT = 2
NOT_FOUND = 3
CONFLICT = 4
UNAVAILABLE = 5
TIMED_OUT = 6
INTERNAL = 7
INTERRUPTED = 130
# 128 + SIGPIPE, what a shell reports for a tool that SIGPIPE ended: the reader of
# stdout went away (`m3grpc pending ID | head -1`); m3grpc.cli.main catches it for
# every command.
STDOUT_CLOSED = 141

# gRPC status code name -> exit code
_BY_CODE = {
    "INVALID_ARGUMENT": BAD_INPUT,
    "OUT_OF_RANGE": BAD_INPUT,
    "UNAUTHENTICATED": BAD_INPUT,
    "NOT_FOUND": NOT_FOUND,
    "ABORTED": CONFLICT,
    "FAILED_PRECONDITION": CONFLICT,
    "ALREADY_EXISTS": CONFLICT,
    "UNAVAILABLE": UNAVAILABLE,
    "RESOURCE_EXHAUSTED": UNAVAILABLE,
    "DEADLINE_EXCEEDED": TIMED_OUT,
}


class CliInputError(M3Error):
    """Input the CLI could not use before any call: a file it cannot read, text
    that is not JSON/TOML, a flag combination that does not fit the round."""

    reason = "INVALID_INPUT"


class WaitTimedOut(M3Error):
    """A wait of the CLI's own (`pending --wait`) ran out."""

    reason = "WAIT_TIMEOUT"


class NoPendingRound(M3Error):
    """`respond --execution` found no round of that execution pending."""

    reason = "NO_PENDING_ROUND"


def exit_code(error: M3Error) -> int:
    if isinstance(error, CliInputError | ModelValidationError | ManagedInputValidationError):
        return BAD_INPUT
    if isinstance(error, WaitTimedOut):
        return TIMED_OUT
    if isinstance(error, NoPendingRound):
        return CONFLICT
    if error.code is None:
        return INTERNAL
    return _BY_CODE.get(error.code, INTERNAL)


def reason_of(error: M3Error) -> str:
    """The ErrorInfo reason; a status without one (RemoteCallError) shows its code,
    or the unknown reason it carried."""
    unknown = getattr(error, "unknown_reason", "")
    return error.reason or unknown or error.code or "ERROR"


def error_line(error: M3Error) -> str:
    text = " ".join(str(error).split())  # one line, whatever the message held
    return f"m3grpc: {reason_of(error)}: {text}"


def error_document(error: M3Error) -> dict[str, Any]:
    violations = getattr(error, "field_violations", ())
    return {
        "error": {
            "reason": reason_of(error),
            "code": error.code,
            "message": error.message,
            "metadata": dict(error.metadata),
            "field_violations": [
                {"field": violation.field, "description": violation.description}
                for violation in violations
            ],
            "exit_code": exit_code(error),
        }
    }
