"""A store call on the event loop's thread, in a greenlet (SQLAlchemy's `greenlet_spawn`).

Inside it the store's code is the same synchronous code a store thread runs; where it
must wait (for the turn to write, for its group's commit: `group_commit`), it gives the
loop back until then instead of blocking it. Only SQLite's calls run so (the runtime
decides: `m3grpc.runtime.offload`): a SQLite statement outside a write's BEGIN and
COMMIT does not wait on the disk, where PostgreSQL's wait on the network.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.util.concurrency import greenlet_spawn

P = ParamSpec("P")
T = TypeVar("T")


async def call_on_loop(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`func(*args, **kwargs)` in a greenlet on the running loop, in a copy of the
    caller's context (as `asyncio.to_thread`).

    The call is a task of its own, shielded: as on a thread, a caller cancelled while
    the call waits for its commit leaves the call to finish (a Respond's answer still
    wakes its worker), where a greenlet in the caller's task would be cancelled with it."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    task: asyncio.Task[T] = asyncio.get_running_loop().create_task(greenlet_spawn(call))
    task.add_done_callback(_retrieved)  # a failure nobody awaits any more is dropped
    return await asyncio.shield(task)


def _retrieved(task: asyncio.Task[object]) -> None:
    if not task.cancelled():
        task.exception()
