"""AsyncRemoteMCPTestKit: the seed's asynchronous handle API over grpc.aio.

async with AsyncRemoteMCPTestKit("127.0.0.1:50051") as kit:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = await agent.submit("...", server="shipping", human_input="managed")
    async for event in handle.watch_pending():
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from m3grpc.client.sync import CHANNEL_OPTIONS, respond_outcome
from m3grpc.servers import ServerDescription
from m3grpc.specs import AgentSpec, ElicitationPlan, OperationSpec, PermissionPolicy, ScriptStep
from m3grpc.submit_options import RespondOutcome, SubmitOptions
from m3grpc.types import (
    ElicitationResponse,
    ExecutionResult,
    ExecutionState,
    HumanInput,
    PendingElicitationRound,
)
from m3grpc.wire import messages, requests, servers
from m3grpc.wire.events import WatchEvent, event_from_message
from m3grpc.wire.gen.m3.v1 import (
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_service_pb2,
    execution_service_pb2_grpc,
)
from m3grpc.wire.requests import ServerRef
from m3grpc.wire.status import typed_error

T = TypeVar("T")


class AsyncRemoteMCPTestKit:
    """Like RemoteMCPTestKit, with awaitable methods; create it inside the event loop."""

    def __init__(self, target: str, *, timeout: float | None = 30.0) -> None:
        self._channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        # The generated stubs carry no annotations.
        self._executions = execution_service_pb2_grpc.ExecutionServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._elicitation = elicitation_service_pb2_grpc.ElicitationServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.timeout = timeout

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
        return [
            AsyncRemoteAgent(
                self, config.get("harness", "scripted"), tuple(config.get("models", ()))
            )
            for config in configs
        ]

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
        response = await self._call(
            self._elicitation.Respond,
            requests.respond_request(round_id, responses, idempotency_key),
        )
        return respond_outcome(response)

    def handle(self, execution_id: str) -> AsyncRemoteExecutionHandle:
        return AsyncRemoteExecutionHandle(self, execution_id)

    async def watch_pending(
        self, *, execution_id: str | None = None, cursor: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        request = execution_service_pb2.WatchPendingRequest(
            execution_id=execution_id or "", cursor=cursor or ""
        )
        call = self._executions.WatchPending(request)
        try:
            async for message in call:
                event = event_from_message(message)
                if event is not None:
                    yield event
        except grpc.RpcError as error:
            raise typed_error(error) from error
        finally:
            call.cancel()

    async def list_servers(
        self, names: Sequence[str] | None = None, *, include_tools: bool = False
    ) -> list[ServerDescription]:
        """As RemoteMCPTestKit.list_servers."""
        deadline = None if self.timeout is None else max(self.timeout, 60.0)
        response = await self._call_until(
            self._executions.ListServers,
            servers.list_servers_request(list(names or ()), include_tools),
            deadline if include_tools else self.timeout,
        )
        return servers.server_models(response)

    async def _submit(
        self, request: execution_service_pb2.SubmitRequest
    ) -> AsyncRemoteExecutionHandle:
        response = await self._call(self._executions.Submit, request)
        return AsyncRemoteExecutionHandle(self, response.execution_id)

    async def _call(self, method: Callable[..., Awaitable[T]], request: Any) -> T:
        return await self._call_until(method, request, self.timeout)

    async def _call_until(
        self, method: Callable[..., Awaitable[T]], request: Any, deadline: float | None
    ) -> T:
        try:
            return await method(request, timeout=deadline)
        except grpc.RpcError as error:
            raise typed_error(error) from error


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
        response = await self._kit._call(
            self._kit._elicitation.GetPending,
            elicitation_service_pb2.GetPendingRequest(execution_id=self.execution_id),
        )
        if not response.HasField("round"):
            return None
        return messages.pending_round_model(response.round)

    async def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        return await self._kit.respond(round_id, responses, idempotency_key=idempotency_key)

    async def snapshot(self) -> ExecutionState:
        response = await self._kit._call(
            self._kit._executions.Snapshot,
            execution_service_pb2.SnapshotRequest(execution_id=self.execution_id),
        )
        return messages.state_model(response.state)

    async def result(self, timeout: float | None = None) -> ExecutionResult:
        request, deadline = requests.result_request(self.execution_id, timeout)
        response = await self._kit._call_until(self._kit._executions.Result, request, deadline)
        return messages.result_model(response.result)

    async def cancel(self) -> None:
        await self._kit._call(
            self._kit._executions.Cancel,
            execution_service_pb2.CancelRequest(execution_id=self.execution_id),
        )

    def watch_pending(self, cursor: str | None = None) -> AsyncIterator[WatchEvent]:
        return self._kit.watch_pending(execution_id=self.execution_id, cursor=cursor)
