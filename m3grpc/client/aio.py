"""AsyncRemoteMCPTestKit: the seed's asynchronous handle API over grpc.aio.

async with AsyncRemoteMCPTestKit("127.0.0.1:50051") as kit:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = await agent.submit("...", server="shipping", human_input="managed")
    async for event in handle.watch_pending():
        ...
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from m3grpc.client import calls
from m3grpc.client.calls import Call, Connection
from m3grpc.client.trace_context import with_trace
from m3grpc.servers import ServerDescription
from m3grpc.specs import AgentSpec, ElicitationPlan, OperationSpec, PermissionPolicy, ScriptStep
from m3grpc.submit_options import RespondOutcome, SubmitOptions
from m3grpc.types import (
    ElicitationResponse,
    ExecutionResult,
    ExecutionState,
    ExecutionStatus,
    HumanInput,
    ManagedInputStatus,
    PendingElicitationRound,
    RoundPage,
    RoundView,
)
from m3grpc.waits import wait_seconds
from m3grpc.wire import requests
from m3grpc.wire.events import RoundPending, WatchEvent, WatchEventClass, event_from_message
from m3grpc.wire.gen.m3.v1 import execution_service_pb2
from m3grpc.wire.requests import ServerRef
from m3grpc.wire.status import typed_error

R = TypeVar("R")


class AsyncRemoteMCPTestKit(calls.KitBase[grpc.aio.Channel]):
    """Like RemoteMCPTestKit, with awaitable methods; create it inside the event loop."""

    def _open_channel(self, connection: Connection, target: str) -> grpc.aio.Channel:
        return connection.aio_channel(target)

    async def __aenter__(self) -> AsyncRemoteMCPTestKit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def agents(self, configs: Sequence[Mapping[str, Any]]) -> list[AsyncRemoteAgent]:
        return [AsyncRemoteAgent(self, *config) for config in calls.agent_configs(configs)]

    async def submit(
        self,
        spec: AgentSpec | OperationSpec,
        *,
        human_input: HumanInput = "fail",
        request_id: str | None = None,
    ) -> AsyncRemoteExecutionHandle:
        return await self._submit(requests.spec_request(spec, human_input, request_id))

    async def respond(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        """Respond to a round by ID; tells the round's status and whether it was a replay."""
        return await self._run(calls.respond(round_id, responses, idempotency_key))

    def handle(self, execution_id: str) -> AsyncRemoteExecutionHandle:
        return AsyncRemoteExecutionHandle(self, execution_id)

    async def watch_pending(
        self,
        *,
        execution_id: str | None = None,
        cursor: str | None = None,
        kinds: Iterable[WatchEventClass] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        async for event in self._watch(execution_id, cursor, kinds, None):
            yield event

    async def _watch(
        self,
        execution_id: str | None,
        cursor: str | None,
        kinds: Iterable[WatchEventClass] | None,
        timeout: float | None,
    ) -> AsyncGenerator[WatchEvent, None]:
        """As RemoteMCPTestKit._watch."""
        call = self._stubs.executions.WatchPending(
            calls.watch_request(execution_id, cursor, kinds),
            timeout=timeout,
            metadata=with_trace(self._metadata),
        )
        try:
            async for message in call:
                event = event_from_message(message)
                if event is not None:
                    yield event
        except grpc.RpcError as error:
            if timeout is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise calls.pending_wait_timeout(execution_id or "", timeout) from error
            raise typed_error(error) from error
        finally:
            call.cancel()

    async def list_servers(
        self, names: Sequence[str] | None = None, *, include_tools: bool = False
    ) -> list[ServerDescription]:
        """As RemoteMCPTestKit.list_servers."""
        return await self._run(calls.list_servers(names or (), include_tools, self.timeout))

    async def get_round(self, round_id: str) -> RoundView:
        """As RemoteMCPTestKit.get_round."""
        return await self._run(calls.get_round(round_id))

    async def list_rounds(
        self,
        *,
        execution_id: str | None = None,
        statuses: Sequence[ManagedInputStatus | str] = (),
        page_size: int = 0,
        page_token: str | None = None,
    ) -> RoundPage:
        """As RemoteMCPTestKit.list_rounds."""
        return await self._run(calls.list_rounds(execution_id, statuses, page_size, page_token))

    async def _submit(
        self, request: execution_service_pb2.SubmitRequest
    ) -> AsyncRemoteExecutionHandle:
        return AsyncRemoteExecutionHandle(self, await self._run(calls.submit(request)))

    async def _run(self, call: Call[R]) -> R:
        deadline = self.timeout if call.deadline == calls.KIT_TIMEOUT else call.deadline
        try:
            reply = await call.method(self._stubs)(
                call.request, timeout=deadline, metadata=with_trace(self._metadata)
            )
        except grpc.RpcError as error:
            raise typed_error(error) from error
        return call.read(reply)


class AsyncRemoteAgent:
    def __init__(self, kit: AsyncRemoteMCPTestKit, harness: str, models: tuple[str, ...]) -> None:
        self._kit = kit
        self.harness = harness
        self.models = models

    async def submit(
        self,
        prompt: str,
        *,
        server: ServerRef,
        tools: Sequence[str] = (),
        script: Sequence[ScriptStep | Mapping[str, Any]] | None = None,
        elicitation_plan: ElicitationPlan | Mapping[str, Any] | None = None,
        permission_policy: PermissionPolicy | Mapping[str, Any] | None = None,
        human_input: HumanInput = "fail",
        round_limit: int = 8,
        round_timeout_seconds: float | None = None,
        request_id: str | None = None,
    ) -> AsyncRemoteExecutionHandle:
        options = SubmitOptions.of(locals())
        request = requests.agent_request(
            prompt=prompt, server=server, harness=self.harness, models=self.models, options=options
        )
        return await self._kit._submit(request)


class AsyncRemoteExecutionHandle:
    def __init__(self, kit: AsyncRemoteMCPTestKit, execution_id: str) -> None:
        self._kit = kit
        self.execution_id = execution_id

    async def pending_elicitation(self) -> PendingElicitationRound | None:
        return await self._kit._run(calls.pending(self.execution_id))

    async def wait_for_pending(
        self, timeout: float | None = None
    ) -> PendingElicitationRound | None:
        """As RemoteExecutionHandle.wait_for_pending."""
        seconds = wait_seconds(timeout)
        if seconds == 0:
            pending = await self.pending_elicitation()
            if pending is not None:
                return pending
            if (await self.snapshot()).lifecycle is ExecutionStatus.FINISHED:
                return None
            raise calls.pending_wait_timeout(self.execution_id, seconds)
        events = self._kit._watch(self.execution_id, None, calls.WAIT_KINDS, seconds)
        try:
            async for event in events:
                if isinstance(event, RoundPending):
                    return event.round
        finally:
            await events.aclose()  # ends the stream now
        return None

    async def pending_rounds(self) -> AsyncIterator[PendingElicitationRound]:
        """Each round once, as it becomes pending, until the execution finishes."""
        seen: set[str] = set()
        events = self._kit._watch(self.execution_id, None, calls.WAIT_KINDS, None)
        try:
            async for event in events:
                if isinstance(event, RoundPending) and event.round.round_id not in seen:
                    seen.add(event.round.round_id)
                    yield event.round
        finally:
            await events.aclose()

    async def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        # The round must be this execution's, as the embedded handle checks.
        return await self._kit._run(
            calls.respond(round_id, responses, idempotency_key, self.execution_id)
        )

    async def snapshot(self) -> ExecutionState:
        return await self._kit._run(calls.snapshot(self.execution_id))

    async def result(self, timeout: float | None = None) -> ExecutionResult:
        return await self._kit._run(calls.result(self.execution_id, timeout))

    async def cancel(self) -> None:
        await self._kit._run(calls.cancel(self.execution_id))

    def watch_pending(
        self, cursor: str | None = None, kinds: Iterable[WatchEventClass] | None = None
    ) -> AsyncIterator[WatchEvent]:
        return self._kit.watch_pending(execution_id=self.execution_id, cursor=cursor, kinds=kinds)
