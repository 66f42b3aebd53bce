"""RemoteMCPTestKit: the seed's synchronous handle API over gRPC.

    with RemoteMCPTestKit("127.0.0.1:50051") as kit:
        agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        handle = agent.submit("...", server="shipping", tools=["shipping:book_shipment"],
                              human_input="managed")
        pending = handle.wait_for_pending(timeout=60)   # as on the embedded handle
        ...

Failed calls raise the same typed errors as the embedded API (m3grpc.errors).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
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


class RemoteMCPTestKit(calls.KitBase[grpc.Channel]):
    """A client of an `m3grpc serve` service; owns its channel (use it as a context manager).

    `timeout` is the deadline, in seconds, of every call except Result waits and
    WatchPending streams; None: no deadline.
    """

    def _open_channel(self, connection: Connection, target: str) -> grpc.Channel:
        return connection.sync_channel(target)

    def __enter__(self) -> RemoteMCPTestKit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    # -- executions ----------------------------------------------------------------------

    def agents(self, configs: Sequence[Mapping[str, Any]]) -> list[RemoteAgent]:
        return [RemoteAgent(self, *config) for config in calls.agent_configs(configs)]

    def submit(
        self,
        spec: AgentSpec | OperationSpec,
        human_input: HumanInput = "fail",
        *,
        request_id: str | None = None,
    ) -> RemoteExecutionHandle:
        return self._submit(requests.spec_request(spec, human_input, request_id))

    def respond(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        """Respond to a round by ID; tells the round's status and whether it was a replay."""
        return self._run(calls.respond(round_id, responses, idempotency_key))

    def handle(self, execution_id: str) -> RemoteExecutionHandle:
        """A handle on an existing execution (e.g. one submitted by another process)."""
        return RemoteExecutionHandle(self, execution_id)

    def watch_pending(
        self,
        *,
        execution_id: str | None = None,
        cursor: str | None = None,
        kinds: Iterable[WatchEventClass] | None = None,
    ) -> Iterator[WatchEvent]:
        """Pending rounds now, then live events; resume with an event's `cursor`.
        `kinds`: only events of these classes, e.g. `[RoundPending]` (default: all);
        a cursor resumes after its event whatever the kinds."""
        return self._watch(execution_id, cursor, kinds, None)

    def _watch(
        self,
        execution_id: str | None,
        cursor: str | None,
        kinds: Iterable[WatchEventClass] | None,
        timeout: float | None,
    ) -> Generator[WatchEvent, None, None]:
        """WatchPending's events; `timeout`: the stream's deadline, after which it
        raises TimeoutError (None: none)."""
        call = self._stubs.executions.WatchPending(
            calls.watch_request(execution_id, cursor, kinds),
            timeout=timeout,
            metadata=with_trace(self._metadata),
        )
        try:
            for message in call:
                event = event_from_message(message)
                if event is not None:
                    yield event
        except grpc.RpcError as error:
            if timeout is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise calls.pending_wait_timeout(execution_id or "", timeout) from error
            raise typed_error(error) from error
        finally:
            call.cancel()  # the consumer stopped early: end the stream

    def list_servers(
        self, names: Sequence[str] | None = None, *, include_tools: bool = False
    ) -> list[ServerDescription]:
        """The service's server bindings (all, or those named), sorted by name; with
        `include_tools`, each with its tools or `tools_error` (the service connects
        to each server). An unknown name raises ServerBindingNotFoundError."""
        return self._run(calls.list_servers(names or (), include_tools, self.timeout))

    def get_round(self, round_id: str) -> RoundView:
        """One round by ID (any status), its answer redacted: the actions and content
        keys, never content values. An unknown ID raises RoundNotFoundError."""
        return self._run(calls.get_round(round_id))

    def list_rounds(
        self,
        *,
        execution_id: str | None = None,
        statuses: Sequence[ManagedInputStatus | str] = (),
        page_size: int = 0,
        page_token: str | None = None,
    ) -> RoundPage:
        """One page of rounds, oldest first: all, or one execution's, or those in
        `statuses`. Pass the page's `next_page_token` (with the same filters) for
        the next; `page_size` 0 is the service's default (50)."""
        return self._run(calls.list_rounds(execution_id, statuses, page_size, page_token))

    def _submit(self, request: execution_service_pb2.SubmitRequest) -> RemoteExecutionHandle:
        return RemoteExecutionHandle(self, self._run(calls.submit(request)))

    def _run(self, call: Call[R]) -> R:
        deadline = self.timeout if call.deadline == calls.KIT_TIMEOUT else call.deadline
        try:
            reply = call.method(self._stubs)(
                call.request, timeout=deadline, metadata=with_trace(self._metadata)
            )
        except grpc.RpcError as error:
            raise typed_error(error) from error
        return call.read(reply)


class RemoteAgent:
    """An agent configuration; `submit` runs it against a named server binding."""

    def __init__(self, kit: RemoteMCPTestKit, harness: str, models: tuple[str, ...]) -> None:
        self._kit = kit
        self.harness = harness
        self.models = models

    def submit(
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
    ) -> RemoteExecutionHandle:
        options = SubmitOptions.of(locals())
        request = requests.agent_request(
            prompt=prompt, server=server, harness=self.harness, models=self.models, options=options
        )
        return self._kit._submit(request)


class RemoteExecutionHandle:
    """The seed's execution handle, backed by RPCs."""

    def __init__(self, kit: RemoteMCPTestKit, execution_id: str) -> None:
        self._kit = kit
        self.execution_id = execution_id

    def pending_elicitation(self) -> PendingElicitationRound | None:
        return self._kit._run(calls.pending(self.execution_id))

    def wait_for_pending(self, timeout: float | None = None) -> PendingElicitationRound | None:
        """The pending round as soon as there is one (WatchPending pushes it: no
        polling); None once the execution has finished without one; TimeoutError
        after `timeout` seconds."""
        seconds = wait_seconds(timeout)
        if seconds == 0:  # no stream: look once, as the embedded handle does
            pending = self.pending_elicitation()
            if pending is not None or self.snapshot().lifecycle is ExecutionStatus.FINISHED:
                return pending
            raise calls.pending_wait_timeout(self.execution_id, seconds)
        events = self._kit._watch(self.execution_id, None, calls.WAIT_KINDS, seconds)
        try:
            for event in events:
                if isinstance(event, RoundPending):
                    return event.round
        finally:
            events.close()  # ends the stream now, not when the generator is collected
        return None

    def pending_rounds(self) -> Iterator[PendingElicitationRound]:
        """Each round once, as it becomes pending, until the execution finishes."""
        seen: set[str] = set()
        events = self._kit._watch(self.execution_id, None, calls.WAIT_KINDS, None)
        try:
            for event in events:
                if isinstance(event, RoundPending) and event.round.round_id not in seen:
                    seen.add(event.round.round_id)
                    yield event.round
        finally:
            events.close()

    def respond_elicitation(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
        *,
        idempotency_key: str,
    ) -> RespondOutcome:
        # The round must be this execution's, as the embedded handle checks.
        return self._kit._run(
            calls.respond(round_id, responses, idempotency_key, self.execution_id)
        )

    def snapshot(self) -> ExecutionState:
        return self._kit._run(calls.snapshot(self.execution_id))

    def result(self, timeout: float | None = None) -> ExecutionResult:
        return self._kit._run(calls.result(self.execution_id, timeout))

    def cancel(self) -> None:
        self._kit._run(calls.cancel(self.execution_id))

    def watch_pending(
        self, cursor: str | None = None, kinds: Iterable[WatchEventClass] | None = None
    ) -> Iterator[WatchEvent]:
        """This execution's events; the iterator ends after it finishes."""
        return self._kit.watch_pending(execution_id=self.execution_id, cursor=cursor, kinds=kinds)
