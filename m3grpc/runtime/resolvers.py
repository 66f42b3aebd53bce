"""Input resolvers the runtime hands a harness.

`PlanInputResolver` answers from the spec's elicitation plan (human_input="fail").
`ManagedInputResolver` stores a durable round, waits for a caller's response
(woken in-process at once, or by polling for writes from other processes),
and drives the round through delivery:

    create_round -> (caller) submit_responses -> start_delivery -> harness answers
    the server -> mark_delivered -> resolve (the operation finished or asked again)
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Protocol

from m3grpc.errors import ManagedInputStateError, OperationTimeout
from m3grpc.harness import InputRound
from m3grpc.plan import answer_from_plan
from m3grpc.runtime.leases import LeaseHolder
from m3grpc.runtime.notifier import Notifier, wait_for
from m3grpc.specs import ElicitationPlan
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import (
    ElicitationResponse,
    ManagedInputStatus,
    OperationResult,
    PendingElicitationRound,
)


class PlanInputResolver:
    """human_input="fail": answer from the plan, or fail the operation."""

    def __init__(self, plan: ElicitationPlan | None) -> None:
        self._plan = plan

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        return answer_from_plan(self._plan, round.operation.operation_name, round.requests)

    async def operation_finished(self, result: OperationResult) -> None:
        return None

    async def settle_all(self) -> None:
        return None

    @property
    def held_round_ids(self) -> list[str]:
        return []

    async def fail_open_round(self, failure_code: str, failure_message: str) -> None:
        return None


class WorkerSlot(Protocol):
    """The execution's worker slot: given back while a human is awaited."""

    def pause(self) -> None: ...

    def leave(self) -> None: ...

    async def resume(self) -> None: ...


class ManagedInputResolver:
    """human_input="managed": every input request becomes a durable pending round."""

    def __init__(
        self,
        store: SqlExecutionStore,
        notifier: Notifier,
        *,
        execution_id: str,
        lease: LeaseHolder,
        round_limit: int,
        round_timeout: timedelta | None,
        poll_interval: float,
        slot: WorkerSlot | None = None,
    ) -> None:
        self._store = store
        self._slot = slot
        self._rounds = store.managed_input_store
        self._notifier = notifier
        self._execution_id = execution_id
        self._lease = lease
        self._round_limit = round_limit
        self._round_timeout = round_timeout
        self._poll_interval = poll_interval
        # Rounds answered and handed to the harness, per logical operation.
        self._delivering: dict[str, str] = {}
        self.open_round_id: str | None = None

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        operation = round.operation
        # A new round means every answer handed out before has reached the server:
        # the operation asked again, or (operations run in sequence) it finished.
        await self.settle_all()
        now = self._store.now()
        pending = PendingElicitationRound(
            round_id=f"rnd_{uuid.uuid4().hex}",
            execution_id=self._execution_id,
            logical_operation_id=operation.logical_operation_id,
            server=operation.server,
            operation_kind=operation.operation_kind,
            operation_name=operation.operation_name,
            requests=round.requests,
            created_at=now,
            request_state=round.request_state,
            deadline=now + self._round_timeout if self._round_timeout else None,
        )
        await asyncio.to_thread(
            self._rounds.create_round,
            pending,
            lease=self._lease.lease,
            round_index=round.round_index,
            round_limit=self._round_limit,
            operation_parameters=dict(operation.arguments),
        )
        self.open_round_id = pending.round_id
        responses = await self._wait_without_slot(pending)
        await asyncio.to_thread(self._rounds.start_delivery, pending.round_id, self._lease.lease)
        self._delivering[operation.logical_operation_id] = pending.round_id
        return responses

    async def operation_finished(self, result: OperationResult) -> None:
        await self._settle(result.logical_operation_id)

    @property
    def held_round_ids(self) -> list[str]:
        """Non-terminal rounds this execution's lease must keep alive."""
        held = list(self._delivering.values())
        if self.open_round_id is not None and self.open_round_id not in held:
            held.append(self.open_round_id)
        return held

    async def settle_all(self) -> None:
        """Every answer handed to the harness so far has reached the server."""
        for logical_operation_id in list(self._delivering):
            await self._settle(logical_operation_id)

    async def fail_open_round(self, failure_code: str, failure_message: str) -> None:
        """Fail the round still open when the execution stops (cancel, error, shutdown)."""
        round_id = self.open_round_id
        if round_id is None:
            return
        with contextlib.suppress(ManagedInputStateError):  # already terminal
            await asyncio.to_thread(
                self._rounds.fail,
                round_id,
                self._lease.lease,
                failure_code=failure_code,
                failure_message=failure_message,
            )
        self.open_round_id = None

    async def _settle(self, logical_operation_id: str) -> None:
        round_id = self._delivering.pop(logical_operation_id, None)
        if round_id is None:
            return
        await asyncio.to_thread(self._rounds.mark_delivered, round_id, self._lease.lease)
        await asyncio.to_thread(self._rounds.resolve, round_id, self._lease.lease)
        if self.open_round_id == round_id:
            self.open_round_id = None

    async def _wait_without_slot(
        self, pending: PendingElicitationRound
    ) -> Mapping[str, ElicitationResponse]:
        """Wait for the response holding no worker slot; take one again (first in
        line) before the answer is delivered."""
        if self._slot is None:
            return await self._wait_for_response(pending)
        self._slot.pause()
        try:
            responses = await self._wait_for_response(pending)
        except asyncio.CancelledError:
            self._slot.leave()  # stopping: no slot to wait for
            raise
        except Exception:
            await self._slot.resume()
            raise
        await self._slot.resume()
        return responses

    async def _wait_for_response(
        self, pending: PendingElicitationRound
    ) -> Mapping[str, ElicitationResponse]:
        round_id = pending.round_id
        while True:
            wake = self._notifier.register(round_id)
            try:
                record = await asyncio.to_thread(self._rounds.get_round, round_id)
                if record.status is ManagedInputStatus.RESPONSE_VALIDATED:
                    assert record.responses is not None
                    return record.responses
                if record.status is not ManagedInputStatus.PENDING:
                    raise ManagedInputStateError(
                        f"round {round_id} left pending as {record.status.value}",
                        metadata={"round_id": round_id, "status": record.status.value},
                    )
                timeout = self._poll_interval
                if pending.deadline is not None:
                    remaining = (pending.deadline - self._store.now()).total_seconds()
                    if remaining <= 0:
                        await self._expire(pending)
                        continue  # a response won the race: read it
                    timeout = min(timeout, remaining)
                await wait_for(wake, timeout)
            finally:
                self._notifier.unregister(round_id, wake)

    async def _expire(self, pending: PendingElicitationRound) -> None:
        """Fail the round for its deadline, unless a response committed first."""
        try:
            await asyncio.to_thread(
                self._rounds.fail,
                pending.round_id,
                self._lease.lease,
                failure_code="operation_timeout",
                failure_message="the round's deadline passed without a response",
                expected_statuses=[ManagedInputStatus.PENDING],
            )
        except ManagedInputStateError:
            return
        self.open_round_id = None
        raise OperationTimeout(
            f"round {pending.round_id} expired at its deadline {pending.deadline}",
            metadata={"round_id": pending.round_id, "execution_id": self._execution_id},
        )
