"""The worker pool: claims queued executions, runs each under a renewed lease,
and finishes it exactly once.

Concurrency is bounded by `concurrency`. Claiming goes through the database,
so several processes (service replicas) can share one queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from m3grpc.errors import M3Error, ManagedInputConflict
from m3grpc.harness import Harness, HarnessOutcome, HarnessTask, OperationStep
from m3grpc.runtime.leases import LeaseHolder
from m3grpc.runtime.notifier import Notifier
from m3grpc.runtime.recovery import recover_expired
from m3grpc.runtime.resolvers import ManagedInputResolver, PlanInputResolver
from m3grpc.runtime.submission import parse_spec
from m3grpc.servers import ServerBinding, StdioServer
from m3grpc.specs import AgentSpec, OperationSpec, ScriptStep
from m3grpc.storage import ClaimedExecution, SqlExecutionStore
from m3grpc.types import AgentReport, ExecutionOutcome, ExecutionResult, OperationResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    lease_duration: timedelta = timedelta(seconds=30)
    # How often a waiting round re-reads the database for writes made elsewhere.
    poll_interval: float = 0.5
    # How often recovery looks for expired leases (default: the lease duration).
    recovery_interval: float | None = None


class WorkerPool:
    def __init__(
        self,
        store: SqlExecutionStore,
        notifier: Notifier,
        harnesses: Mapping[str, Harness],
        settings: WorkerSettings,
        env: Mapping[str, str],
    ) -> None:
        self.owner_id = f"worker-{uuid.uuid4().hex[:12]}"
        self._store = store
        self._notifier = notifier
        self._harnesses = dict(harnesses)
        self._settings = settings
        self._env = dict(env)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stop_reasons: dict[str, tuple[ExecutionOutcome, str, str]] = {}
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def running(self) -> int:
        return len(self._running)

    async def start(self) -> None:
        await asyncio.to_thread(recover_expired, self._store)
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="m3-claim"),
            asyncio.create_task(self._recovery_loop(), name="m3-recovery"),
        ]

    def wake(self) -> None:
        """New work was queued: claim it now rather than at the next poll."""
        self._wake.set()

    def cancel(self, execution_id: str) -> bool:
        """Cancel a running execution of this process at once; False if not here."""
        task = self._running.get(execution_id)
        if task is None:
            return False
        self._stop_reasons.setdefault(
            execution_id, (ExecutionOutcome.CANCELLED, "cancelled", "the execution was cancelled")
        )
        task.cancel()
        return True

    async def stop(self, grace: float) -> None:
        """Stop claiming; let running executions finish for `grace` seconds, then
        cancel the rest (finished failed, code `worker_shutdown`)."""
        self._stopping = True
        for loop in self._loops:
            loop.cancel()
        for loop in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
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
                    task.cancel()
            if still_running:
                await asyncio.wait(still_running)

    # -- loops ------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            while len(self._running) < self._settings.concurrency:
                claimed = await asyncio.to_thread(
                    self._store.claim_next,
                    owner_id=self.owner_id,
                    lease_duration=self._settings.lease_duration,
                )
                if claimed is None:
                    break
                task = asyncio.create_task(self._run(claimed), name=claimed.execution_id)
                self._running[claimed.execution_id] = task
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.poll_interval)

    async def _recovery_loop(self) -> None:
        interval = self._settings.recovery_interval or self._settings.lease_duration.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                for execution_id in await asyncio.to_thread(recover_expired, self._store):
                    self._notifier.notify(execution_id)
            except M3Error:
                log.exception("recovery pass failed; retrying next interval")

    # -- one execution ------------------------------------------------------------

    async def _run(self, claimed: ClaimedExecution) -> None:
        execution_id = claimed.execution_id
        lease = LeaseHolder(claimed.lease)
        try:
            spec = parse_spec(claimed.spec)
            task = self._harness_task(execution_id, spec)
            resolver = self._resolver(claimed, spec, lease)
            heartbeat = asyncio.create_task(self._heartbeat(execution_id, lease, resolver))
            try:
                result = await self._execute(execution_id, spec, task, resolver)
            finally:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
            try:
                await asyncio.to_thread(self._store.finish, execution_id, lease.lease, result)
            except ManagedInputConflict:
                # The lease was lost (e.g. the process stalled past it): recovery
                # has failed the execution closed, and that result stands.
                log.warning("execution %s finished after its lease was lost", execution_id)
        except Exception:
            log.exception("execution %s crashed in the runtime", execution_id)
        finally:
            self._running.pop(execution_id, None)
            self._stop_reasons.pop(execution_id, None)
            self._notifier.notify(execution_id)
            self._wake.set()

    async def _execute(
        self,
        execution_id: str,
        spec: AgentSpec | OperationSpec,
        task: HarnessTask,
        resolver: PlanInputResolver | ManagedInputResolver,
    ) -> ExecutionResult:
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
            await resolver.fail_open_round(code, message)
            return self._result(execution_id, operations, outcome, code, message)
        except Exception as exc:  # a harness bug must still finish the execution
            log.exception("harness %s failed on %s", harness_name, execution_id)
            await resolver.fail_open_round("harness_error", str(exc))
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

    def _result(
        self,
        execution_id: str,
        operations: list[OperationResult],
        outcome: ExecutionOutcome,
        code: str | None,
        message: str | None,
        agent: AgentReport | None = None,
    ) -> ExecutionResult:
        return ExecutionResult(
            execution_id=execution_id,
            outcome=outcome,
            operations=tuple(operations),
            failure_code=code,
            failure_message=message,
            finished_at=self._store.now(),
            agent=agent,
        )

    async def _heartbeat(
        self,
        execution_id: str,
        lease: LeaseHolder,
        resolver: PlanInputResolver | ManagedInputResolver,
    ) -> None:
        duration = self._settings.lease_duration
        while True:
            await asyncio.sleep(duration.total_seconds() / 3)
            try:
                renewed, cancel_requested = await asyncio.to_thread(
                    self._store.renew_execution, execution_id, lease.lease, lease_duration=duration
                )
                lease.lease = renewed
                for round_id in resolver.held_round_ids:
                    with contextlib.suppress(M3Error):
                        await asyncio.to_thread(
                            self._store.managed_input_store.renew,
                            round_id,
                            lease.lease,
                            lease_duration=duration,
                        )
            except ManagedInputConflict:
                log.error("execution %s lost its lease; stopping it", execution_id)
                self._stop_reasons.setdefault(
                    execution_id,
                    (ExecutionOutcome.FAILED, "lease_lost", "the worker lost its lease"),
                )
                self._running[execution_id].cancel()
                return
            if cancel_requested:
                self.cancel(execution_id)
                return

    # -- building blocks ------------------------------------------------------------

    def _resolver(
        self, claimed: ClaimedExecution, spec: AgentSpec | OperationSpec, lease: LeaseHolder
    ) -> PlanInputResolver | ManagedInputResolver:
        if claimed.human_input != "managed":
            return PlanInputResolver(
                spec.elicitation_plan, self._store, execution_id=claimed.execution_id, lease=lease
            )
        assert isinstance(spec, AgentSpec)
        timeout = spec.round_timeout_seconds
        return ManagedInputResolver(
            self._store,
            self._notifier,
            execution_id=claimed.execution_id,
            lease=lease,
            round_limit=spec.round_limit,
            round_timeout=timedelta(seconds=timeout) if timeout else None,
            poll_interval=self._settings.poll_interval,
        )

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


def _step(step: ScriptStep) -> OperationStep:
    return OperationStep(kind=step.kind, name=step.name, arguments=dict(step.arguments))
