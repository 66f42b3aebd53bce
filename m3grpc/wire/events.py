"""WatchPending events, both directions: the service builds WatchPendingResponse
messages (`*_message`), the client reads them into typed events
(`event_from_message`). Each carries the `cursor` to resume after it. The
request's `kinds` filter too: the client names event classes (`kinds_message`),
the service reads the kinds back (`kinds_model`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from m3grpc.types import (
    ExecutionState,
    ManagedInputRecord,
    ManagedInputStatus,
    PendingElicitationRound,
)
from m3grpc.wire import convert, messages
from m3grpc.wire.gen.m3.v1 import execution_service_pb2


@dataclass(frozen=True)
class RoundPending:
    """A round is pending (in the opening snapshot) or became pending."""

    cursor: str
    round: PendingElicitationRound
    round_index: int
    round_limit: int


@dataclass(frozen=True)
class RoundLeftPending:
    """A round left pending: a response was accepted, or it failed.
    Ignore it for a round not seen pending."""

    cursor: str
    round_id: str
    execution_id: str
    status: ManagedInputStatus


@dataclass(frozen=True)
class ExecutionFinished:
    """An execution finished; its final state."""

    cursor: str
    state: ExecutionState


WatchEvent = RoundPending | RoundLeftPending | ExecutionFinished
WatchEventClass = type[RoundPending] | type[RoundLeftPending] | type[ExecutionFinished]

# The event classes by kind, each kind named after the response's `event` field it sets.
WATCH_EVENT_CLASSES: dict[str, WatchEventClass] = {
    "round_pending": RoundPending,
    "round_left_pending": RoundLeftPending,
    "execution_finished": ExecutionFinished,
}
_KIND_OF_CLASS = {event_class: kind for kind, event_class in WATCH_EVENT_CLASSES.items()}
# At most this many entries in a request's `kinds` (repeats allowed): there are three
# kinds, and reading four million entries (a 4 MB request) held the event loop 0.3 s.
MAX_KINDS = 16
WATCH_EVENT_KIND = convert.EnumMap(
    execution_service_pb2.WatchEventKind, "WATCH_EVENT_KIND_", tuple(WATCH_EVENT_CLASSES)
)


# -- the request's kinds: event classes <-> WatchEventKind -------------------------


def kinds_message(kinds: Iterable[WatchEventClass]) -> list[Any]:
    """`WatchPendingRequest.kinds` for the event classes a client wants (Any: the
    stubs type enum fields per enum, as `EnumMap.wire`)."""
    numbers: list[Any] = []
    for kind in kinds:
        name = _KIND_OF_CLASS.get(kind)
        if name is None:
            raise TypeError(
                f"kinds: {kind!r} is not a WatchPending event class "
                "(RoundPending, RoundLeftPending, ExecutionFinished)"
            )
        numbers.append(WATCH_EVENT_KIND.wire(name))
    return numbers


def kinds_model(numbers: Sequence[int]) -> frozenset[str] | None:
    """The kinds a request asks for, by the name of the `event` field each sets;
    None: every kind. More than `MAX_KINDS` entries, UNSPECIFIED or a number this build
    does not know raises `WireValueError` (with the entry's path, `[2]`)."""
    if not numbers:
        return None
    return frozenset(WATCH_EVENT_KIND.models(numbers, at_most=MAX_KINDS))


def event_from_message(message: execution_service_pb2.WatchPendingResponse) -> WatchEvent | None:
    """The typed event, or None for an event kind this client does not know."""
    kind = message.WhichOneof("event")
    if kind == "round_pending":
        pending = message.round_pending
        return RoundPending(
            cursor=message.cursor,
            round=messages.pending_round_model(pending),
            round_index=pending.round_index,
            round_limit=pending.round_limit,
        )
    if kind == "round_left_pending":
        left = message.round_left_pending
        status = messages.managed_input_status_model(left.status)
        return RoundLeftPending(
            cursor=message.cursor,
            round_id=left.round_id,
            execution_id=left.execution_id,
            status=status or ManagedInputStatus.FAILED,
        )
    if kind == "execution_finished":
        return ExecutionFinished(
            cursor=message.cursor, state=messages.state_model(message.execution_finished)
        )
    return None


# -- the service: events -> WatchPendingResponse -------------------------------------


def round_pending_message(
    cursor: str, record: ManagedInputRecord
) -> execution_service_pb2.WatchPendingResponse:
    return execution_service_pb2.WatchPendingResponse(
        cursor=cursor, round_pending=messages.pending_round_message(record)
    )


def round_left_pending_message(
    cursor: str, round_id: str, execution_id: str, status: str | None
) -> execution_service_pb2.WatchPendingResponse:
    """`status`: the round's status after it left pending (FAILED when unknown)."""
    left = execution_service_pb2.RoundLeftPending(
        round_id=round_id,
        execution_id=execution_id,
        status=convert.MANAGED_INPUT_STATUS.wire(status or ManagedInputStatus.FAILED.value),
    )
    return execution_service_pb2.WatchPendingResponse(cursor=cursor, round_left_pending=left)


def execution_finished_message(
    cursor: str, state: ExecutionState
) -> execution_service_pb2.WatchPendingResponse:
    return execution_service_pb2.WatchPendingResponse(
        cursor=cursor, execution_finished=messages.state_message(state)
    )
