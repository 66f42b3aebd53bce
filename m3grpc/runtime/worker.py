"""The worker pool: claims queued executions, runs each under a renewed lease,
and finishes it exactly once.

Concurrency is bounded by `concurrency`: executions actively running. An
execution waiting for a human's answer holds no slot (it re-acquires one
before its answer is delivered), so paused executions never block the queue.
Claiming goes through the database, so several processes (service replicas)
can share one queue. One heartbeat renews the leases of every execution of
the pool, and of their rounds, in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from m3grpc import tracing
from m3grpc.errors import ManagedInputConflict
from m3grpc.harness import (
    Harness,
    HarnessOutcome,
    HarnessTask,
    InputRound,
    OperationRef,
    OperationStep,
    ResumePoint,
    operation_index,
)
from m3grpc.runtime.leases import LeaseHolder
from m3grpc.runtime.lifecycle import Lifecycle
from m3grpc.runtime.limits import Limits, bounded_result
from m3grpc.runtime.local_wakes import HUB
from m3grpc.runtime.notifier import Notifier, finished_state_key
from m3grpc.runtime.offload import offload, offload_lease
from m3grpc.runtime.outage import stored
from m3grpc.runtime.resolvers import InFlight, ManagedInputResolver, PlanInputResolver
from m3grpc.runtime.shared_poll import SharedPoll
from m3grpc.runtime.submission import parse_spec
from m3grpc.servers import ServerBinding, StdioServer
from m3grpc.specs import AgentSpec, OperationSpec, ScriptStep
from m3grpc.storage import ClaimedExecution, ManagedInputRecord, SqlExecutionStore
from m3grpc.storage.managed_input import RoundSettle
from m3grpc.types import (
    AgentReport,
    ExecutionOutcome,
    ExecutionResult,
    ExecutionState,
    ManagedInputLease,
    OperationResult,
)

log = logging.getLogger(__name__)

# The stop reason of an execution handed to another worker at a graceful shutdown.
_RELEASED = "worker_released"
# The stop reason (and failure code) of an execution whose lease a renewal found lost.
_LEASE_LOST = "lease_lost"
# The stop reason of an execution parked while its round waits for an answer.
_PARKED = "parked"
# At most this many claims at once while more executions are queued (see _claim_loop).
_CLAIM_BATCH = 8

# A claimed execution's parsed spec and harness task.
Prepared = tuple[AgentSpec | OperationSpec, HarnessTask]


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    lease_duration: timedelta = timedelta(seconds=30)
    # How often a waiting round re-reads the database for writes made elsewhere.
    poll_interval: float = 0.5
    # The same while other replicas' changes are heard (PostgreSQL LISTEN/NOTIFY):
    # polling is then only a fallback.
    listening_poll_interval: float = 10.0
    # The longest the sweeper (m3grpc/runtime/sweeper.py) waits between two passes;
    # it also wakes at the next deadline or lease expiry it knows of. Default: the
    # lease duration, at most 10 s.
    recovery_interval: float | None = None
    # The deadline of a managed round whose spec sets no round_timeout; None: none.
    default_round_timeout: timedelta | None = None
    # How long a resumable round (2026-07-28) waits for its answer in this process
    # before its execution is parked: released, so that it costs only its rows while
    # it waits (no task, no lease), and claimed again once answered (or at its
    # deadline). None: never parked.
    park_after: float | None = 2.0


class WorkerPool:
    def __init__(
        self,
        store: SqlExecutionStore,
        notifier: Notifier,
        poll: SharedPoll,
        harnesses: Mapping[str, Harness],
        settings: WorkerSettings,
        env: Mapping[str, str],
        limits: Limits | None = None,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        self.lifecycle = lifecycle or Lifecycle()
        self.owner_id = f"worker-{uuid.uuid4().hex[:12]}"
        self._store = store
        self._notifier = notifier
        self._poll = poll
        self._harnesses = dict(harnesses)
        self._settings = settings
        self._env = dict(env)
        self._limits = limits or Limits()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._leases: dict[str, LeaseHolder] = {}
        self._resolvers: dict[str, PlanInputResolver | ManagedInputResolver] = {}
        # Running executions waiting for a human: they hold no slot.
        self._waiting: set[str] = set()
        # Waiting executions whose answer came, queued for a slot (they go first).
        self._resuming = 0
        self._slot_freed = asyncio.Event()
        self._stop_reasons: dict[str, tuple[ExecutionOutcome, str, str]] = {}
        # Executions whose task was cancelled: a second cancel would cut its cleanup
        # (a Cancel call and the same request heard back by NOTIFY, in either order).
        self._cancelled: set[str] = set()
        self._wake = asyncio.Event()
        # The last claim found no work, and no work was announced since (wake()):
        # a freed slot then needs no claim (an empty claim is a write transaction);
        # work queued elsewhere unheard is found by the poll, as before.
        self._queue_drained = False
        # Rounds a worker here waits on for an answer: round_id -> (execution_id,
        # whether the harness sends the answer on at once); see `early_delivery`.
        self._awaiting: dict[str, tuple[str, bool]] = {}
        # Running executions claimed again after a release (they hold an adopted round).
        self._adopting: set[str] = set()
        # Slots held for executions this process submits and claims at their creation
        # (`reserve`), until their store call returns.
        self._reserved = 0
        self._wakes = 0
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def running(self) -> int:
        return len(self._running)

    def running_ids(self) -> frozenset[str]:
        """The executions this pool runs now: their owner is alive and renews their
        leases, even if a stalled loop let one lapse (the sweeper spares them)."""
        return frozenset(self._running)

    def runs(self, execution_id: str) -> bool:
        """This pool runs the execution now: when it ends, the execution's waiters
        are notified with its result (None: not stored here; read it)."""
        return execution_id in self._running

    def has_no_pending_round(self, execution_id: str) -> bool:
        """This pool runs the execution and its worker holds no open round (nor an
        adopted one): the execution has no pending round now, and the round it
        stores next is announced to its waiters (`pending_key`)."""
        if execution_id not in self._running:
            return False
        resolver = self._resolvers.get(execution_id)
        if resolver is None:
            # Not started yet: a queued execution has no rounds; a released one
            # claimed again has the round its worker adopts.
            return execution_id not in self._adopting
        if isinstance(resolver, PlanInputResolver):
            return True  # answered from the plan: no rounds
        return resolver.holds_no_round

    @property
    def waiting(self) -> int:
        """Running executions waiting for a human's answer."""
        return len(self._waiting)

    @property
    def alive(self) -> bool:
        """Started, not stopping, and neither the claim nor the heartbeat loop
        has ended (a loop ending on its own means the workers stopped)."""
        return (
            bool(self._loops)
            and not self._stopping
            and not any(loop.done() for loop in self._loops)
        )

    @property
    def active(self) -> int:
        """Executions holding a slot: running and not waiting for a human."""
        return len(self._running) - len(self._waiting)

    async def start(self) -> None:
        # Recovery of other workers' expired leases is the runtime's sweeper's
        # (m3grpc/runtime/sweeper.py), which runs whether this pool has slots or not.
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="m3-claim"),
            asyncio.create_task(self._heartbeat_loop(), name="m3-heartbeat"),
        ]

    def wake(self) -> None:
        """New work was queued: claim it now rather than at the next poll."""
        self._wakes += 1
        self._queue_drained = False
        self._wake.set()

    def reserve(self) -> tuple[str, timedelta] | None:
        """A slot for an execution this process is about to submit, to be claimed in
        its creation's transaction (the store's `create_execution(claim_for=...)`):
        (owner_id, lease duration), or None when it must queue (no free slot, or
        work may be queued ahead of it: claims take the oldest first). Pair it
        with `submitted`."""
        if self._stopping or not self._loops or not self._queue_drained:
            return None
        if self._free() <= 0:
            return None
        if HUB.linked:
            # Worker processes share this database (`workers.processes`): the
            # submission queues, and the first process that claims it runs it;
            # claimed here at once, every Submit would go to this process alone.
            return None
        self._reserved += 1
        return self.owner_id, self._settings.lease_duration

    def submitted(
        self,
        claimed: ClaimedExecution | None,
        *,
        reserved: bool,
        queued: bool = True,
        prepared: Prepared | None = None,
    ) -> None:
        """A submission's store call ended: run what it claimed (with its spec
        parsed already, `prepared`), or claim what it `queued` (False: it failed).
        `reserved`: it held a slot from `reserve` (given back here, whatever the
        call did)."""
        if reserved:
            self._reserved -= 1
        if claimed is not None:
            self._start(claimed, prepared)
            return
        if reserved:
            self._freed()  # the held slot is free again
        if queued:
            self.wake()

    def early_delivery(self, round_id: str) -> tuple[ManagedInputLease, bool] | None:
        """For a Respond to the round: (the waiting worker's lease, mark_delivered) when
        a worker here waits on it and could deliver at once (a free slot, a live
        lease, not stopping), so the answer's commit starts the delivery too
        (the store's `submit_responses_detailed(start_delivery=...)`); None: the
        worker starts it after the answer, as it always could."""
        entry = self._awaiting.get(round_id)
        if entry is None or self._stopping or self._free() <= 0:
            return None
        execution_id, mark_delivered = entry
        holder = self._leases.get(execution_id)
        if holder is None or execution_id in self._stop_reasons:
            return None
        if holder.lease.expires_at <= self._store.now() + self._settings.lease_duration / 3:
            return None  # due for renewal: the worker renews it before its delivery
        return holder.lease, mark_delivered

    def cancel(self, execution_id: str) -> bool:
        """Cancel a running execution of this process at once; False if not here."""
        task = self._running.get(execution_id)
        if task is None:
            return False
        self._stop_reasons.setdefault(
            execution_id, (ExecutionOutcome.CANCELLED, "cancelled", "the execution was cancelled")
        )
        if execution_id not in self._cancelled:
            self._cancelled.add(execution_id)
            task.cancel()
        return True

    def cancel_requested(self, execution_id: str) -> None:
        """Another replica stored a cancel request: act on it now, as the next lease
        renewal would (unless the execution is stopping already)."""
        if execution_id not in self._stop_reasons:
            self.cancel(execution_id)

    async def stop(self, grace: float) -> None:
        """Stop claiming; hand every execution whose round can pass to another
        worker on at once (it waits for a human, and the next worker to claim it
        delivers the answer); let the other running executions finish for `grace`
        seconds, then cancel the rest (finished failed, code `worker_shutdown`)."""
        self._stopping = True
        # The heartbeat runs on until the last execution stops: leases stay live.
        heartbeat = [loop for loop in self._loops if loop.get_name() == "m3-heartbeat"]
        others = [loop for loop in self._loops if loop not in heartbeat]
        await _cancel_all(others)
        for execution_id, resolver in list(self._resolvers.items()):
            task = self._running.get(execution_id)
            if (
                task is not None
                and isinstance(resolver, ManagedInputResolver)
                and resolver.releasable
                and execution_id not in self._stop_reasons
            ):
                self._stop_reasons[execution_id] = (
                    ExecutionOutcome.FAILED,
                    _RELEASED,
                    "the service shut down before the execution finished",
                )
                self.cancel(execution_id)
        try:
            await self._stop_running(grace)
        finally:
            await _cancel_all(heartbeat)

    async def _stop_running(self, grace: float) -> None:
        tasks = list(self._running.values())
        if tasks:
            _done, still_running = await asyncio.wait(tasks, timeout=grace)
            for execution_id, task in list(self._running.items()):
                if task in still_running:
                    self._stop_reasons.setdefault(
                        execution_id,
                        (
                            ExecutionOutcome.FAILED,
                            "worker_shutdown",
                            "the service shut down before the execution finished",
                        ),
                    )
                    # Not a second cancel for one cancelled already (a Cancel, or
                    # the handover above): it would cut the clean-up it is running.
                    # The MCP SDK's stdio client stops its server in a shield that a
                    # task's cancel still breaks, and then waits for the server's
                    # stdout to close for good (the server never told to exit).
                    self.cancel(execution_id)
            if still_running:
                await asyncio.wait(still_running)

    # -- loops ------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        failing = False
        while not self._stopping:
            self._wake.clear()
            batch = 1  # the first claim finds out whether more are queued
            while True:
                free = self._free()
                if free <= 0:
                    self._queue_drained = False  # work may be waiting for this slot
                    break
                wakes = self._wakes
                # With more queued, several claims at once: on SQLite they share one
                # commit (group commit), and a queue of many no longer waits for one
                # claim's transaction and event-loop round trip after another.
                outcomes = await asyncio.gather(
                    *(
                        offload(
                            self._store.claim_next,
                            owner_id=self.owner_id,
                            lease_duration=self._settings.lease_duration,
                        )
                        for _ in range(min(batch, free))
                    ),
                    return_exceptions=True,
                )
                claims = [c for c in outcomes if isinstance(c, ClaimedExecution)]
                for claimed in claims:  # those that succeeded run, whatever the others did
                    self._start(claimed)
                errors = [e for e in outcomes if isinstance(e, BaseException)]
                cancelled = [e for e in errors if not isinstance(e, Exception)]
                if cancelled:
                    raise cancelled[0]
                if errors:
                    # The database may be down for a while: keep trying, log once.
                    if not failing:
                        log.error(
                            "claiming work failed; retrying every poll interval",
                            exc_info=errors[0],
                        )
                    failing = True
                    break
                if failing:
                    log.warning("claiming work succeeds again")
                    failing = False
                # Unless work was announced while the claims ran (it loops again).
                if len(claims) < len(outcomes) or not all(c.more_claimable for c in claims):
                    self._queue_drained = wakes == self._wakes  # nothing else to take
                    if self._queue_drained:
                        break
                batch = min(batch * 2, _CLAIM_BATCH)  # all found more: take more at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._wake.wait(), self._notifier.poll_interval(self._settings.poll_interval)
                )

    async def _heartbeat_loop(self) -> None:
        duration = self._settings.lease_duration
        while True:
            await asyncio.sleep(duration.total_seconds() / 3)
            try:
                held = dict(self._leases)
                renewed = await self._renew(held)
            except Exception:  # the database may be briefly unavailable: try again
                log.exception("lease renewal failed; retrying next interval")
                continue
            for execution_id, holder in held.items():
                if self._leases.get(execution_id) is not holder or holder.ending:
                    continue  # finished, or finishing, meanwhile
                if execution_id in self._stop_reasons:
                    continue  # already stopping: a second cancel would cut its cleanup
                if execution_id not in renewed:
                    self.lifecycle.lease_lost(execution_id)
                    self._stop_reasons.setdefault(
                        execution_id,
                        (ExecutionOutcome.FAILED, _LEASE_LOST, "the worker lost its lease"),
                    )
                    self.cancel(execution_id)
                elif renewed[execution_id]:
                    self.cancel(execution_id)

    async def _renew(self, holders: Mapping[str, LeaseHolder]) -> dict[str, bool]:
        """Renew the executions' leases (and their rounds'); returns, per execution
        still held, whether cancel was requested. Lapsed leases renew too."""
        if not holders:
            return {}
        renewed = await offload_lease(
            self._store.renew_leases,
            self.owner_id,
            {execution_id: h.lease.lease_token for execution_id, h in holders.items()},
            lease_duration=self._settings.lease_duration,
        )
        for execution_id, (expires_at, _cancel) in renewed.items():
            holder = holders[execution_id]
            holder.lease = holder.lease.model_copy(update={"expires_at": expires_at})
        return {execution_id: cancel for execution_id, (_e, cancel) in renewed.items()}

    async def _ensure_lease(self, execution_id: str) -> None:
        """Renew the execution's lease now if it lapsed or is about to (the loop or
        the heartbeat stalled: renewal is due every third of the lease), so the
        write that follows is not refused as stale."""
        holder = self._leases.get(execution_id)
        margin = self._settings.lease_duration / 3
        if holder is not None and holder.lease.expires_at <= self._store.now() + margin:
            await self._renew({execution_id: holder})

    # -- slots ----------------------------------------------------------------------

    def _free(self) -> int:
        """Slots neither running, nor queued for by a resumer, nor reserved."""
        return self._settings.concurrency - (self.active + self._resuming + self._reserved)

    def _pause(self, execution_id: str) -> None:
        """The execution waits for a human: its slot goes back to the queue."""
        if execution_id in self._running and execution_id not in self._waiting:
            self._waiting.add(execution_id)
            self._freed()

    def _parked(self, execution_id: str) -> None:
        """The execution's task ends as parked, unless it is stopping already."""
        if execution_id not in self._stop_reasons:
            self._stop_reasons[execution_id] = (
                ExecutionOutcome.FAILED,
                _PARKED,
                "parked while its round waits for an answer",
            )
            self.cancel(execution_id)

    def _leave(self, execution_id: str) -> None:
        """Stop waiting without queueing for a slot (the execution is stopping)."""
        self._waiting.discard(execution_id)

    async def _resume(self, execution_id: str) -> None:
        """Take a slot again before the answer is delivered; resumers go before
        queued executions."""
        if execution_id not in self._waiting:
            return
        self._resuming += 1
        try:
            while self.active >= self._settings.concurrency:
                self._slot_freed.clear()
                await self._slot_freed.wait()
        finally:
            self._resuming -= 1
            self._waiting.discard(execution_id)

    def _start(self, claimed: ClaimedExecution, prepared: Prepared | None = None) -> None:
        self._leases[claimed.execution_id] = LeaseHolder(claimed.lease)
        if claimed.resumed_round_id is not None:
            self._adopting.add(claimed.execution_id)
        self.lifecycle.execution_claimed(claimed.execution_id, self.owner_id)
        task = asyncio.create_task(self._run(claimed, prepared), name=claimed.execution_id)
        self._running[claimed.execution_id] = task

    def _freed(self) -> None:
        self._slot_freed.set()
        if not self._queue_drained:
            self._wake.set()

    # -- one execution ------------------------------------------------------------

    async def _run(self, claimed: ClaimedExecution, prepared: Prepared | None) -> None:
        # One span per claim, in the trace the execution was submitted in.
        with tracing.span(
            "m3.execution",
            parent=claimed.trace_context,
            attributes={
                "m3.execution_id": claimed.execution_id,
                "m3.human_input": claimed.human_input,
                "m3.worker_id": self.owner_id,
                "m3.resumed_round_id": claimed.resumed_round_id,
            },
        ) as span:
            run = self._run_traced(claimed, span, prepared)
            del claimed  # only the run keeps the claim (it drops the spec document it parses)
            await run

    async def _run_traced(
        self, claimed: ClaimedExecution, span: tracing.Span, prepared: Prepared | None
    ) -> None:
        execution_id = claimed.execution_id
        lease = self._leases[execution_id]
        # The result as stored, handed to this process's Result waiters with the wake-up.
        finished: ExecutionResult | None = None
        try:
            # Parsing a large spec is work in proportion to its size: off the loop
            # (a submission claimed at its creation was parsed on its store thread).
            if prepared is None:
                prepared = await offload(self.prepare, execution_id, claimed.spec)
            spec, task = prepared
            # Parsed, the stored document is not kept for as long as the execution
            # runs (a paused one waits for a human with it).
            claimed = replace(claimed, spec={})
            resumed = None
            if claimed.resumed_round_id is not None:
                resumed, task = await offload(self._resume_point, claimed.resumed_round_id, task)
            resolver = self._resolver(claimed, spec, lease, resumed)
            self._resolvers[execution_id] = resolver
            result = await self._execute(execution_id, spec, task, resolver)
            if result is None:
                parked = self._stop_reasons.get(execution_id, (None, None, None))[1] == _PARKED
                if not parked:
                    log.info(
                        "execution %s released: its round waits for the next worker",
                        execution_id,
                    )
                span.set_attribute("m3.outcome", "parked" if parked else "released")
                return
            span.set_attribute("m3.outcome", result.outcome.value)
            if result.failure_code:
                span.fail(result.failure_code)
            await self._ensure_lease(execution_id)
            lease.ending = True
            try:
                # WatchPending sends its execution_finished event from the state
                # handed over, not read back (see Notifier.handing_over).
                with self._notifier.handing_over(finished_state_key(execution_id)) as hand_over:
                    # The last round's resolve, left by the resolver, commits with it.
                    settle = (
                        resolver.final_settle
                        if isinstance(resolver, ManagedInputResolver)
                        else None
                    )
                    state, stored_result, resolved = await stored(
                        self._finish_bounded, execution_id, lease.lease, result, settle
                    )
                    hand_over(state)
                if isinstance(resolver, ManagedInputResolver):
                    resolver.final_settled(resolved)
                finished = stored_result
                self.lifecycle.execution_finished(
                    execution_id, result.outcome.value, result.failure_code
                )
            except ManagedInputConflict:
                # The lease was lost (e.g. the process stalled past it): recovery
                # has failed the execution closed, and that result stands. Counted
                # as a lost lease like one a renewal finds, unless a renewal did.
                stopped_for = self._stop_reasons.get(execution_id)
                if stopped_for is None or stopped_for[1] != _LEASE_LOST:
                    self.lifecycle.lease_lost(execution_id, at_finish=True)
        except Exception:
            log.exception("execution %s crashed in the runtime", execution_id)
        finally:
            self._running.pop(execution_id, None)
            self._resolvers.pop(execution_id, None)
            self._leases.pop(execution_id, None)
            self._adopting.discard(execution_id)
            self._waiting.discard(execution_id)
            self._stop_reasons.pop(execution_id, None)
            self._cancelled.discard(execution_id)
            self._notifier.notify(execution_id, finished)
            self._freed()

    async def _execute(
        self,
        execution_id: str,
        spec: AgentSpec | OperationSpec,
        task: HarnessTask,
        resolver: PlanInputResolver | ManagedInputResolver,
    ) -> ExecutionResult | None:
        """The execution's result; None if it was handed to another worker."""
        harness_name = spec.harness if isinstance(spec, AgentSpec) else "scripted"
        harness = self._harnesses[harness_name]
        operations: list[OperationResult] = []
        ran = HarnessOutcome(operations)
        try:
            returned = await harness.run(task, resolver)
            # Agent harnesses return a HarnessOutcome (with the agent's report).
            ran = returned if isinstance(returned, HarnessOutcome) else HarnessOutcome(returned)
            operations = ran.operations
            await resolver.settle_all(operations)
        except asyncio.CancelledError:
            outcome, code, message = self._stop_reasons.get(
                execution_id,
                (ExecutionOutcome.CANCELLED, "cancelled", "the execution was cancelled"),
            )
            if code == _PARKED:
                return None  # the store released it (see ManagedInputResolver._park)
            if code == _RELEASED:
                if isinstance(resolver, ManagedInputResolver) and await resolver.release():
                    return None
                code = "worker_shutdown"  # its round moved on meanwhile: fail closed
            await resolver.fail_open_round(code, message)
            operations = operations or await self._stored_operations(execution_id)
            return self._result(
                execution_id,
                _with_cut_short(operations, resolver, code, message),
                outcome,
                code,
                message,
            )
        except Exception as exc:  # a harness bug must still finish the execution
            log.exception("harness %s failed on %s", harness_name, execution_id)
            await resolver.fail_open_round("harness_error", str(exc))
            operations = operations or await self._stored_operations(execution_id)
            operations = _with_cut_short(operations, resolver, "harness_error", str(exc))
            return self._result(
                execution_id, operations, ExecutionOutcome.FAILED, "harness_error", str(exc)
            )
        failed = next((op for op in operations if not op.ok), None)
        agent = ran.agent
        if failed is None and ran.failure is None:
            return self._result(
                execution_id, operations, ExecutionOutcome.SUCCEEDED, None, None, agent
            )
        if failed is not None:
            code, message = failed.failure_code or "operation_failed", failed.failure_message or ""
        else:
            assert ran.failure is not None
            code, message = ran.failure
        await resolver.fail_open_round(code, message)
        return self._result(execution_id, operations, ExecutionOutcome.FAILED, code, message, agent)

    async def _stored_operations(self, execution_id: str) -> list[OperationResult]:
        """What the execution's operations returned, as stored when each finished: a
        harness stopped midway (cancelled, crashed) hands back none of it, and a
        Result must not lose what ran (recovery reports the same)."""
        try:
            return await offload(self._store.operation_results, execution_id)
        except Exception:  # the store's fault: finish with what is at hand
            log.warning("could not read the operation results of %s", execution_id, exc_info=True)
            return []

    def _finish_bounded(
        self,
        execution_id: str,
        lease: ManagedInputLease,
        result: ExecutionResult,
        settle: RoundSettle | None,
    ) -> tuple[ExecutionState, ExecutionResult, bool]:
        """Finish the execution with its result bounded so the stored Result always
        fits in a reply (work in proportion to a long script's result), on the
        store thread that stores it: one hop off the loop, not two. `settle`: the
        last round, resolved in the same transaction (returned: whether it was)."""
        bounded = bounded_result(result, self._limits)
        if settle is None:
            return self._store.finish(execution_id, lease, bounded), bounded, False
        state, resolved = self._store.finish_settling(execution_id, lease, bounded, settle)
        return state, bounded, resolved

    def _result(
        self,
        execution_id: str,
        operations: list[OperationResult],
        outcome: ExecutionOutcome,
        code: str | None,
        message: str | None,
        agent: AgentReport | None = None,
    ) -> ExecutionResult:
        # The operations are validated models already: no second validation of a
        # possibly long tuple on the event loop (bounded_result copies it later).
        return ExecutionResult.model_construct(
            execution_id=execution_id,
            outcome=outcome,
            operations=tuple(operations),
            failure_code=code,
            failure_message=message,
            finished_at=self._store.now(),
            agent=agent,
        )

    # -- building blocks ------------------------------------------------------------

    def _resume_point(
        self, round_id: str, task: HarnessTask
    ) -> tuple[ManagedInputRecord, HarnessTask]:
        """The adopted round of a released execution, and the task resuming at it:
        the operations stored before it are not run again."""
        record = self._store.managed_input_store.get_round(round_id)
        pending = record.pending
        index = operation_index(pending.logical_operation_id)
        completed = self._store.operation_results(task.execution_id)
        round = InputRound(
            operation=OperationRef(
                logical_operation_id=pending.logical_operation_id,
                server=pending.server,
                operation_kind=pending.operation_kind,
                operation_name=pending.operation_name,
                arguments=dict(record.operation_parameters),
            ),
            round_index=record.round_index,
            requests=pending.requests,
            request_state=pending.request_state,
            protocol="mrtr",
            resume_token=record.harness_resume_token,
        )
        # An unreadable position resumes nowhere: the harness fails it closed.
        point = ResumePoint(
            operation_index=-1 if index is None else index, completed=completed, round=round
        )
        return record, replace(task, resume=point)

    def _resolver(
        self,
        claimed: ClaimedExecution,
        spec: AgentSpec | OperationSpec,
        lease: LeaseHolder,
        resumed: ManagedInputRecord | None = None,
    ) -> PlanInputResolver | ManagedInputResolver:
        if claimed.human_input != "managed":
            return PlanInputResolver(
                spec.elicitation_plan, self._store, execution_id=claimed.execution_id, lease=lease
            )
        assert isinstance(spec, AgentSpec)
        timeout = spec.round_timeout_seconds
        execution_id = claimed.execution_id
        return ManagedInputResolver(
            self._store,
            self._notifier,
            execution_id=claimed.execution_id,
            lease=lease,
            round_limit=spec.round_limit,
            round_timeout=(
                timedelta(seconds=timeout) if timeout else self._settings.default_round_timeout
            ),
            poll=self._poll,
            slot=_Slot(self, execution_id),
            resumed=resumed,
            lifecycle=self.lifecycle,
            park_after=self._settings.park_after,
        )

    def prepare(self, execution_id: str, document: dict[str, Any]) -> Prepared:
        """The execution's parsed spec and its harness task (blocking: off the loop)."""
        spec = parse_spec(document)
        return spec, self._harness_task(execution_id, spec)

    def _harness_task(self, execution_id: str, spec: AgentSpec | OperationSpec) -> HarnessTask:
        server = self._with_env(spec.server)
        if isinstance(spec, AgentSpec):
            return HarnessTask(
                execution_id=execution_id,
                prompt=spec.prompt,
                server=server,
                tools=spec.tools,
                script=[_step(step) for step in spec.script] if spec.script is not None else None,
                round_limit=spec.round_limit,
                models=spec.models,
                permission_policy=spec.permission_policy.default,
            )
        step = spec.operation
        return HarnessTask(
            execution_id=execution_id,
            prompt="",
            server=server,
            tools=[f"{server.name}:{step.name}"] if step.kind == "tool" else [],
            script=[_step(step)],
            round_limit=spec.round_limit,
        )

    def _with_env(self, server: ServerBinding) -> ServerBinding:
        if isinstance(server, StdioServer) and self._env:
            return server.model_copy(update={"env": {**self._env, **server.env}})
        return server


def _with_cut_short(
    operations: list[OperationResult], resolver: InFlight, code: str, message: str
) -> list[OperationResult]:
    """The operations of a stopped execution, with the one in flight when it stopped
    (a tool call paused at its round, say) failed with the stop's reason."""
    cut = resolver.in_flight
    if cut is None or any(op.logical_operation_id == cut.logical_operation_id for op in operations):
        return operations
    return [*operations, cut.failed(code, message)]


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _Slot:
    """One execution's worker slot, as its ManagedInputResolver sees it."""

    def __init__(self, pool: WorkerPool, execution_id: str) -> None:
        self._pool = pool
        self._execution_id = execution_id

    def pause(self) -> None:
        self._pool._pause(self._execution_id)

    def leave(self) -> None:
        self._pool._leave(self._execution_id)

    def awaiting(self, round_id: str, sent_on_return: bool) -> None:
        """The worker waits on the round's answer (see WorkerPool.early_delivery)."""
        self._pool._awaiting[round_id] = (self._execution_id, sent_on_return)

    def answered(self, round_id: str) -> None:
        """The worker no longer waits on the round's answer."""
        self._pool._awaiting.pop(round_id, None)

    async def resume(self) -> None:
        await self._pool._resume(self._execution_id)
        await self.ensure_lease()

    def parked(self) -> None:
        """The store released the execution to wait for its answer: end its task."""
        self._pool._parked(self._execution_id)

    async def ensure_lease(self) -> None:
        await self._pool._ensure_lease(self._execution_id)


def _step(step: ScriptStep) -> OperationStep:
    return OperationStep(
        kind=step.kind,
        name=step.name,
        arguments=dict(step.arguments),
        task=step.task,
        task_ttl_seconds=step.task_ttl_seconds,
    )
