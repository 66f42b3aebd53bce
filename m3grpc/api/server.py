"""The gRPC server: servicers, health checking and reflection on one grpc.aio
server, the Runtime that does the work, and graceful shutdown on a signal.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from m3grpc.api.config import ServiceConfig
from m3grpc.api.elicitation_service import ElicitationService
from m3grpc.api.execution_service import ExecutionService
from m3grpc.api.gen.m3.v1 import (
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_service_pb2,
    execution_service_pb2_grpc,
)
from m3grpc.api.watch import PendingWatch
from m3grpc.runtime import Runtime
from m3grpc.storage import SqlExecutionStore

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"].full_name,
    elicitation_service_pb2.DESCRIPTOR.services_by_name["ElicitationService"].full_name,
)


class ListenError(RuntimeError):
    """The server could not bind its listen address."""


def server_options(config: ServiceConfig) -> list[tuple[str, int]]:
    keepalive_ms = int(config.keepalive_seconds * 1000)
    return [
        # Ping idle connections so proxies and NATs keep long WatchPending streams.
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Accept client keepalive pings as often as every 10 s.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


@dataclass
class RunningService:
    """A started service: its bound address and what `stop` shuts down."""

    address: str
    server: grpc.aio.Server
    runtime: Runtime
    store: SqlExecutionStore
    health: Any
    shutdown: asyncio.Event = field(default_factory=asyncio.Event)

    async def stop(self, grace: float) -> None:
        """Stop accepting calls; in-flight calls and executions get `grace` seconds."""
        self.shutdown.set()  # open WatchPending streams end (UNAVAILABLE) and can resume
        await self.health.enter_graceful_shutdown()
        try:
            await asyncio.gather(self.server.stop(grace), self.runtime.stop(grace))
        finally:
            self.store.close()


async def start_service(config: ServiceConfig, *, listen: str | None = None) -> RunningService:
    limits = config.runtime_limits()
    store = SqlExecutionStore(config.database)
    runtime = Runtime(
        store,
        settings=config.workers.settings(),
        queue_capacity=config.workers.queue_capacity,
        limits=limits,
    )
    await runtime.start()
    shutdown = asyncio.Event()
    server = grpc.aio.server(options=server_options(config))
    watch = PendingWatch(
        runtime, poll_interval=config.watch_poll_interval_seconds, shutdown=shutdown
    )
    # The generated registration functions carry no annotations.
    execution_service_pb2_grpc.add_ExecutionServiceServicer_to_server(  # type: ignore[no-untyped-call]
        ExecutionService(runtime, config.servers, watch), server
    )
    elicitation_service_pb2_grpc.add_ElicitationServiceServicer_to_server(  # type: ignore[no-untyped-call]
        ElicitationService(runtime), server
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = listen or config.listen
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpc raises RuntimeError when it cannot bind
        port = 0
        log.debug("bind failed", exc_info=exc)
    if port == 0:
        await runtime.stop(0)
        store.close()
        raise ListenError(f"cannot listen on {address}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    host = address.rpartition(":")[0]
    return RunningService(f"{host}:{port}", server, runtime, store, health_servicer, shutdown)


async def serve(
    config: ServiceConfig, *, listen: str | None = None, out: TextIO = sys.stdout
) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    service = await start_service(config, listen=listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # Tests and scripts wait for this exact line.
    print(f"m3grpc serving on {service.address}", file=out, flush=True)
    try:
        await stop.wait()
        log.info("shutting down (grace %.1f s)", config.shutdown_grace_seconds)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await service.stop(config.shutdown_grace_seconds)
