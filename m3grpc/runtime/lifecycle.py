"""Lifecycle events of executions and rounds, for operators.

Each event is one log record on the `m3grpc.lifecycle` logger (INFO, or WARNING
for recoveries and lost leases) whose structured fields (`event`,
`execution_id`, `round_id`, ...) travel as LogRecord attributes, and a call to
every subscribed listener (the service's metrics). The runtime only uses stdlib
logging; how records are formatted is the api layer's business.

Fields are IDs, statuses, codes, counts and durations: never request or
response content, at any level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger("m3grpc.lifecycle")

FieldValue = str | int | float | bool | None


@dataclass(frozen=True)
class LifecycleEvent:
    """One event: its name (e.g. `round.pending`) and its fields."""

    name: str
    fields: Mapping[str, FieldValue] = field(default_factory=dict)


Listener = Callable[[LifecycleEvent], None]


class Lifecycle:
    """Emits lifecycle events: a log line each, and every listener called."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(
        self, name: str, message: str, *, level: int = logging.INFO, **fields: FieldValue
    ) -> None:
        log.log(level, message, extra={"event": name, **fields})
        event = LifecycleEvent(name, fields)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must never stop an execution
                log.exception("lifecycle listener failed on %s", name)

    # -- the events, one method each, so their fields stay the same everywhere ----

    def execution_submitted(self, execution_id: str, *, replayed: bool) -> None:
        self.emit(
            "execution.submitted",
            f"execution {execution_id} submitted",
            execution_id=execution_id,
            replayed=replayed,
        )

    def execution_claimed(self, execution_id: str, owner_id: str) -> None:
        self.emit(
            "execution.claimed",
            f"execution {execution_id} claimed",
            execution_id=execution_id,
            owner_id=owner_id,
        )

    def execution_finished(self, execution_id: str, outcome: str, failure_code: str | None) -> None:
        self.emit(
            "execution.finished",
            f"execution {execution_id} finished: {outcome}"
            + (f" ({failure_code})" if failure_code else ""),
            execution_id=execution_id,
            outcome=outcome,
            failure_code=failure_code,
        )

    def lease_lost(self, execution_id: str, *, at_finish: bool = False) -> None:
        """The worker lost the execution's lease: found by a renewal (the execution
        is stopped), or by its finish (its result was refused; recovery's stands)."""
        message = (
            f"execution {execution_id} lost its lease before its finish; its result was "
            "refused and the recovered one stands"
            if at_finish
            else f"execution {execution_id} lost its lease; stopping it"
        )
        self.emit(
            "execution.lease_lost",
            message,
            level=logging.ERROR,
            execution_id=execution_id,
            at_finish=at_finish,
        )

    def released(self, execution_id: str) -> None:
        """A dead worker's execution waits at a resumable round for the next worker."""
        self.emit(
            "execution.released",
            f"execution {execution_id} released: its worker disappeared; its round waits "
            "for the next worker",
            level=logging.WARNING,
            execution_id=execution_id,
        )

    def parked(self, execution_id: str, round_id: str) -> None:
        self.emit(
            "execution.parked",
            f"execution {execution_id} parked: round {round_id} waits for its answer",
            execution_id=execution_id,
            round_id=round_id,
        )

    def recovered(self, kind: str, execution_id: str, round_id: str | None = None) -> None:
        what = f"round {round_id}" if round_id else f"execution {execution_id}"
        self.emit(
            f"{kind}.recovered",
            f"recovered {what}: its worker disappeared",
            level=logging.WARNING,
            execution_id=execution_id,
            round_id=round_id,
        )

    def round_pending(self, execution_id: str, round_id: str, round_index: int) -> None:
        self.emit(
            "round.pending",
            f"round {round_id} pending",
            execution_id=execution_id,
            round_id=round_id,
            round_index=round_index,
        )

    def response_accepted(
        self,
        execution_id: str,
        round_id: str,
        *,
        status: str,
        replayed: bool,
        wait_seconds: float | None,
    ) -> None:
        self.emit(
            "round.response_accepted",
            f"round {round_id} response accepted" + (" (replayed)" if replayed else ""),
            execution_id=execution_id,
            round_id=round_id,
            status=status,
            replayed=replayed,
            wait_seconds=wait_seconds,
        )

    def round_delivered(self, execution_id: str, round_id: str) -> None:
        self.emit(
            "round.delivered",
            f"round {round_id} delivered",
            execution_id=execution_id,
            round_id=round_id,
        )

    def round_resolved(self, execution_id: str, round_id: str) -> None:
        self.emit(
            "round.resolved",
            f"round {round_id} resolved",
            execution_id=execution_id,
            round_id=round_id,
        )

    def round_failed(
        self, execution_id: str, round_id: str, failure_code: str, *, answered: bool
    ) -> None:
        """`answered`: the round's answer had been handed over for delivery (a
        delivery failure), not failed while still waiting for one."""
        self.emit(
            "round.failed",
            f"round {round_id} failed: {failure_code}",
            execution_id=execution_id,
            round_id=round_id,
            failure_code=failure_code,
            answered=answered,
        )
