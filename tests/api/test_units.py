"""Pure parts of the api layer: the status table, the client's inverse of it,
tokens, value conversion and the configuration file."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2

from m3grpc import errors
from m3grpc.api import tokens
from m3grpc.api.config import ConfigError, load_config
from m3grpc.errors import ConflictKind, FieldViolation
from m3grpc.runtime.limits import encoded_size
from m3grpc.servers import HttpServer, StdioServer
from m3grpc.wire import convert, requests
from m3grpc.wire.status import code_for, error_from_status, internal_status, status_for

ROOT = Path(__file__).resolve().parents[2]

CASES: list[tuple[errors.M3Error, grpc.StatusCode, str | None]] = [
    (
        errors.ModelValidationError(
            "bad", field_violations=[FieldViolation("agent.tools[0]", "x")]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "BadRequest",
    ),
    (
        errors.ManagedInputValidationError("bad", field_violations=[FieldViolation("f", "x")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "BadRequest",
    ),
    (
        errors.ManagedInputConflict("c", conflict_kind=ConflictKind.STALE_LEASE),
        grpc.StatusCode.ABORTED,
        None,
    ),
    (
        errors.RoundNotFoundError("n", metadata={"round_id": "r"}),
        grpc.StatusCode.NOT_FOUND,
        "ResourceInfo",
    ),
    (
        errors.ManagedInputStateError("s", metadata={"round_id": "r", "status": "failed"}),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PreconditionFailure",
    ),
    (
        errors.ManagedInputRecoveryError("r", metadata={"round_id": "r", "execution_id": "e"}),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PreconditionFailure",
    ),
    (errors.OperationTimeout("t"), grpc.StatusCode.DEADLINE_EXCEEDED, None),
    (errors.ResultWaitTimeout("t"), grpc.StatusCode.DEADLINE_EXCEEDED, None),
    (
        errors.ExecutionNotFoundError("e", metadata={"execution_id": "e"}),
        grpc.StatusCode.NOT_FOUND,
        "ResourceInfo",
    ),
    (
        errors.ServerBindingNotFoundError("s", metadata={"server": "s"}),
        grpc.StatusCode.NOT_FOUND,
        "ResourceInfo",
    ),
    (
        errors.WorkQueueFullError("q", retry_after_seconds=1.5),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RetryInfo",
    ),
    (
        errors.RateLimitedError(
            "r", retry_after_seconds=0.25, metadata={"method": "Submit", "burst": "2"}
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RetryInfo",
    ),
    (errors.ElicitationNotAnsweredError("n"), grpc.StatusCode.FAILED_PRECONDITION, None),
    (errors.RoundLimitExceededError("l"), grpc.StatusCode.FAILED_PRECONDITION, None),
    (errors.ServiceShuttingDownError("s"), grpc.StatusCode.UNAVAILABLE, None),
    (errors.UnauthenticatedError("u"), grpc.StatusCode.UNAUTHENTICATED, None),
    (
        errors.StorageUnavailableError("d", retry_after_seconds=0.5),
        grpc.StatusCode.UNAVAILABLE,
        "RetryInfo",
    ),
    (errors.InternalError("i"), grpc.StatusCode.INTERNAL, None),
]


def test_every_typed_error_is_mapped() -> None:
    mapped = {type(error) for error, _, _ in CASES}
    typed = {
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.M3Error)
    }
    # Service-side refinements travel as their base (their own tests below).
    service_side = {errors.EncryptionKeyError, errors.TransactionConflict}
    private = {c for c in typed if c.__name__.startswith("_")}
    assert typed - {errors.M3Error} - private - service_side == mapped


def test_an_encryption_key_error_reaches_callers_as_internal() -> None:
    error = errors.EncryptionKeyError("no key k2", metadata={"key_id": "k2"})
    assert code_for(error) == grpc.StatusCode.INTERNAL
    rebuilt = error_from_status(status_for(error))
    assert type(rebuilt) is errors.InternalError
    assert rebuilt.metadata == {"key_id": "k2"}


def test_a_transaction_conflict_reaches_callers_as_a_managed_input_conflict() -> None:
    error = errors.TransactionConflict("a concurrent transaction conflicted; retry")
    assert code_for(error) == grpc.StatusCode.ABORTED
    rebuilt = error_from_status(status_for(error))
    assert type(rebuilt) is errors.ManagedInputConflict
    assert rebuilt.conflict_kind is errors.ConflictKind.CONCURRENT_UPDATE


@pytest.mark.parametrize(("error", "code", "detail"), CASES, ids=lambda c: type(c).__name__)
def test_status_table_and_client_inverse(
    error: errors.M3Error, code: grpc.StatusCode, detail: str | None
) -> None:
    assert code_for(error) == code
    status = status_for(error)
    assert status.code == code.value[0]
    assert status.message == error.message
    names = [d.type_url.rsplit(".", 1)[-1] for d in status.details]
    assert names == ["ErrorInfo"] + ([detail] if detail else [])
    rebuilt = error_from_status(status)
    assert type(rebuilt) is type(error)
    assert rebuilt is not None
    assert rebuilt.metadata == error.metadata
    assert str(rebuilt) == str(error)
    retryable = errors.WorkQueueFullError | errors.StorageUnavailableError | errors.RateLimitedError
    if isinstance(error, retryable):
        assert isinstance(rebuilt, retryable)
        assert rebuilt.retry_after_seconds == error.retry_after_seconds
    if isinstance(error, errors.ManagedInputConflict):
        assert isinstance(rebuilt, errors.ManagedInputConflict)
        assert rebuilt.conflict_kind is error.conflict_kind


def test_unknown_exceptions_are_internal() -> None:
    for error in (ValueError("secret"), errors.M3Error("base class")):
        status = status_for(error)
        assert status == internal_status()
        assert status.code == grpc.StatusCode.INTERNAL.value[0]
        assert "secret" not in str(status)
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        assert info.reason == "INTERNAL"
        assert isinstance(error_from_status(status), errors.InternalError)


def test_page_tokens_and_cursors() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    filters = tokens.filter_digest("e", ["pending"])
    token = tokens.page_token((when, "rnd_1"), filters)
    assert tokens.read_page_token(token, filters) == (when, "rnd_1")
    with pytest.raises(errors.ManagedInputValidationError):
        tokens.read_page_token(token, tokens.filter_digest("", []))
    cursor = tokens.Cursor(42, "e", (when, "rnd_1"))
    assert tokens.read_cursor(tokens.cursor_token(cursor), "e") == cursor
    assert tokens.read_cursor(tokens.cursor_token(tokens.Cursor(7)), "") == tokens.Cursor(7)
    for bad in ("", "x", "e30", tokens.cursor_token(tokens.Cursor(7))):
        with pytest.raises(errors.ManagedInputValidationError):
            tokens.read_cursor(bad, "other")

    def forged(document: object) -> str:
        raw = json.dumps(document).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    # Readable JSON that no store could use, or that no token the service issues is:
    # typed, never an OverflowError or a RecursionError reaching the caller.
    for bad in (
        forged({"v": 1, "s": 2**70, "e": ""}),
        forged({"v": 1, "s": True, "e": ""}),
        base64.urlsafe_b64encode(b"[" * 1500).decode(),  # within the length cap
        base64.urlsafe_b64encode(b"[" * 100_000).decode(),
    ):
        with pytest.raises(errors.ManagedInputValidationError):
            tokens.read_cursor(bad, "")
        with pytest.raises(errors.ManagedInputValidationError):
            tokens.read_page_token(bad, filters)
    tokens.require_reached(tokens.Cursor(7), 7)
    with pytest.raises(errors.ManagedInputValidationError):
        tokens.require_reached(tokens.Cursor(8), 7)


def test_a_result_waits_timeout_on_the_wire() -> None:
    # None, infinity or longer than anyone means: no limit, and no call deadline (one
    # of 1e10 s expired at once); NaN is refused before anything is sent.
    for unlimited in (None, float("inf"), 1e10, 10**400):
        request, deadline = requests.result_request("exe_x", unlimited)
        assert not request.HasField("timeout") and deadline is None
    request, deadline = requests.result_request("exe_x", -3)
    assert request.timeout.ToTimedelta().total_seconds() == 0 and deadline is not None
    for bad in (float("nan"), "10", True):
        with pytest.raises(errors.ModelValidationError) as caught:
            requests.result_request("exe_x", bad)
        assert [v.field for v in caught.value.field_violations] == ["timeout"]


def test_value_conversion() -> None:
    data = {"n": 2, "f": 2.5, "list": [1, {"b": True}], "none": None, "s": "x"}
    assert convert.struct_to_dict(convert.dict_to_struct(data)) == data
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert convert.from_timestamp(convert.timestamp(when)) == when
    # The same message as protobuf's own conversion, before 1970 (negative seconds,
    # nanos still >= 0), at both ends of the range, in another zone, and naive (local).
    plus_five_thirty = timezone(timedelta(hours=5, minutes=30))
    for value in (
        when,
        datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 7, 28, 1, 2, 3, 4, tzinfo=plus_five_thirty),
        datetime(2026, 7, 28, 1, 2, 3, 4),
    ):
        expected = timestamp_pb2.Timestamp()
        expected.FromDatetime(value.astimezone(UTC))
        assert convert.timestamp(value) == expected, value
        assert convert.from_timestamp(expected) == value.astimezone(UTC)
    assert convert.duration_json(30) == "30s"
    assert convert.duration_json(0.25) == "0.250s"
    assert convert.from_duration(convert.duration(1.5)) == 1.5


def test_config(tmp_path: Path) -> None:
    assert load_config(None).database == "m3.sqlite"
    assert load_config(None).listen == "127.0.0.1:50051"
    path = tmp_path / "m3.toml"
    path.write_text(
        """
database = "sqlite:///x.sqlite"
listen = "0.0.0.0:6000"
[workers]
pool_size = 2
lease_seconds = 5
queue_capacity = 10
[servers.local]
command = "python"
args = ["server.py"]
env = { A = "1" }
cwd = "/srv"
[servers.remote]
url = "http://127.0.0.1:8000/mcp"
headers = { Authorization = "Bearer t" }
"""
    )
    config = load_config(path)
    assert config.workers.settings().concurrency == 2
    assert config.workers.settings().lease_duration.total_seconds() == 5
    assert config.servers["local"] == StdioServer(
        name="local", command="python", args=("server.py",), env={"A": "1"}, cwd="/srv"
    )
    assert config.servers["remote"] == HttpServer(
        name="remote", url="http://127.0.0.1:8000/mcp", headers={"Authorization": "Bearer t"}
    )
    path.write_text("[servers.broken]\nargs = []\n")
    with pytest.raises(ConfigError):
        load_config(path)
    path.write_text("unknown_key = 1\n")
    with pytest.raises(ConfigError):
        load_config(path)
    # One line naming the key, never a traceback at start: values no timedelta or gRPC
    # channel argument holds, a binding's own `name`, a binding's error by its table.
    for text, named in (
        ("keepalive_seconds = 3000000\n", "keepalive_seconds"),
        ("[workers]\nlease_seconds = inf\n", "workers.lease_seconds"),
        ("[workers]\nlease_seconds = 1e15\n", "workers.lease_seconds"),
        ("[workers]\nmax_round_timeout_seconds = 1e300\n", "workers.max_round_timeout_seconds"),
        ('[servers.a]\nname = "b"\ncommand = "x"\n', "[servers.a] unknown key `name`"),
        (
            '[servers.a]\ncommand = "x"\n[servers.c]\ncommand = "x"\nurl = "http://h/mcp"\n',
            "[servers.c]",
        ),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert named in str(caught.value), text
    path.write_bytes(b"\xff\xfe not UTF-8")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)


def test_example_config_loads() -> None:
    config = load_config(ROOT / "examples" / "m3.toml")
    assert "shipping" in config.servers


def test_a_size_walk_that_stops_early_still_tells_the_size_is_over() -> None:
    value = {"items": [{"text": "x" * 100, "n": index} for index in range(1000)]}
    full = encoded_size(value)
    assert encoded_size(value, stop_above=full) == full  # under the bound: the whole walk
    early = encoded_size(value, stop_above=500)
    assert 500 < early < full  # over the bound: stopped, and says it is over
