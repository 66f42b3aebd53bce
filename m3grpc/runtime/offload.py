"""Store calls off the event loop, on threads of their own.

`asyncio.to_thread` runs on the loop's default executor: min(32, CPUs + 4) threads,
six on a 2-core machine, shared with everything else the process offloads. With
many executions in flight their store calls (and a Respond's) queued behind each
other there, and each round waited for a free thread several times. These threads
are the runtime's alone, as many as the SQLite engine's pooled connections
(`m3grpc.storage.engine.SQLITE_POOL_SIZE`), so a store call waits only for the
database, and no pooled connection is opened and closed again per call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from m3grpc.storage.engine import SQLITE_POOL_SIZE

P = ParamSpec("P")
T = TypeVar("T")

_lock = threading.Lock()
_executors: dict[str, ThreadPoolExecutor] = {}

# Lease renewals never queue behind the round writes: with a thousand rounds resuming
# at once the store calls form a backlog of thousands of commits, and a renewal waiting
# its turn behind them can see its lease lapse first (`bench/compare.py --scale 1000` on
# a loaded machine, renewals sharing the loop's default executor with the round writes:
# 372 of 1,000 executions failed `stale lease: it expired`). On threads of their own a
# renewal waits only for the database's one writer.
_LEASE_THREADS = 2


def _threads(name: str, count: int) -> ThreadPoolExecutor:
    with _lock:
        executor = _executors.get(name)
        if executor is None:
            executor = _executors[name] = ThreadPoolExecutor(count, thread_name_prefix=name)
        return executor


async def _run(
    executor: ThreadPoolExecutor, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    return await loop.run_in_executor(executor, call)


async def offload(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread` on the store's threads: same context variables, same result."""
    return await _run(_threads("m3-store", SQLITE_POOL_SIZE), func, *args, **kwargs)


async def offload_lease(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`offload` for lease renewals, on threads no other store call queues on."""
    return await _run(_threads("m3-lease", _LEASE_THREADS), func, *args, **kwargs)
