"""Typed WatchPending events. Each carries the `cursor` to resume after it."""

from __future__ import annotations

from dataclasses import dataclass

from m3grpc.api import messages
from m3grpc.api.gen.m3.v1 import execution_service_pb2
from m3grpc.types import (
    ExecutionState,
    ManagedInputStatus,
    PendingElicitationRound,
)


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
        status = messages.round_status_model(left.status)
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
