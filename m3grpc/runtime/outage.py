"""The worker's own store writes ride out a short database outage.

A caller whose request meets a database fault gets STORAGE_UNAVAILABLE and
retries; a worker in the middle of a round has nobody to hand the error to, and
failing the execution for a restart of PostgreSQL would lose work a human
already answered. So its store calls (round transitions, operation results,
the final result, the wait for a response) retry a StorageUnavailableError
for up to `OUTAGE_BUDGET_SECONDS`, then give up with the error as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from m3grpc.errors import StorageUnavailableError
from m3grpc.runtime.offload import offload

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# About one lease: longer, and recovery may have failed the round meanwhile anyway.
OUTAGE_BUDGET_SECONDS = 30.0
_MAX_DELAY_SECONDS = 2.0


async def stored(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args, **kwargs)` on the store's threads, retried through a database outage."""
    deadline = time.monotonic() + OUTAGE_BUDGET_SECONDS
    delay = 0.1
    while True:
        try:
            return await offload(call, *args, **kwargs)
        except StorageUnavailableError as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning(
                "%s: the database is unavailable; retrying in %.1f s",
                getattr(call, "__name__", "store call"),
                delay,
                extra={"event": "storage.retry"},
            )
            await asyncio.sleep(min(delay, exc.retry_after_seconds))
            delay = min(delay * 2, _MAX_DELAY_SECONDS)
