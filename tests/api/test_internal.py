"""Unexpected exceptions: INTERNAL with a generic message, never UNKNOWN and
never the exception's text. Runs the servicers in-process on a runtime whose
every call fails."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from m3grpc.api.elicitation_service import ElicitationService
from m3grpc.api.execution_service import ExecutionService
from m3grpc.api.watch import PendingWatch
from m3grpc.wire.gen.m3.v1 import (
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

from .conftest import failure

SECRET = "secret-detail-that-must-not-leak"


class BrokenRuntime:
    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(SECRET)

        return fail


async def test_unexpected_errors_are_internal(caplog: pytest.LogCaptureFixture) -> None:
    runtime: Any = BrokenRuntime()
    watch = PendingWatch(runtime, poll_interval=0.1, shutdown=asyncio.Event())
    server = grpc.aio.server()
    execution_service_pb2_grpc.add_ExecutionServiceServicer_to_server(
        ExecutionService(runtime, {}, watch), server
    )
    elicitation_service_pb2_grpc.add_ElicitationServiceServicer_to_server(
        ElicitationService(runtime), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            executions = execution_service_pb2_grpc.ExecutionServiceStub(channel)
            elicitation = elicitation_service_pb2_grpc.ElicitationServiceStub(channel)
            calls = [
                executions.Snapshot(execution_service_pb2.SnapshotRequest(execution_id="e")),
                elicitation.GetRound(elicitation_service_pb2.GetRoundRequest(round_id="r")),
            ]
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call
                check(caught.value)
            stream = executions.WatchPending(execution_service_pb2.WatchPendingRequest())
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in stream:
                    pass
            check(caught.value)
    finally:
        await server.stop(None)
    assert SECRET in caplog.text  # logged server-side with the traceback


def check(error: grpc.aio.AioRpcError) -> None:
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() == "internal error"
    caught = failure(error)
    assert caught.info.reason == "INTERNAL"
    assert SECRET not in str(caught.status)
