"""Value conversions between protobuf and the domain model: Struct, Timestamp,
Duration and the enums. Shared by the servicers and the remote client.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2

from m3grpc import fieldpath
from m3grpc.types import (
    ElicitationAction,
    ExecutionOutcome,
    ExecutionStatus,
    HumanInput,
    ManagedInputStatus,
    OperationKind,
)
from m3grpc.wire.gen.m3.v1 import elicitation_pb2, execution_pb2

# Struct numbers are doubles; integral values up to 2**53 are exact, so they go
# back to int (an MCP server's `int` field would reject 2.0 in strict mode).
_EXACT_INT = 2**53


# The range of a valid google.protobuf.Duration (about 10,000 years).
_MAX_DURATION_SECONDS = 315_576_000_000


class WireValueError(ValueError):
    """A received value the model cannot take. `path` continues the path of the
    field that held it (`.city`, `[2]`); the caller reports it as a field violation."""

    def __init__(self, description: str, path: str = "") -> None:
        super().__init__(description)
        self.description = description
        self.path = path


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as JSON; WireValueError for NaN or an infinity (JSON has neither)."""
    return {key: _json(value, fieldpath.member(key)) for key, value in message.fields.items()}


def _json(value: struct_pb2.Value, path: str) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise WireValueError(f"{number} is not a JSON number", path)
        # Struct numbers are doubles; integral values up to 2**53 are exact, so they
        # go back to int (an MCP server's `int` field would reject 2.0 in strict mode).
        return int(number) if number.is_integer() and abs(number) <= _EXACT_INT else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return {
            key: _json(item, path + fieldpath.member(key))
            for key, item in value.struct_value.fields.items()
        }
    if kind == "list_value":
        return [
            _json(item, f"{path}[{index}]") for index, item in enumerate(value.list_value.values)
        ]
    return None  # null_value, or no kind set


def dict_to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(dict(value))
    return message


def optional_struct(holder: Any, field: str) -> dict[str, Any] | None:
    """The Struct field as a dict, or None when it is unset."""
    return struct_to_dict(getattr(holder, field)) if holder.HasField(field) else None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """`value` (naive: local time) as a Timestamp. `Timestamp.FromDatetime`'s
    arithmetic without its Python-level calls: 0.44 against 1.65 us (timeit), and
    every message carries several times (1.7% of the service's CPU at 16 rounds in
    flight, py-spy). A timedelta's seconds and microseconds are never negative, as
    a Timestamp's nanos must not be."""
    since = (value if value.tzinfo is not None else value.astimezone(UTC)) - _EPOCH
    return timestamp_pb2.Timestamp(
        seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1000
    )


def from_timestamp(message: timestamp_pb2.Timestamp) -> datetime:
    value: datetime = message.ToDatetime(tzinfo=UTC)
    return value


def optional_timestamp(holder: Any, field: str) -> datetime | None:
    return from_timestamp(getattr(holder, field)) if holder.HasField(field) else None


def duration(seconds: float) -> duration_pb2.Duration:
    message = duration_pb2.Duration()
    message.FromTimedelta(timedelta(seconds=seconds))
    return message


def from_duration(message: duration_pb2.Duration) -> float:
    """Seconds; WireValueError for a Duration outside the range the type allows."""
    seconds, nanos = message.seconds, message.nanos
    if (
        abs(seconds) > _MAX_DURATION_SECONDS
        or abs(nanos) > 999_999_999
        or (seconds > 0 > nanos)
        or (seconds < 0 < nanos)
    ):
        raise WireValueError("not a valid google.protobuf.Duration (out of range)")
    return float(seconds + nanos / 1e9)


def duration_json(seconds: float) -> str:
    """The google.protobuf.Duration JSON form, e.g. `30s` or `0.250s`."""
    return str(duration(seconds).ToJsonString())


# -- enums: the wire name is PREFIX + the model value upper-cased -------------------


def unknown_enum(number: int) -> str:
    """The description of an enum number this service does not know."""
    return f"unknown enum value {number}"


class EnumMap:
    """A two-way map between a proto enum (minus UNSPECIFIED) and model values."""

    def __init__(self, enum: Any, prefix: str, values: tuple[str, ...]) -> None:
        self._to_wire = {value: int(enum.Value(prefix + value.upper())) for value in values}
        self._from_wire = {number: value for value, number in self._to_wire.items()}

    def wire(self, value: str) -> Any:  # Any: the generated stubs type enum fields per enum
        return self._to_wire[str(value)]

    def model(self, number: int) -> str | None:
        """The model value, or None for UNSPECIFIED and numbers this build does not know."""
        return self._from_wire.get(number)

    def models(self, numbers: Sequence[int], *, at_most: int) -> list[str]:
        """The model values of a repeated enum field's entries. More than `at_most`
        entries raises `WireValueError` before any is read (a 4 MB request carries
        millions, and reading them would hold the event loop); UNSPECIFIED or a number
        this build does not know raises it with the entry's path (`[2]`)."""
        if len(numbers) > at_most:
            raise WireValueError(f"must have at most {at_most} entries ({len(numbers)})")
        values: list[str] = []
        for index, number in enumerate(numbers):
            value = self._from_wire.get(number)
            if value is None:
                why = "must be set" if number == 0 else unknown_enum(number)
                raise WireValueError(why, f"[{index}]")
            values.append(value)
        return values


HUMAN_INPUT = EnumMap(execution_pb2.HumanInput, "HUMAN_INPUT_", typing.get_args(HumanInput))
OPERATION_KIND = EnumMap(
    execution_pb2.OperationKind, "OPERATION_KIND_", typing.get_args(OperationKind)
)
ACTION = EnumMap(
    elicitation_pb2.ElicitationAction, "ELICITATION_ACTION_", typing.get_args(ElicitationAction)
)
EXECUTION_STATUS = EnumMap(
    execution_pb2.ExecutionStatus,
    "EXECUTION_STATUS_",
    tuple(member.value for member in ExecutionStatus),
)
OUTCOME = EnumMap(
    execution_pb2.ExecutionOutcome,
    "EXECUTION_OUTCOME_",
    tuple(member.value for member in ExecutionOutcome),
)
MANAGED_INPUT_STATUS = EnumMap(
    elicitation_pb2.ManagedInputStatus,
    "MANAGED_INPUT_STATUS_",
    tuple(member.value for member in ManagedInputStatus),
)
PERMISSION_POLICY = EnumMap(execution_pb2.PermissionPolicy, "PERMISSION_POLICY_", ("deny", "allow"))


def operation_kind(number: int) -> OperationKind | None:
    return cast(OperationKind | None, OPERATION_KIND.model(number))
