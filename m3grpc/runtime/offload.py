"""Where a runtime's store calls run: on threads of their own, or (SQLite) on the loop.

`asyncio.to_thread` runs on the loop's default executor: min(32, CPUs + 4) threads,
six on a 2-core machine, shared with everything else the process offloads. With
many executions in flight their store calls (and a Respond's) queued behind each
other there, and each round waited for a free thread several times. These threads
are the runtime's alone, as many as the SQLite engine's pooled connections
(`m3grpc.storage.engine.SQLITE_POOL_SIZE`), so a store call waits only for the
database, and no pooled connection is opened and closed again per call.

On SQLite a runtime runs its store calls on the event loop's thread instead, each in
a greenlet (`m3grpc.storage.loop_calls`), and only the commit (its fsync) leaves the
loop: see `m3grpc.storage.group_commit`. A store call on a thread waited for the GIL
after every statement while the loop held it, and its write transaction, which all
writes take in turn, lasted that long: at 16 rounds in flight each of a round's four
writes took 6-9 ms, where its own work is a few hundred microseconds. A SQLite
statement outside a write's BEGIN and COMMIT does not wait on the disk, and BEGIN
waits (on a thread) only while another process writes. PostgreSQL's statements wait on
the network, so a runtime on PostgreSQL keeps its calls on the threads. A loop runs
store calls on itself while every runtime started on it is a SQLite one
(`store_calls_on_loop`); other callers of `offload` get threads, as before.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from m3grpc.storage.engine import SQLITE_POOL_SIZE
from m3grpc.storage.loop_calls import call_on_loop

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
    pool: str, threads: int, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`func` on the loop (see `store_calls_on_loop`), else on the threads of `pool`."""
    loop = asyncio.get_running_loop()
    if _on_loop(loop):
        return await call_on_loop(func, *args, **kwargs)
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    return await loop.run_in_executor(_threads(pool, threads), call)


# Per loop: how many runtimes started on it run their store calls there (SQLite), and
# how many do not (PostgreSQL). Calls go on the loop only with none of the latter. (A
# plain dict, emptied as runtimes stop: looked up on every call.)
_LOOP_RUNTIMES: dict[asyncio.AbstractEventLoop, list[int]] = {}


@contextmanager
def store_calls_on_loop(on_loop: bool) -> Iterator[None]:
    """While open (a runtime's life), the running loop's store calls run on it if
    `on_loop` and every other runtime's on this loop says so too."""
    loop = asyncio.get_running_loop()
    counts = _LOOP_RUNTIMES.setdefault(loop, [0, 0])
    index = 0 if on_loop else 1
    counts[index] += 1
    try:
        yield
    finally:
        counts[index] -= 1
        if counts == [0, 0]:
            _LOOP_RUNTIMES.pop(loop, None)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    counts = _LOOP_RUNTIMES.get(loop)
    return counts is not None and counts[0] > 0 and counts[1] == 0


async def offload(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread` on the store's threads (or, on SQLite, on the loop: see
    above): same context variables, same result."""
    return await _run("m3-store", SQLITE_POOL_SIZE, func, *args, **kwargs)


async def offload_lease(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`offload` for lease renewals, on threads no other store call queues on (on the
    loop there is no queue of threads: a renewal joins the next group like any write)."""
    return await _run("m3-lease", _LEASE_THREADS, func, *args, **kwargs)
