"""m3.v1.ExecutionService on the Runtime facade."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from grpc_status import rpc_status

from m3grpc.api import guard
from m3grpc.api.auth import principal_filter, principal_name
from m3grpc.api.guard import Context
from m3grpc.api.server_listing import binding_not_found, list_servers
from m3grpc.api.watch import PendingWatch, ServiceShuttingDown
from m3grpc.errors import (
    FieldViolation,
    ModelValidationError,
    ResultWaitTimeout,
)
from m3grpc.runtime import Runtime
from m3grpc.runtime.limits import checked_id, encoded_size
from m3grpc.servers import ServerBinding
from m3grpc.types import ExecutionResult, HumanInput
from m3grpc.wire import convert, events, messages, spec_codec
from m3grpc.wire.gen.m3.v1 import execution_service_pb2 as pb
from m3grpc.wire.gen.m3.v1 import execution_service_pb2_grpc
from m3grpc.wire.status import shutting_down_status

# Stop a Result wait a little before the call's own deadline, so the typed
# RESULT_WAIT_TIMEOUT reaches the client rather than a bare DEADLINE_EXCEEDED.
# A quarter second: on a busy host the reply can take tens of milliseconds to
# leave after the wait ends, and 50 ms was sometimes not enough.
_DEADLINE_MARGIN = 0.25
# A Submit up to this size is converted on the event loop: a thread hop costs more.
_INLINE_CONVERSION_BYTES = 65_536
# A Result of at most this many operations, of at most that size, too.
_INLINE_OPERATIONS = 32


class ExecutionService(execution_service_pb2_grpc.ExecutionServiceServicer):
    def __init__(
        self, runtime: Runtime, bindings: Mapping[str, ServerBinding], watch: PendingWatch
    ) -> None:
        self._runtime = runtime
        self._bindings = dict(bindings)
        self._watch = watch

    @guard.unary
    async def Submit(self, request: pb.SubmitRequest, context: Context) -> pb.SubmitResponse:
        # A large request is converted off the event loop (work in proportion to its
        # size, while the loop serves every other call); the common small one inline,
        # without a thread hop.
        if request.ByteSize() > _INLINE_CONVERSION_BYTES:
            document, human_input, server_name = await asyncio.to_thread(
                _submission, request, self._bindings
            )
        else:
            document, human_input, server_name = _submission(request, self._bindings)
        # Violations the model layer finds name model fields; guard maps them to
        # request paths.
        principal = principal_name()
        created = await self._runtime.submit(
            document,
            human_input,
            request_id=request.request_id or None,
            principal=principal,
            # The request names its server; the document holds its configuration.
            server_name=server_name,
        )
        state = created.state
        # A replayed request_id is scoped to its principal: the execution is theirs.
        self._watch.learn_principal(state.execution_id, principal)
        return pb.SubmitResponse(
            execution_id=state.execution_id, state=messages.state_message(state)
        )

    @guard.unary
    async def Snapshot(self, request: pb.SnapshotRequest, context: Context) -> pb.SnapshotResponse:
        execution_id = await self._visible(request.execution_id)
        state = await self._runtime.snapshot(execution_id)
        return pb.SnapshotResponse(state=messages.state_message(state))

    @guard.unary
    async def Result(self, request: pb.ResultRequest, context: Context) -> pb.ResultResponse:
        execution_id = await self._visible(request.execution_id)
        requested = None
        if request.HasField("timeout"):
            try:
                requested = convert.from_duration(request.timeout)
            except convert.WireValueError as exc:
                raise _invalid_timeout(exc.description) from None
            if requested < 0:
                raise _invalid_timeout("must not be negative")
        wait = requested
        remaining = context.time_remaining()
        if remaining is not None and (wait is None or remaining - _DEADLINE_MARGIN < wait):
            wait = max(remaining - _DEADLINE_MARGIN, 0.0)
        try:
            result = await self._runtime.result(execution_id, timeout=wait)
        except ResultWaitTimeout as error:
            # The requested Duration as sent (a float of the longest one would not
            # convert back), else the wait the call's deadline allowed.
            waited = (
                str(request.timeout.ToJsonString())
                if requested is not None
                else convert.duration_json(wait or 0.0)
            )
            raise ResultWaitTimeout(
                error.message, metadata={"execution_id": execution_id, "timeout": waited}
            ) from None
        # A result may be large (up to the stored-result limit): convert such a one off
        # the loop; the common small one inline, without a thread hop.
        if _small_result(result):
            message = messages.result_message(result)
        else:
            message = await asyncio.to_thread(messages.result_message, result)
        return pb.ResultResponse(result=message)

    @guard.unary
    async def Cancel(self, request: pb.CancelRequest, context: Context) -> pb.CancelResponse:
        state = await self._runtime.cancel(await self._visible(request.execution_id))
        return pb.CancelResponse(state=messages.state_message(state))

    @guard.stream
    async def WatchPending(
        self, request: pb.WatchPendingRequest, context: Context
    ) -> AsyncIterator[pb.WatchPendingResponse]:
        if request.execution_id:
            _execution_id(request.execution_id)  # bounded before anything is read
        try:
            kinds = events.kinds_model(request.kinds)
        except convert.WireValueError as exc:
            violation = FieldViolation(f"kinds{exc.path}", exc.description)
            raise ModelValidationError("invalid kinds", field_violations=[violation]) from None
        try:
            async for event in self._watch.stream(
                request.execution_id, request.cursor, principal_filter(), kinds
            ):
                yield event
        except ServiceShuttingDown:
            await context.abort_with_status(rpc_status.to_status(shutting_down_status()))

    async def _visible(self, execution_id: str) -> str:
        """The checked ID; EXECUTION_NOT_FOUND for another principal's execution."""
        execution_id = _execution_id(execution_id)
        principal = principal_filter()
        if principal is not None:
            await self._runtime.require_visible_execution(execution_id, principal)
        return execution_id

    @guard.unary
    async def ListServers(
        self, request: pb.ListServersRequest, context: Context
    ) -> pb.ListServersResponse:
        return await list_servers(request, self._bindings)


def _small_result(result: ExecutionResult) -> bool:
    """Few operations with small outputs and no agent report: cheaper to convert
    on the loop than to hand to a thread (the walk stops at the budget)."""
    if result.agent is not None or len(result.operations) > _INLINE_OPERATIONS:
        return False
    budget = _INLINE_CONVERSION_BYTES
    for operation in result.operations:
        budget -= len(operation.failure_message or "")
        if operation.result is not None:
            budget -= encoded_size(operation.result, stop_above=budget)
        if budget < 0:
            return False
    return True


def _invalid_timeout(why: str) -> ModelValidationError:
    return ModelValidationError(
        "invalid Result request", field_violations=[FieldViolation("timeout", why)]
    )


def _execution_id(value: str) -> str:
    # The one rule for IDs (docs/reference/identifiers.md), before anything is read.
    return checked_id(value, "execution_id")


def _submission(
    request: pb.SubmitRequest, bindings: Mapping[str, ServerBinding]
) -> tuple[dict[str, Any], HumanInput, str]:
    """The spec document and human_input of a SubmitRequest, with the named
    binding swapped for the one this service configures, and the name."""
    document, human_input = spec_codec.submission(request)
    name = document["server"]
    binding = bindings.get(name)
    if binding is None:
        raise binding_not_found(name, bindings)
    document["server"] = binding.model_dump(mode="json")
    return document, human_input, name
