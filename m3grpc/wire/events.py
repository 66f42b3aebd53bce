"""WatchPending events, both directions: the service builds WatchPendingResponse
messages (`*_message`), the client reads them into typed events
(`event_from_message`). Each carries the `cursor` to resume after it."""

from __future__ import annotations

from dataclasses import dataclass

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
