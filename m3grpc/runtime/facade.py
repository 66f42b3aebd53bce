"""The runtime facade: what the embedded kit and the gRPC api call.

It owns the worker pool and the notifier on one event loop (on PostgreSQL the
notifier also hears other replicas' changes: m3grpc/runtime/replica_wakes.py).
Every store call runs in a worker thread so the loop never blocks on SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from m3grpc import tracing
from m3grpc.errors import (
    ManagedInputStateError,
    ManagedInputValidationError,
    ResultWaitTimeout,
    WorkQueueFullError,
)
from m3grpc.harness import Harness, ScriptedHarness
from m3grpc.harness.claude_code import ClaudeCodeHarness, ClaudeCodeSettings
from m3grpc.harness.codex import CodexHarness, CodexSettings
from m3grpc.runtime.lifecycle import Lifecycle
from m3grpc.runtime.limits import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    Limits,
    checked_id,
    id_violations,
    response_violations,
)
from m3grpc.runtime.notifier import (
    EVENTS_KEY,
    Notifier,
    created_round_key,
    finished_state_key,
    pending_key,
    wait_for,
    woken_with,
)
from m3grpc.runtime.offload import offload, store_calls_on_loop
from m3grpc.runtime.replica_wakes import ReplicaWakes
from m3grpc.runtime.shared_poll import SAFETY_REREAD_SECONDS, SharedPoll
from m3grpc.runtime.submission import spec_document, validate_submission
from m3grpc.runtime.sweeper import Sweeper
from m3grpc.runtime.worker import Prepared, WorkerPool, WorkerSettings
from m3grpc.storage import (
    CreatedExecution,
    OwnedEvent,
    ResponseSubmission,
    SqlExecutionStore,
    StoredEvent,
)
from m3grpc.storage.loop_calls import calls_finished
from m3grpc.types import (
    ElicitationResponse,
    ExecutionResult,
    ExecutionState,
    ExecutionStatus,
    HumanInput,
    ManagedInputLease,
    ManagedInputRecord,
    ManagedInputStatus,
)
from m3grpc.waits import wait_seconds


def default_harnesses(
    *, codex: CodexSettings | None = None, claude_code: ClaudeCodeSettings | None = None
) -> dict[str, Harness]:
    # Without explicit settings, an agent's come from its M3_* variables (`from_env`).
    return {
        "scripted": ScriptedHarness(),
        "codex": CodexHarness(codex),
        "claude-code": ClaudeCodeHarness(claude_code),
    }


class Runtime:
    """Executions on one store: submit, observe, answer, cancel; workers run them."""

    def __init__(
        self,
        store: SqlExecutionStore,
        *,
        settings: WorkerSettings | None = None,
        harnesses: Mapping[str, Harness] | None = None,
        env: Mapping[str, str] | None = None,
        queue_capacity: int | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or Limits()
        self.settings = settings or WorkerSettings()
        self.harnesses = dict(harnesses or default_harnesses())
        self._env = dict(env or {})
        self._queue_capacity = queue_capacity
        self._pool: WorkerPool | None = None
        self._notifier: Notifier | None = None
        self._replica_wakes: ReplicaWakes | None = None
        self._poll: SharedPoll | None = None
        self._sweeper: Sweeper | None = None
        self._store_calls_here = contextlib.ExitStack()
        # Lifecycle events (log lines, and the service's metrics as a listener).
        self.lifecycle = Lifecycle()

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        # SQLite store calls run on this loop from now on (m3grpc.runtime.offload).
        self._store_calls_here = contextlib.ExitStack()
        self._store_calls_here.enter_context(store_calls_on_loop(self.store.dialect == "sqlite"))
        self._notifier = Notifier(
            asyncio.get_running_loop(),
            listening_poll_interval=self.settings.listening_poll_interval,
        )
        # A write this process commits that appended events wakes watchers.
        self.store.add_events_listener(self.notify_events)
        self._poll = SharedPoll(self.store, self._notifier, self.settings.poll_interval)
        self._poll.start()
        self._pool = WorkerPool(
            self.store,
            self._notifier,
            self._poll,
            self.harnesses,
            self.settings,
            self._env,
            self.limits,
            self.lifecycle,
        )
        # Overdue rounds are carried out here whether this process has worker
        # slots or not; its first pass runs before the pool claims anything.
        self._sweeper = Sweeper(
            self.store,
            self._notifier,
            self.lifecycle,
            live=self._pool.running_ids,
            on_released=self._pool.wake,
            lease_duration=self.settings.lease_duration,
            interval=self.settings.recovery_interval,
        )
        await self._sweeper.start()
        await self._pool.start()
        self._replica_wakes = ReplicaWakes(
            self.store,
            self._notifier,
            on_queued=self._queued_elsewhere,
            on_cancel=self._pool.cancel_requested,
        )
        self._replica_wakes.start()

    async def stop(self, grace: float = 10.0) -> None:
        if self._sweeper is not None:
            await self._sweeper.stop()
        if self._pool is not None:
            await self._pool.stop(grace)
        if self._replica_wakes is not None:
            await self._replica_wakes.stop()
        if self._poll is not None:
            await self._poll.stop()
        # A harness may keep MCP sessions its executions share (the scripted one does
        # for 2026-07-28 HTTP bindings): closed once its executions have stopped.
        for harness in self.harnesses.values():
            close = getattr(harness, "aclose", None)
            if close is not None:
                await close()
        self.store.remove_events_listener(self.notify_events)
        # Store calls whose callers were cancelled above go on, on SQLite only while
        # this loop runs (m3grpc.storage.loop_calls): their writes end before we return.
        await calls_finished()
        self._store_calls_here.close()

    def _queued_elsewhere(self) -> None:
        """Another replica queued or released an execution: claim it, and sweep (a
        released one's round may be due before the sweep this process waits for)."""
        if self._pool is not None:
            self._pool.wake()
        if self._sweeper is not None:
            self._sweeper.wake()

    @property
    def notifier(self) -> Notifier:
        if self._notifier is None:
            raise RuntimeError("the runtime is not started")
        return self._notifier

    # -- health and gauges (read by the service's health check and metrics) ----------

    def poll_interval(self, base: float) -> float:
        """How long a wait may go without re-reading the database, for a waiter whose
        own polling interval is `base`: longer while other replicas' changes are heard."""
        return self.notifier.poll_interval(base)

    @property
    def workers_alive(self) -> bool:
        """The worker pool and the sweeper run: started, not stopped, no loop ended."""
        return (
            self._pool is not None
            and self._pool.alive
            and self._sweeper is not None
            and self._sweeper.alive
        )

    @property
    def running_executions(self) -> int:
        """Executions this process runs now, those waiting for a human included."""
        return self._pool.running if self._pool is not None else 0

    @property
    def waiting_executions(self) -> int:
        """Executions of this process waiting for a human's answer."""
        return self._pool.waiting if self._pool is not None else 0

    def check_database(self) -> None:
        """Raise if the database cannot be reached (blocking: call from a thread)."""
        self.store.ping()

    def queue_depth(self) -> int:
        """Queued executions in the database, every replica's (blocking)."""
        return self.store.count_queued()

    def rounds_by_status(self) -> dict[str, int]:
        """Rounds per status in the database, every replica's (blocking)."""
        return self.store.count_rounds_by_status()

    # -- executions -----------------------------------------------------------------

    async def submit(
        self,
        spec: object,
        human_input: object = "fail",
        *,
        request_id: str | None = None,
        principal: str | None = None,
        server_name: str | None = None,
    ) -> CreatedExecution:
        """Queue an execution; `principal`: who submitted it (None: no authentication).
        `server_name`: the name the caller gave the spec's server binding, when the
        spec holds this service's configuration of it (the request_id's digest
        covers the name: `create_execution`).

        When this process's worker pool has a free slot and nothing is queued ahead,
        the execution is claimed for it in the transaction that creates it, and its
        worker starts from here: no second commit, no claim that has to find it."""
        if self._queue_capacity is not None:
            # Off the event loop: a large spec costs CPU in proportion to its size
            # (bounded by the limits), and the loop serves every other call.
            mode, document = await offload(self._validated, spec, human_input, request_id)
            queued = await offload(self.store.count_queued)
            # A retry of a submission already made (AIP-155) gets that execution (or
            # its conflict), however full the queue is: often it is what fills it.
            if queued >= self._queue_capacity and not await self._submitted_before(
                request_id, principal
            ):
                raise WorkQueueFullError(
                    f"the work queue is full ({queued} queued executions); retry later",
                    retry_after_seconds=1.0,
                    metadata={"queue_capacity": str(self._queue_capacity)},
                )
            validated: tuple[HumanInput, dict[str, Any]] | None = (mode, document)
        else:
            validated = None
        pool = self._pool
        claim_for = pool.reserve() if pool is not None else None
        # The worker's spans continue this trace, whenever it claims the execution.
        carrier = tracing.carrier()
        # A task of its own, shielded: a caller cancelled while the store call runs
        # still has its committed claim started (or its reserved slot given back).
        call = asyncio.ensure_future(
            offload(
                self._create,
                spec,
                human_input,
                request_id,
                principal,
                carrier,
                claim_for,
                validated,
                server_name,
            )
        )
        if pool is not None:
            call.add_done_callback(functools.partial(_hand_to_pool, pool, claim_for is not None))
        created, _prepared = await asyncio.shield(call)
        self.lifecycle.execution_submitted(created.state.execution_id, replayed=not created.created)
        return created

    async def _submitted_before(self, request_id: str | None, principal: str | None) -> bool:
        if not request_id:
            return False
        found: bool = await offload(self.store.has_request_id, request_id, principal)
        return found

    def _create(
        self,
        spec: object,
        human_input: object,
        request_id: str | None,
        principal: str | None,
        carrier: dict[str, str],
        claim_for: tuple[str, timedelta] | None,
        validated: tuple[HumanInput, dict[str, Any]] | None,
        server_name: str | None = None,
    ) -> tuple[CreatedExecution, Prepared | None]:
        """Validate (unless `validated` already) and store the submission (claimed
        for `claim_for`, if given), on a store thread: one hop off the loop. A
        claimed execution's spec is parsed here too, for its worker (None if that
        failed: the worker parses it again and fails the execution as it would)."""
        if validated is None:
            validated = self._validated(spec, human_input, request_id)
        mode, document = validated
        created = self.store.create_execution(
            document,
            human_input=mode,
            request_id=request_id,
            trace_context=carrier,
            principal=principal,
            claim_for=claim_for,
            server_name=server_name,
        )
        prepared = None
        if created.claimed is not None and self._pool is not None:
            try:
                prepared = self._pool.prepare(created.claimed.execution_id, created.claimed.spec)
            except Exception:
                prepared = None
        return created, prepared

    def _validated(
        self, spec: object, human_input: object, request_id: str | None
    ) -> tuple[HumanInput, dict[str, Any]]:
        parsed, mode = validate_submission(
            spec,
            human_input,
            persistent_store=self.store.persistent,
            harnesses=self.harnesses,
            limits=self.limits,
            request_id=request_id,
        )
        return mode, spec_document(parsed)

    async def snapshot(self, execution_id: str) -> ExecutionState:
        return await offload(self.store.get_state, _execution_id(execution_id))

    async def result(self, execution_id: str, timeout: float | None = None) -> ExecutionResult:
        """Wait for the terminal result; ResultWaitTimeout if `timeout` runs out first."""
        execution_id = _execution_id(execution_id)
        timeout = wait_seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        assert self._poll is not None, "the runtime is not started"
        with self._poll.execution(execution_id):
            return await self._await_result(execution_id, timeout, deadline)

    async def _await_result(
        self, execution_id: str, timeout: float | None, deadline: float | None
    ) -> ExecutionResult:
        while True:
            wake = self.notifier.register(execution_id)
            try:
                # While this process's worker runs it, the result cannot be stored
                # yet, and the worker's end wakes this wait (with the result): no read.
                # Both happen on this loop, so the end cannot slip between the two.
                if self._pool is None or not self._pool.runs(execution_id):
                    result = await offload(self.store.get_result, execution_id)
                    if result is not None:
                        return result
                # Woken by the finish (this process's, a heard replica's, or the shared poll).
                wait = SAFETY_REREAD_SECONDS
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ResultWaitTimeout(
                            f"execution {execution_id} did not finish within {timeout} s",
                            metadata={"execution_id": execution_id, "timeout": f"{timeout}s"},
                        )
                    wait = min(wait, remaining)
                await wait_for(wake, wait)
                # This process's worker hands over the result it stored: no read back.
                finished = woken_with(wake)
                if isinstance(finished, ExecutionResult):
                    return finished
            finally:
                self.notifier.unregister(execution_id, wake)

    async def cancel(self, execution_id: str) -> ExecutionState:
        """Cancel the execution (idempotent). Returns its state after the request."""
        execution_id = _execution_id(execution_id)
        state = await offload(self.store.request_cancel, execution_id)
        # Cancel at once when this process runs it; another replica sees the flag
        # on its next lease renewal.
        if self._pool is not None:
            self._pool.cancel(execution_id)
        self.notifier.notify(execution_id)
        return state

    # -- managed input -----------------------------------------------------------------

    async def pending_round(self, execution_id: str) -> ManagedInputRecord | None:
        """The single pending round of the execution, or None."""
        execution_id = _execution_id(execution_id)
        await self.snapshot(execution_id)  # ExecutionNotFoundError for unknown IDs
        return await self._pending_round_of(execution_id)

    async def _pending_round_of(self, execution_id: str) -> ManagedInputRecord | None:
        rounds = await offload(
            self.store.managed_input_store.list_rounds,
            execution_id=execution_id,
            statuses=[ManagedInputStatus.PENDING],
            limit=2,
            as_read=True,  # an overdue round is not pending: Respond refuses it
        )
        if len(rounds) > 1:
            raise ManagedInputStateError(
                f"execution {execution_id} has more than one pending round",
                metadata={"execution_id": execution_id},
            )
        return rounds[0] if rounds else None

    async def wait_for_pending(
        self, execution_id: str, timeout: float | None = None, *, skip_round_id: str | None = None
    ) -> ManagedInputRecord | None:
        """The execution's pending round (other than `skip_round_id`) as soon as there is
        one; None once the execution has finished without one. TimeoutError if `timeout`
        seconds pass first. This process's worker wakes it at once (round stored,
        execution finished); writes of other processes are seen by polling."""
        execution_id = _execution_id(execution_id)
        timeout = wait_seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        keys = (pending_key(execution_id), execution_id)
        while True:
            # Registered before reading, so no commit slips between read and wait.
            wakes = [self.notifier.register(key) for key in keys]
            try:
                # While this process's worker runs the execution, only that worker
                # stores its rounds, and its end wakes this wait: no polling (with
                # many executions waiting it was a read per waiter per interval), and
                # it is not finished (a finish not yet run down wakes this wait).
                running = self._pool is not None and self._pool.runs(execution_id)
                # A finished execution has no pending round (its open rounds failed).
                if not running and await self._finished(execution_id):
                    return None
                # Nor has one whose worker here holds no round: no read, the round
                # it stores next wakes this wait (with the record).
                if not (self._pool is not None and self._pool.has_no_pending_round(execution_id)):
                    record = await self._pending_round_of(execution_id)
                    if record is not None and record.pending.round_id != skip_round_id:
                        return record
                wait = (
                    SAFETY_REREAD_SECONDS
                    if running
                    else self.poll_interval(self.settings.poll_interval)
                )
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(
                            f"execution {execution_id} had no pending round within {timeout} s"
                        )
                    wait = min(wait, remaining)
                await asyncio.wait(wakes, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                # This process's worker hands over the round it stored: no read back.
                pushed = woken_with(wakes[0])
                if (
                    isinstance(pushed, ManagedInputRecord)
                    and pushed.pending.round_id != skip_round_id
                ):
                    return pushed
            finally:
                for key, wake in zip(keys, wakes, strict=True):
                    self.notifier.unregister(key, wake)

    async def _finished(self, execution_id: str) -> bool:
        state = await self.snapshot(execution_id)
        return state.lifecycle is ExecutionStatus.FINISHED

    async def respond(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
        execution_id: str | None = None,
    ) -> ResponseSubmission:
        """Submit responses; the worker waiting on the round is woken after the commit."""
        # One rule for every ID (docs/reference/identifiers.md); `execution_id` is
        # checked as a field of its own, before the round is read.
        violations = [
            *id_violations(round_id, "round_id"),
            *id_violations(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY_CHARS),
            *(id_violations(execution_id, "execution_id") if execution_id is not None else []),
        ]
        if isinstance(responses, Mapping):
            violations += response_violations(responses, self.limits)
        if violations:
            # Checked before anything is read or stored; nothing echoes the input.
            raise ManagedInputValidationError("invalid response", field_violations=violations)
        with tracing.span("m3.round.respond", attributes={"m3.round_id": round_id}) as span:
            # The waiting worker of this process is woken by the thread that stored
            # the answer, once it is durable (see _submit_responses); when it can
            # deliver at once, the same commit starts its delivery.
            submission = await offload(
                _submit_responses,
                self.store,
                self.notifier,
                round_id,
                responses,
                idempotency_key=idempotency_key,
                execution_id=execution_id,
                start_delivery=(
                    self._pool.early_delivery(round_id) if self._pool is not None else None
                ),
            )
            answered = str(submission.row.get("execution_id", ""))
            if (
                self._pool is not None
                and not submission.replayed
                and submission.row.get("owner_id") is None
            ):
                self._pool.wake()  # a released (parked) execution: claim it now
            span.set_attribute("m3.execution_id", answered)
            span.set_attribute("m3.round.status", submission.status.value)
            span.set_attribute("m3.replayed", submission.replayed)
            if tracing.carrier():
                # The answerer's trace may not be the submitter's: link the two.
                span.add_link(await offload(self.store.trace_context, answered))
        row = submission.row
        created_at = row.get("created_at")
        self.lifecycle.response_accepted(
            str(row.get("execution_id", "")),
            round_id,
            status=submission.status.value,
            replayed=submission.replayed,
            wait_seconds=(
                (self.store.now() - created_at).total_seconds()
                if isinstance(created_at, datetime) and not submission.replayed
                else None
            ),
        )
        return submission

    async def get_round(self, round_id: str) -> ManagedInputRecord:
        checked_id(round_id, "round_id")
        # As every face reports it: an overdue round as the failure that is due.
        return await offload(self.store.managed_input_store.get_round, round_id, as_read=True)

    async def list_rounds(
        self,
        *,
        execution_id: str | None = None,
        statuses: Collection[ManagedInputStatus] | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int | None = None,
        principal: str | None = None,
    ) -> list[ManagedInputRecord]:
        # An empty filter is no filter; any other must be a well-formed ID.
        execution_id = checked_id(execution_id, "execution_id") if execution_id else None
        return await offload(
            self.store.managed_input_store.list_rounds,
            execution_id=execution_id,
            statuses=statuses,
            after=after,
            limit=limit,
            principal=principal,
            as_read=True,
        )

    # -- tenant isolation --------------------------------------------------------------

    async def require_visible_execution(self, execution_id: str, principal: str | None) -> None:
        """ExecutionNotFoundError unless the execution exists and, when `principal` is
        given, that principal submitted it (never a different error: IDs leak nothing)."""
        execution_id = _execution_id(execution_id)
        await offload(self.store.require_visible_execution, execution_id, principal)

    async def require_visible_round(self, round_id: str, principal: str | None) -> None:
        """RoundNotFoundError unless the round exists and, when `principal` is given,
        belongs to an execution that principal submitted."""
        checked_id(round_id, "round_id")
        await offload(self.store.require_visible_round, round_id, principal)

    # -- events (WatchPending) ----------------------------------------------------------

    async def events_after(
        self,
        after_seq: int,
        *,
        execution_id: str | None = None,
        principal: str | None = None,
        limit: int = 500,
    ) -> list[StoredEvent]:
        return await offload(
            self.store.read_events,
            after_seq=after_seq,
            execution_id=execution_id,
            principal=principal,
            limit=limit,
        )

    async def owned_events_after(self, after_seq: int, *, limit: int = 500) -> list[OwnedEvent]:
        """Every execution's events after `after_seq`, each with its execution's principal."""
        return await offload(self.store.read_owned_events, after_seq=after_seq, limit=limit)

    def notify_events(self) -> None:
        if self._notifier is not None:
            self._notifier.notify(EVENTS_KEY)

    @contextlib.contextmanager
    def events_waiter(self) -> Iterator[asyncio.Future[object]]:
        """A future resolved by the next write this process commits that appended
        events (or another replica's, when their changes are heard). Register it before reading the
        event log, so no commit slips between read and wait; otherwise writes by
        other replicas are seen by polling."""
        wake = self.notifier.register(EVENTS_KEY)
        try:
            yield wake
        finally:
            self.notifier.unregister(EVENTS_KEY, wake)

    async def last_event_seq(self) -> int:
        return await offload(self.store.last_event_seq)

    async def stored_round(self, round_id: str) -> ManagedInputRecord | None:
        """The record of a round this process stored a moment ago, as stored,
        waiting for it if the store call has not returned yet (None: not at hand,
        read it). What a round_pending event announces never changes."""
        record = await self.notifier.handed_over(created_round_key(round_id))
        return record if isinstance(record, ManagedInputRecord) else None

    async def finished_state(self, execution_id: str) -> ExecutionState | None:
        """The state of an execution this process finished a moment ago, waiting
        for it if the store call has not returned yet (None: not at hand, read
        it). A finished execution's state never changes."""
        state = await self.notifier.handed_over(finished_state_key(execution_id))
        return state if isinstance(state, ExecutionState) else None


def _execution_id(value: Any) -> str:
    # A malformed ID is refused, never looked up: NOT_FOUND is for well-formed ones.
    return checked_id(value, "execution_id")


def _hand_to_pool(
    pool: WorkerPool,
    reserved: bool,
    call: asyncio.Future[tuple[CreatedExecution, Prepared | None]],
) -> None:
    """Run what a submission claimed at its creation, or have the pool claim what
    it queued; a failed store call gives its reserved slot back."""
    if call.cancelled() or call.exception() is not None:
        pool.submitted(None, reserved=reserved, queued=False)
        return
    created, prepared = call.result()
    pool.submitted(created.claimed, reserved=reserved, prepared=prepared)


def _submit_responses(
    store: SqlExecutionStore,
    notifier: Notifier,
    round_id: str,
    responses: Mapping[str, ElicitationResponse],
    *,
    idempotency_key: str,
    execution_id: str | None,
    start_delivery: tuple[ManagedInputLease, bool] | None = None,
) -> ResponseSubmission:
    """Store the responses, then wake the worker waiting on the round, from this
    thread: its wake-up is queued on the loop before the caller's return, so the
    worker starts the delivery before the caller's reply is sent (and is woken even
    if the caller is cancelled while the write commits). An answered round's record
    is built here, off the loop, and handed to the worker: no read back (with
    its delivery started, when `start_delivery` asked for it and it did).

    The worker's wake-up and the commit's wake-up of the event-log readers (when
    this thread committed) go to the loop as one callback, the worker's first."""
    with notifier.batched():
        submission = store.managed_input_store.submit_responses_detailed(
            round_id,
            responses,
            idempotency_key=idempotency_key,
            execution_id=execution_id,
            start_delivery=start_delivery,
        )
        answered = submission.status is ManagedInputStatus.RESPONSE_VALIDATED
        if answered and not submission.replayed:
            notifier.notify(round_id, submission.started_record or submission.record)
        else:
            notifier.notify(round_id, submission.record if answered else None)
    return submission
