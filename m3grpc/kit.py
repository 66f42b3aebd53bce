"""The embedded Python API of the seed: MCPTestKit / AsyncMCPTestKit and their handles.

    with MCPTestKit(store=store, env={}) as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit("...", server=shipping_server,
                              tools=["shipping:book_shipment"], human_input="managed")

The sync kit runs the runtime on an event loop in a background thread; the
async kit runs it on the caller's loop. Both submit through the same Runtime,
so a response submitted through a handle wakes its worker right after commit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from m3grpc.harness import Harness
from m3grpc.runtime import Runtime, WorkerSettings
from m3grpc.servers import ServerBinding
from m3grpc.specs import (
    AgentSpec,
    ElicitationPlan,
    OperationSpec,
    PermissionPolicy,
    ScriptStep,
    agent_config,
)
from m3grpc.storage import EphemeralExecutionStore, SqlExecutionStore
from m3grpc.submit_options import RespondOutcome, SubmitOptions
from m3grpc.types import (
    ElicitationResponse,
    ExecutionResult,
    ExecutionState,
    HumanInput,
    PendingElicitationRound,
)

T = TypeVar("T")
Spec = AgentSpec | OperationSpec | Mapping[str, Any]


def _settings(concurrency: int, lease_seconds: float, poll_interval: float) -> WorkerSettings:
    return WorkerSettings(
        concurrency=concurrency,
        lease_duration=timedelta(seconds=lease_seconds),
        poll_interval=poll_interval,
    )


# -- async ------------------------------------------------------------------------------


class AsyncExecutionHandle:
    """One execution, observed and answered from asyncio code."""

    def __init__(self, runtime: Runtime, execution_id: str) -> None:
        self._runtime = runtime
        self.execution_id = execution_id

    async def pending_elicitation(self) -> PendingElicitationRound | None:
        record = await self._runtime.pending_round(self.execution_id)
        return record.pending if record is not None else None

    async def wait_for_pending(
        self, timeout: float | None = None
    ) -> PendingElicitationRound | None:
        """The pending round as soon as there is one (no polling needed); None once the
        execution has finished without one; TimeoutError after `timeout` seconds."""
        record = await self._runtime.wait_for_pending(self.execution_id, timeout)
        return record.pending if record is not None else None

    async def pending_rounds(self) -> AsyncIterator[PendingElicitationRound]:
        """Each round once, as it becomes pending, until the execution finishes."""
        last: str | None = None
        while True:
            record = await self._runtime.wait_for_pending(self.execution_id, skip_round_id=last)
            if record is None:
                return
            last = record.pending.round_id
            yield record.pending

    async def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        submission = await self._runtime.respond(
            round_id, responses, idempotency_key=idempotency_key, execution_id=self.execution_id
        )
        return RespondOutcome(submission.round_id, submission.status, submission.replayed)

    async def snapshot(self) -> ExecutionState:
        return await self._runtime.snapshot(self.execution_id)

    async def result(self, timeout: float | None = None) -> ExecutionResult:
        return await self._runtime.result(self.execution_id, timeout)

    async def cancel(self) -> None:
        await self._runtime.cancel(self.execution_id)


class AsyncAgent:
    def __init__(self, kit: AsyncMCPTestKit, harness: str, models: tuple[str, ...]) -> None:
        self._kit = kit
        self.harness = harness
        self.models = models

    async def submit(
        self,
        prompt: str,
        *,
        server: ServerBinding,
        tools: Sequence[str] = (),
        script: Sequence[ScriptStep | Mapping[str, Any]] | None = None,
        elicitation_plan: ElicitationPlan | Mapping[str, Any] | None = None,
        permission_policy: PermissionPolicy | Mapping[str, Any] | None = None,
        human_input: HumanInput = "fail",
        round_limit: int = 8,
        round_timeout_seconds: float | None = None,
        request_id: str | None = None,
    ) -> AsyncExecutionHandle:
        options = SubmitOptions.of(locals())
        return await self._submit(prompt, server, options)

    async def _submit(
        self, prompt: str, server: ServerBinding, options: SubmitOptions
    ) -> AsyncExecutionHandle:
        """`submit` with its options as one SubmitOptions."""
        document = options.agent_document(
            harness=self.harness, models=self.models, prompt=prompt, server=server
        )
        return await self._kit.submit(
            document, human_input=options.human_input, request_id=options.request_id
        )


class AsyncMCPTestKit:
    """The asyncio kit: `async with AsyncMCPTestKit(store=...) as kit:`."""

    def __init__(
        self,
        store: SqlExecutionStore | None = None,
        env: Mapping[str, str] | None = None,
        *,
        concurrency: int = 4,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.5,
        harnesses: Mapping[str, Harness] | None = None,
    ) -> None:
        self._owns_store = store is None
        self.store = store if store is not None else EphemeralExecutionStore()
        self.runtime = Runtime(
            self.store,
            settings=_settings(concurrency, lease_seconds, poll_interval),
            harnesses=harnesses,
            env=env,
        )

    async def __aenter__(self) -> AsyncMCPTestKit:
        await self.runtime.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.runtime.stop(grace=0)
        if self._owns_store:
            self.store.close()

    def agents(self, configs: Sequence[Mapping[str, Any]]) -> list[AsyncAgent]:
        return [
            AsyncAgent(self, *agent_config(config, index)) for index, config in enumerate(configs)
        ]

    async def submit(
        self, spec: Spec, *, human_input: HumanInput = "fail", request_id: str | None = None
    ) -> AsyncExecutionHandle:
        created = await self.runtime.submit(spec, human_input, request_id=request_id)
        return AsyncExecutionHandle(self.runtime, created.state.execution_id)


# -- sync -------------------------------------------------------------------------------


# Rounds of cancelling what is left on the kit's loop at exit (a task cancelled may
# start others: a store write's commit); bounded so that a task that keeps starting
# more cannot hold the exit.
_TEARDOWN_ROUNDS = 10


class _LoopThread:
    """An event loop in a daemon thread, for running the runtime behind a sync API."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_forever, name="m3-kit", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()

    def _run_forever(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            # As asyncio.run ends: the tasks left (the application's, and what a store
            # write started before its caller returned) are cancelled and run to their
            # end, and whatever they start meanwhile too, before the loop closes.
            try:
                for _ in range(_TEARDOWN_ROUNDS):
                    left = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
                    if not left:
                        break
                    for task in left:
                        task.cancel()
                    self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()


class ExecutionHandle:
    """One execution, observed and answered from synchronous code."""

    def __init__(self, loop: _LoopThread, handle: AsyncExecutionHandle) -> None:
        self._loop = loop
        self._handle = handle
        self.execution_id = handle.execution_id

    def _run(self, awaitable: Awaitable[T]) -> T:
        async def wrapper() -> T:
            return await awaitable

        return self._loop.run(wrapper())

    def pending_elicitation(self) -> PendingElicitationRound | None:
        return self._run(self._handle.pending_elicitation())

    def wait_for_pending(self, timeout: float | None = None) -> PendingElicitationRound | None:
        """The pending round as soon as there is one; None once the execution has
        finished without one; TimeoutError after `timeout` seconds."""
        return self._run(self._handle.wait_for_pending(timeout))

    def pending_rounds(self) -> Iterator[PendingElicitationRound]:
        """Each round once, as it becomes pending, until the execution finishes."""
        runtime, execution_id = self._handle._runtime, self.execution_id
        last: str | None = None
        while True:
            record = self._run(runtime.wait_for_pending(execution_id, skip_round_id=last))
            if record is None:
                return
            last = record.pending.round_id
            yield record.pending

    def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        return self._run(
            self._handle.respond_elicitation(round_id, responses, idempotency_key=idempotency_key)
        )

    def snapshot(self) -> ExecutionState:
        return self._run(self._handle.snapshot())

    def result(self, timeout: float | None = None) -> ExecutionResult:
        return self._run(self._handle.result(timeout))

    def cancel(self) -> None:
        self._run(self._handle.cancel())


class Agent:
    def __init__(self, kit: MCPTestKit, agent: AsyncAgent) -> None:
        self._kit = kit
        self._agent = agent
        self.harness = agent.harness
        self.models = agent.models

    def submit(
        self,
        prompt: str,
        *,
        server: ServerBinding,
        tools: Sequence[str] = (),
        script: Sequence[ScriptStep | Mapping[str, Any]] | None = None,
        elicitation_plan: ElicitationPlan | Mapping[str, Any] | None = None,
        permission_policy: PermissionPolicy | Mapping[str, Any] | None = None,
        human_input: HumanInput = "fail",
        round_limit: int = 8,
        round_timeout_seconds: float | None = None,
        request_id: str | None = None,
    ) -> ExecutionHandle:
        options = SubmitOptions.of(locals())
        thread = self._kit._loop_thread()
        handle = thread.run(self._agent._submit(prompt, server, options))
        return ExecutionHandle(thread, handle)


class MCPTestKit:
    """The synchronous kit: `with MCPTestKit(store=store, env={}) as kit:`."""

    def __init__(
        self,
        store: SqlExecutionStore | None = None,
        env: Mapping[str, str] | None = None,
        *,
        concurrency: int = 4,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.5,
        harnesses: Mapping[str, Harness] | None = None,
    ) -> None:
        self._async_kit = AsyncMCPTestKit(
            store,
            env,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_interval=poll_interval,
            harnesses=harnesses,
        )
        self.store = self._async_kit.store
        self._thread: _LoopThread | None = None

    def _loop_thread(self) -> _LoopThread:
        if self._thread is None:
            raise RuntimeError("use the kit inside a `with MCPTestKit(...)` block")
        return self._thread

    def __enter__(self) -> MCPTestKit:
        self._thread = _LoopThread()
        self._thread.run(self._async_kit.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        thread = self._loop_thread()
        try:
            thread.run(self._async_kit.__aexit__(exc_type, exc, tb))
        finally:
            thread.close()
            self._thread = None

    def agents(self, configs: Sequence[Mapping[str, Any]]) -> list[Agent]:
        return [Agent(self, agent) for agent in self._async_kit.agents(configs)]

    def submit(
        self, spec: Spec, human_input: HumanInput = "fail", *, request_id: str | None = None
    ) -> ExecutionHandle:
        thread = self._loop_thread()
        handle = thread.run(
            self._async_kit.submit(spec, human_input=human_input, request_id=request_id)
        )
        return ExecutionHandle(thread, handle)
