"""Input resolvers the runtime hands a harness.

`PlanInputResolver` answers from the spec's elicitation plan (human_input="fail").
`ManagedInputResolver` stores a durable round, waits for a caller's response
(woken at once: in-process, or by another replica's NOTIFY on PostgreSQL;
polling finds writes of other processes otherwise),
and drives the round through delivery:

    create_round -> (caller) submit_responses -> start_delivery -> harness answers
    the server -> mark_delivered -> resolve (the operation finished or asked again)

A round ends in the status its operation earned: RESOLVED when the operation
asked a new round or completed (the server returned a final result, error
results included); FAILED with the operation's failure code when it failed
without a result (e.g. `connection_closed`). Both resolvers store each finished
operation's result durably as it finishes (with its round's resolve/fail, in
one transaction), so recovery keeps what a tool returned.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Protocol

from m3grpc import tracing
from m3grpc.errors import M3Error, ManagedInputStateError, OperationTimeout
from m3grpc.harness import InputRound, OperationRef
from m3grpc.plan import answer_from_plan
from m3grpc.runtime.leases import LeaseHolder
from m3grpc.runtime.lifecycle import Lifecycle
from m3grpc.runtime.notifier import (
    Notifier,
    created_round_key,
    pending_key,
    wait_for,
    woken_with,
)
from m3grpc.runtime.offload import offload
from m3grpc.runtime.outage import stored
from m3grpc.runtime.shared_poll import SAFETY_REREAD_SECONDS, SharedPoll
from m3grpc.specs import ElicitationPlan
from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.managed_input import RoundSettle
from m3grpc.storage.overdue import DEADLINE_MESSAGE, expired_at_deadline
from m3grpc.storage.transitions import DEADLINE_FAILURE_CODE
from m3grpc.types import (
    ElicitationResponse,
    ManagedInputRecord,
    ManagedInputStatus,
    OperationResult,
    PendingElicitationRound,
)


class InFlight:
    """The operation a harness is running (its `operation_started` hook), until it
    finishes: an execution stopped midway (cancelled, shut down) lists it in its
    result, failed with the stop's reason, instead of leaving it out."""

    in_flight: OperationRef | None = None

    async def operation_started(self, operation: OperationRef) -> None:
        self.in_flight = operation

    def _ended(self, result: OperationResult) -> None:
        if (
            self.in_flight is not None
            and self.in_flight.logical_operation_id == result.logical_operation_id
        ):
            self.in_flight = None


class PlanInputResolver(InFlight):
    """human_input="fail": answer from the plan, or fail the operation."""

    def __init__(
        self,
        plan: ElicitationPlan | None,
        store: SqlExecutionStore,
        *,
        execution_id: str,
        lease: LeaseHolder,
    ) -> None:
        self._plan = plan
        self._store = store
        self._execution_id = execution_id
        self._lease = lease

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        return answer_from_plan(self._plan, round.operation.operation_name, round.requests)

    async def operation_finished(self, result: OperationResult, *, last: bool = False) -> None:
        self._ended(result)
        await stored(
            self._store.record_operation, self._execution_id, self._lease.lease, result, last=last
        )

    async def settle_all(self, operations: Sequence[OperationResult] = ()) -> None:
        return None

    async def fail_open_round(self, failure_code: str, failure_message: str) -> None:
        return None


class WorkerSlot(Protocol):
    """The execution's worker slot: given back while a human is awaited."""

    def pause(self) -> None: ...

    def leave(self) -> None: ...

    async def resume(self) -> None: ...

    def awaiting(self, round_id: str, sent_on_return: bool) -> None:
        """The worker waits on the round's answer: a Respond here may start its
        delivery with the answer's commit."""
        ...

    def answered(self, round_id: str) -> None: ...

    def parked(self) -> None:
        """The store released the execution to wait for its answer with no worker:
        its task ends (cancelled), holding nothing of it any more."""
        ...

    async def ensure_lease(self) -> None:
        """Renew the execution's lease now if it lapsed (the loop stalled past it)."""
        ...


class ManagedInputResolver(InFlight):
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
        poll: SharedPoll,
        slot: WorkerSlot | None = None,
        resumed: ManagedInputRecord | None = None,
        lifecycle: Lifecycle | None = None,
        park_after: float | None = None,
    ) -> None:
        self._lifecycle = lifecycle or Lifecycle()
        # Seconds a resumable round waits here before the execution is parked (with a
        # worker slot only); None: it waits here until answered.
        self._park_after = park_after if slot is not None else None
        self._store = store
        # A released execution's round this worker adopted: the harness hands it
        # back (same operation and round_index) and it is awaited, not created.
        self._resumed = resumed
        self._slot = slot
        self._rounds = store.managed_input_store
        self._notifier = notifier
        self._execution_id = execution_id
        self._lease = lease
        self._round_limit = round_limit
        self._round_timeout = round_timeout
        self._poll = poll
        # Rounds answered and handed to the harness, per logical operation.
        self._delivering: dict[str, str] = {}
        # Those of them the server has been sent (legacy: no later receipt exists).
        self._delivered: set[str] = set()
        # The non-terminal round (at most one: a new round settles the earlier
        # ones first) and its logical operation.
        self.open_round_id: str | None = None
        self._open_operation_id: str | None = None
        # The open round may pass to another worker (it has a resume token) and
        # its answer has not been handed to the harness yet.
        self._open_resumable = False
        # Each open round's span, from pending until it settles (or passes on).
        self._round_spans: dict[str, tracing.Span] = {}
        # Rounds whose delivery the Respond's commit started (WorkerSlot.awaiting).
        self._started_early: set[str] = set()
        # The last operation's resolve, left for the execution's finish to commit
        # with it (`final_settle`), or for `_flush_final` when it does not finish so.
        self._final: RoundSettle | None = None

    @property
    def holds_no_round(self) -> bool:
        """No round of this worker is open, and none adopted waits to be: while the
        worker holds the execution only it stores the execution's rounds, so none
        is pending (one being stored now is announced once it is)."""
        return self.open_round_id is None and self._resumed is None

    @property
    def releasable(self) -> bool:
        """Could the execution be handed to another worker now (graceful shutdown)?
        The store has the last word (m3grpc.storage.handover)."""
        return self.open_round_id is not None and self._open_resumable

    async def release(self) -> bool:
        """Hand the execution on (its worker is stopping): True if the store
        released it; False (nothing changed) if its round cannot pass on."""
        if not self.releasable:
            return False
        try:
            # Not retried: the worker is stopping, and a round kept closes safely.
            released = await offload(self._store.release, self._execution_id, self._lease.lease)
        except M3Error:
            return False
        if released:
            if self.open_round_id is not None:
                self._end_round_span(self.open_round_id, "released")
            self.open_round_id, self._open_operation_id = None, None
            self._open_resumable = False
        return released

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        operation = round.operation
        # A new round means every answer handed out before has reached the server:
        # the operation asked again, or (operations run in sequence) it finished.
        await self._flush_final()  # a harness said "last" too early: not left for the finish
        await self.settle_all()
        resumed = self._resumed
        if (
            resumed is not None
            and resumed.pending.logical_operation_id == operation.logical_operation_id
            and resumed.round_index == round.round_index
        ):
            self._resumed = None
            return await self._await_round(
                resumed.pending, round.round_index, resumable=True, sent_on_return=False
            )
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
        if self._slot is not None:
            # A loop stalled past the lease (a starved machine, a first MCP session)
            # must not fail the execution: its lease renews unless recovery fenced it.
            await self._slot.ensure_lease()
        # Registered before the round exists: an answer committed at any moment after
        # its creation wakes this waiter, so the new round needs no first read.
        wake = self._notifier.register(pending.round_id)
        try:
            # The stored round goes straight into the call, held in no local here:
            # a paused execution keeps `pending`, not this copy (memory per paused
            # execution; the copy is only announced, see `_await_round`).
            return await self._await_round(
                pending,
                round.round_index,
                resumable=round.resume_token is not None,
                sent_on_return=round.sent_on_return,
                created=await self._store_round(pending, operation, round),
                registered=wake,
            )
        finally:
            self._notifier.unregister(pending.round_id, wake)

    async def _store_round(
        self, pending: PendingElicitationRound, operation: OperationRef, round: InputRound
    ) -> ManagedInputRecord:
        """Store the new round. WatchPending sends its round_pending event from the
        record handed over here, not read back: a stream that reaches the event
        before this returns waits for the record (see Notifier.handing_over)."""
        with self._notifier.handing_over(created_round_key(pending.round_id)) as hand_over:
            created = await stored(
                self._rounds.create_round,
                pending,
                lease=self._lease.lease,
                round_index=round.round_index,
                round_limit=self._round_limit,
                operation_parameters=dict(operation.arguments),
                harness_session_id=round.harness_session_id,
                harness_resume_token=round.resume_token,
                turn_metadata=round.turn_metadata,
            )
            hand_over(created)
        return created

    async def _await_round(
        self,
        pending: PendingElicitationRound,
        round_index: int,
        *,
        resumable: bool,
        sent_on_return: bool,
        created: ManagedInputRecord | None = None,
        registered: asyncio.Future[object] | None = None,
    ) -> Mapping[str, ElicitationResponse]:
        """Wait for the open round's answer, then start delivering it. `created`: the
        round this resolver just stored; `registered`: its wake-up, registered before."""
        self.open_round_id = pending.round_id
        self._open_operation_id = pending.logical_operation_id
        self._open_resumable = resumable
        # A child of the current span: the harness's operation span.
        span = tracing.start(
            "m3.round",
            attributes={
                "m3.execution_id": self._execution_id,
                "m3.round_id": pending.round_id,
                "m3.round_index": round_index,
                "m3.logical_operation_id": pending.logical_operation_id,
                "m3.operation.kind": pending.operation_kind,
                "m3.operation.name": pending.operation_name,
            },
        )
        self._round_spans[pending.round_id] = span
        span.add_event("pending")
        self._lifecycle.round_pending(self._execution_id, pending.round_id, round_index)
        # Wakes the kit's wait_for_pending at once (no polling in-process), with
        # the round just stored (no read back).
        self._notifier.notify(pending_key(self._execution_id), created)
        created = None  # not kept while the round waits
        if self._slot is not None:
            self._slot.awaiting(pending.round_id, sent_on_return)
        park_at = None
        if resumable and self._park_after is not None:
            park_at = asyncio.get_running_loop().time() + self._park_after
        try:
            responses = await self._wait_without_slot(pending, registered, park_at)
        finally:
            if self._slot is not None:
                self._slot.answered(pending.round_id)
        span.add_event("answered")
        # From here the answer may reach the server: the round no longer passes on.
        self._open_resumable = False
        if pending.round_id in self._started_early:
            # The Respond's commit started the delivery (and, for an answer sent on
            # at once, recorded it delivered), durable before the answer leaves.
            self._started_early.discard(pending.round_id)
        else:
            # An answer the harness sends on at once is recorded delivered with the
            # start of its delivery: one commit, before it leaves.
            await stored(
                self._rounds.start_delivery,
                pending.round_id,
                self._lease.lease,
                mark_delivered=sent_on_return,
            )
        self._delivering[pending.logical_operation_id] = pending.round_id
        if sent_on_return:
            self._delivered.add(pending.round_id)
            self._round_event(pending.round_id, "delivered")
            self._lifecycle.round_delivered(self._execution_id, pending.round_id)
        return responses

    async def input_delivered(self, operation: OperationRef) -> None:
        """The operation's answers reached the server: its round is DELIVERED while
        the server works on, until the operation finishes or asks again."""
        round_id = self._delivering.get(operation.logical_operation_id)
        if round_id is None or round_id in self._delivered:
            return
        await stored(self._rounds.mark_delivered, round_id, self._lease.lease)
        self._delivered.add(round_id)
        self._round_event(round_id, "delivered")
        self._lifecycle.round_delivered(self._execution_id, round_id)

    async def input_requested(self, operation: OperationRef) -> None:
        """The operation asked again: its answered round is RESOLVED."""
        await self._settle(operation.logical_operation_id)

    async def operation_finished(self, result: OperationResult, *, last: bool = False) -> None:
        """Settle the operation's open round as its outcome earned, storing `result`
        in the same transaction; without an open round, store `result` alone."""
        self._ended(result)
        await self._flush_final()  # a harness said "last" too early: not left for the finish
        operation_id = result.logical_operation_id
        round_id = self.open_round_id if self._open_operation_id == operation_id else None
        if round_id is None:
            await stored(
                self._store.record_operation,
                self._execution_id,
                self._lease.lease,
                result,
                last=last,
            )
            return
        if _completed(result) and self._delivering.get(operation_id) == round_id:
            if last:
                # Nothing runs after it: the resolve commits with the execution's
                # finish, a moment later, in one transaction (`final_settle`).
                self._delivering.pop(operation_id)
                self._final = RoundSettle(
                    execution_id=self._execution_id,
                    round_id=round_id,
                    operation=result,
                    last=True,
                    mark_delivered=round_id not in self._delivered,
                )
                return
            await self._settle(operation_id, operation=result, last=last)
            return
        self._delivering.pop(operation_id, None)
        if result.ok:
            # The server finished without waiting for this round's answer.
            code, message = "operation_finished", "the operation finished before its answer"
        else:
            code = result.failure_code or "operation_failed"
            message = result.failure_message or ""
        await self._fail(round_id, code, message, operation=result, last=last)

    async def settle_all(self, operations: Sequence[OperationResult] = ()) -> None:
        """Settle every answer handed to the harness so far: the operation asked
        again or completed (resolved), unless `operations` (a harness's results)
        says its operation failed without completing (failed with its code)."""
        failed = {op.logical_operation_id: op for op in operations if not _completed(op)}
        for logical_operation_id in list(self._delivering):
            op = failed.get(logical_operation_id)
            if op is None:
                await self._settle(logical_operation_id)
                continue
            round_id = self._delivering.pop(logical_operation_id)
            code = op.failure_code or "operation_failed"
            await self._fail(round_id, code, op.failure_message or "")

    async def connection_closing(self) -> None:
        """The harness closes the execution's own MCP connection before the finish:
        the left resolve commits now, so that a crash while it closes still finds
        the last operation's result (a shared connection closes nothing: it waits)."""
        await self._flush_final()

    @property
    def final_settle(self) -> RoundSettle | None:
        """The last operation's round, to resolve in the execution's finish
        (SqlExecutionStore.finish_settling); call `final_settled` after it."""
        return self._final

    def final_settled(self, resolved: bool) -> None:
        """The finish committed `final_settle`'s round: `resolved`, or (False) left to
        fail with the execution, as `resolve` would have refused it."""
        settle, self._final = self._final, None
        if settle is None:
            return
        if resolved:
            self._settled(settle.round_id, delivered_now=settle.mark_delivered)
        else:
            self._forget(settle.round_id)

    async def _flush_final(self) -> None:
        """Commit the left resolve on its own: the execution does not finish by
        its worker's usual finish (it fails, is cancelled or stops)."""
        settle, self._final = self._final, None
        if settle is None:
            return
        await self._resolve_round(
            settle.round_id,
            operation=settle.operation,
            last=settle.last,
            delivered_now=settle.mark_delivered,
        )

    async def fail_open_round(self, failure_code: str, failure_message: str) -> None:
        """Fail the round still open when the execution stops (cancel, error, shutdown)."""
        # A resolve left for the finish is earned: stored as the operation ended.
        await self._flush_final()
        round_id = self.open_round_id
        if round_id is None:
            return
        await self._fail(round_id, failure_code, failure_message)

    async def _fail(
        self,
        round_id: str,
        failure_code: str,
        failure_message: str,
        *,
        operation: OperationResult | None = None,
        last: bool = False,
    ) -> None:
        answered = round_id in self._delivering.values() or round_id in self._delivered
        try:
            await stored(
                self._rounds.fail,
                round_id,
                self._lease.lease,
                failure_code=failure_code,
                failure_message=failure_message,
                operation=operation,
                last=last,
            )
        except ManagedInputStateError:  # already terminal (e.g. its deadline passed)
            if operation is not None:
                await stored(
                    self._store.record_operation,
                    self._execution_id,
                    self._lease.lease,
                    operation,
                    last=last,
                )
        else:
            self._lifecycle.round_failed(
                self._execution_id, round_id, failure_code, answered=answered
            )
            self._end_round_span(round_id, "failed", failure_code)
        self._forget(round_id)

    async def _settle(
        self,
        logical_operation_id: str,
        *,
        operation: OperationResult | None = None,
        last: bool = False,
    ) -> None:
        round_id = self._delivering.pop(logical_operation_id, None)
        if round_id is None:
            return
        # Not yet marked delivered: the reply that ended the operation is the answer's
        # receipt too; both steps commit in one transaction.
        await self._resolve_round(
            round_id, operation=operation, last=last, delivered_now=round_id not in self._delivered
        )

    async def _resolve_round(
        self,
        round_id: str,
        *,
        operation: OperationResult | None,
        last: bool,
        delivered_now: bool,
    ) -> None:
        await stored(
            self._rounds.resolve,
            round_id,
            self._lease.lease,
            operation=operation,
            last=last,
            mark_delivered=delivered_now,
        )
        self._settled(round_id, delivered_now=delivered_now)

    def _settled(self, round_id: str, *, delivered_now: bool) -> None:
        """The round's resolve committed: what follows it, as `resolve` returned."""
        if delivered_now:
            self._round_event(round_id, "delivered")
            self._lifecycle.round_delivered(self._execution_id, round_id)
        self._lifecycle.round_resolved(self._execution_id, round_id)
        self._end_round_span(round_id, "resolved")
        self._forget(round_id)

    def _round_event(self, round_id: str, name: str) -> None:
        span = self._round_spans.get(round_id)
        if span is not None:
            span.add_event(name)

    def _end_round_span(self, round_id: str, status: str, failure_code: str | None = None) -> None:
        span = self._round_spans.pop(round_id, None)
        if span is None:
            return
        span.set_attribute("m3.round.status", status)
        if failure_code is not None:
            span.fail(failure_code)
        span.end()

    def _forget(self, round_id: str) -> None:
        """The round is terminal: nothing holds or settles it any more."""
        self._end_round_span(round_id, "settled")
        self._delivered.discard(round_id)
        for logical_operation_id, delivering in list(self._delivering.items()):
            if delivering == round_id:
                del self._delivering[logical_operation_id]
        if self.open_round_id == round_id:
            self.open_round_id = None
            self._open_operation_id = None
            self._open_resumable = False

    async def _wait_without_slot(
        self,
        pending: PendingElicitationRound,
        registered: asyncio.Future[object] | None,
        park_at: float | None = None,
    ) -> Mapping[str, ElicitationResponse]:
        """Wait for the response holding no worker slot; take one again (first in
        line) before the answer is delivered."""
        if self._slot is None:
            return await self._wait_for_response(pending, registered)
        self._slot.pause()
        try:
            responses = await self._wait_for_response(pending, registered, park_at)
        except asyncio.CancelledError:
            self._slot.leave()  # stopping: no slot to wait for
            raise
        except Exception:
            await self._slot.resume()
            raise
        await self._slot.resume()
        return responses

    async def _wait_for_response(
        self,
        pending: PendingElicitationRound,
        registered: asyncio.Future[object] | None,
        park_at: float | None = None,
    ) -> Mapping[str, ElicitationResponse]:
        with self._poll.round(pending.round_id):
            return await self._await_response(pending, registered, park_at)

    async def _await_response(
        self,
        pending: PendingElicitationRound,
        registered: asyncio.Future[object] | None,
        park_at: float | None = None,
    ) -> Mapping[str, ElicitationResponse]:
        """The round's responses once validated. `registered`: a wake-up registered
        before the round was created (it is PENDING until that fires: no first read).
        `park_at` (the loop's clock): when the execution is parked if the round is
        still pending then (see `_park`)."""
        round_id = pending.round_id
        loop = asyncio.get_running_loop()
        while True:
            unread = registered is not None
            wake = registered if registered is not None else self._notifier.register(round_id)
            registered = None  # only the first pass
            try:
                if not unread:
                    record = await stored(self._rounds.get_round, round_id)
                    if record.status is ManagedInputStatus.RESPONSE_VALIDATED:
                        assert record.responses is not None
                        return record.responses
                    if self._delivery_started(record):
                        assert record.responses is not None
                        return record.responses
                    if record.status is not ManagedInputStatus.PENDING:
                        raise ManagedInputStateError(
                            f"round {round_id} left pending as {record.status.value}",
                            metadata={"round_id": round_id, "status": record.status.value},
                        )
                # Woken by the answer: this process's Respond, a heard replica's,
                # or the shared poll (m3grpc/runtime/shared_poll.py).
                timeout = SAFETY_REREAD_SECONDS
                if pending.deadline is not None:
                    remaining = (pending.deadline - self._store.now()).total_seconds()
                    if remaining <= 0:
                        await self._expire(pending)
                        continue  # a response won the race: read it
                    timeout = min(timeout, remaining)
                if park_at is not None:
                    if not unread and loop.time() >= park_at:  # read pending just now
                        await self._park(pending)  # returns only if it was not parked
                        park_at = loop.time() + (self._park_after or 0.0)  # try again later
                        continue
                    timeout = min(timeout, max(park_at - loop.time(), 0.0))
                await wait_for(wake, timeout)
                # This process's Respond hands over the answer it committed: no read back.
                answered = woken_with(wake)
                if (
                    isinstance(answered, ManagedInputRecord)
                    and answered.pending.round_id == round_id
                    and (
                        answered.status is ManagedInputStatus.RESPONSE_VALIDATED
                        or self._delivery_started(answered)
                    )
                    and answered.responses is not None
                ):
                    return answered.responses
            finally:
                self._notifier.unregister(round_id, wake)

    async def _park(self, pending: PendingElicitationRound) -> None:
        """Release the execution to wait for the round's answer with no worker (the
        store's `park`: the round still pending, no cancel asked), then end its task:
        the process holds nothing of it while it waits, and the worker that claims it
        once it is answered (or its deadline passed) adopts the round. Returns if the
        store did not park it (answered meanwhile: the wait goes on and finds it)."""
        try:
            parked = await offload(self._store.park, self._execution_id, self._lease.lease)
        except M3Error:  # the database, or a lost lease (its renewal acts on that)
            return
        if not parked:
            return
        self._lifecycle.parked(self._execution_id, pending.round_id)
        self._end_round_span(pending.round_id, "parked")
        self.open_round_id, self._open_operation_id = None, None
        self._open_resumable = False
        assert self._slot is not None
        self._slot.parked()
        await asyncio.sleep(0)  # the task's cancel is delivered here
        raise asyncio.CancelledError  # (a slot that did not cancel: the same end)

    def _delivery_started(self, record: ManagedInputRecord) -> bool:
        """A Respond here started the round's delivery for this worker with its answer
        (only the round's lease holder moves it on from response_validated)."""
        if record.status not in _STARTED:
            return False
        if record.lease is None or record.lease.owner_id != self._lease.lease.owner_id:
            return False
        self._started_early.add(record.pending.round_id)
        return True

    async def _expire(self, pending: PendingElicitationRound) -> None:
        """Fail the round for its deadline, unless a response committed first."""
        try:
            await stored(
                self._rounds.fail,
                pending.round_id,
                self._lease.lease,
                failure_code=DEADLINE_FAILURE_CODE,
                failure_message=DEADLINE_MESSAGE,
                expected_statuses=[ManagedInputStatus.PENDING],
            )
        except ManagedInputStateError:
            return
        self._lifecycle.round_failed(
            self._execution_id, pending.round_id, DEADLINE_FAILURE_CODE, answered=False
        )
        self._end_round_span(pending.round_id, "failed", DEADLINE_FAILURE_CODE)
        self._forget(pending.round_id)
        raise OperationTimeout(
            expired_at_deadline(pending.round_id, pending.deadline),
            metadata={"round_id": pending.round_id, "execution_id": self._execution_id},
        )


# Where a Respond's commit leaves a round whose delivery it started.
_STARTED = (ManagedInputStatus.DELIVERY_STARTED, ManagedInputStatus.DELIVERED)


def _completed(result: OperationResult) -> bool:
    """The server returned the operation's final result (an error result included)."""
    return result.result is not None
