"""The worker's own store writes ride out a short database outage and lock contention.

A caller whose request meets a database fault gets STORAGE_UNAVAILABLE and
retries; a worker in the middle of a round has nobody to hand the error to, and
failing the execution for a restart of PostgreSQL would lose work a human
already answered. So its store calls (round transitions, operation results,
the final result, the wait for a response) retry a StorageUnavailableError
for up to `OUTAGE_BUDGET_SECONDS`, then give up with the error as before.

They retry a TransactionConflict the same way: the transaction was rolled back
whole (a PostgreSQL deadlock or serialization victim, found under load when a
lease renewal and a delivery lock the same execution and round in turn), so
running it again is what a caller would do; failing the execution
`managed_input_conflict` for it lost answered work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from m3grpc.errors import StorageUnavailableError, TransactionConflict
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
        except (StorageUnavailableError, TransactionConflict) as exc:
            if time.monotonic() + delay > deadline:
                raise
            what = "is unavailable" if isinstance(exc, StorageUnavailableError) else "conflicted"
            log.warning(
                "%s: the database %s; retrying in %.1f s",
                getattr(call, "__name__", "store call"),
                what,
                delay,
                extra={"event": "storage.retry"},
            )
            pause = exc.retry_after_seconds if isinstance(exc, StorageUnavailableError) else delay
            await asyncio.sleep(min(delay, pause))
            delay = min(delay * 2, _MAX_DELAY_SECONDS)
