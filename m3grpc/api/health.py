"""The gRPC health service's status, kept true: SERVING only while the
database answers and the worker pool runs.

A check every `interval` seconds runs one trivial query (off the event loop,
bounded in time) and looks at the workers; any failure sets every served name
to NOT_SERVING, and the next good check sets SERVING again. Changes are logged
once each (WARNING / INFO), not at every check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from grpc_health.v1 import health_pb2

from m3grpc.runtime import Runtime

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class HealthMonitor:
    def __init__(
        self, runtime: Runtime, servicer: Any, names: Sequence[str], *, interval: float
    ) -> None:
        self._runtime = runtime
        self._servicer = servicer
        self._names = ("", *names)
        self._interval = interval
        self._serving: bool | None = None
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> str | None:
        """None when healthy, else why not (one line)."""
        if not self._runtime.workers_alive:
            return "the worker pool is not running"
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self._runtime.check_database), timeout=max(self._interval, 5.0)
            )
        except TimeoutError:
            return "the database did not answer in time"
        except Exception as exc:
            return f"the database is unreachable: {' '.join(str(exc).split())[:300]}"
        return None

    async def update(self) -> None:
        problem = await self.check()
        serving = problem is None
        if serving == self._serving:
            return
        for name in self._names:
            await self._servicer.set(name, SERVING if serving else NOT_SERVING)
        if serving:
            if self._serving is not None:
                log.info("healthy again: SERVING", extra={"event": "health.serving"})
        else:
            log.warning(
                "unhealthy, NOT_SERVING: %s",
                problem,
                extra={"event": "health.not_serving", "reason": problem},
            )
        self._serving = serving

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.update()
            except Exception:  # the monitor itself must keep running
                log.exception("health check failed")

    async def start(self) -> None:
        await self.update()
        self._task = asyncio.create_task(self._loop(), name="m3-health")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
