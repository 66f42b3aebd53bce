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
_executor: ThreadPoolExecutor | None = None


def _store_threads() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(SQLITE_POOL_SIZE, thread_name_prefix="m3-store")
        return _executor


async def offload(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread` on the store's threads: same context variables, same result."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    return await loop.run_in_executor(_store_threads(), call)
