"""A store call on the event loop's thread, in a greenlet of its own.

Inside it the store's code is the same synchronous code a store thread runs; where it
must wait (for the turn to write, for its group's commit: `group_commit`), `suspend`
gives the loop back until an awaitable is done, instead of blocking it. Only SQLite's
calls run so (the runtime decides: `m3grpc.runtime.offload`): a SQLite statement
outside a write's BEGIN and COMMIT does not wait on the disk, where PostgreSQL's wait
on the network.

A call that never waits (a read, a validation) runs to its end at once, in the
caller's task. One that waits is driven on by a task of its own, which the caller
awaits shielded: as on a thread, a caller cancelled while the call waits for its
commit leaves the call to finish (a Respond's answer still wakes its worker). Unlike a
thread's, such a call goes on only while its loop runs: whoever stops using the loop
waits for them first (`calls_finished`). A write left in its group holds the store's
write turn from every other writer until its loop is closed; only then is it taken
back, the write not stored (`group_commit`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast

import greenlet

P = ParamSpec("P")
T = TypeVar("T")

# The tasks driving calls that wait, on every loop (each removed when done).
_DRIVING: set[asyncio.Task[Any]] = set()


class _StoreCall(greenlet.greenlet):  # type: ignore[misc]
    """The greenlet of one store call; its parent is the loop's thread's greenlet."""


def in_loop_call() -> bool:
    """True inside a store call running on the loop (`call_on_loop`)."""
    return isinstance(greenlet.getcurrent(), _StoreCall)


def suspend(awaitable: Awaitable[T]) -> T:
    """Wait for `awaitable` inside a store call on the loop, the loop going on meanwhile:
    its result, or its exception raised here."""
    current = greenlet.getcurrent()
    if not isinstance(current, _StoreCall):
        raise RuntimeError("suspend() outside a store call on the event loop")
    return cast(T, current.parent.switch(awaitable))


async def call_on_loop(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`func(*args, **kwargs)` in a greenlet on the running loop, in a copy of the
    caller's context (as `asyncio.to_thread`)."""
    context = contextvars.copy_context()
    call = _StoreCall(functools.partial(context.run, func, *args, **kwargs), greenlet.getcurrent())
    step = call.switch()
    if call.dead:
        return cast(T, step)
    task = asyncio.get_running_loop().create_task(_drive(call, step))
    _DRIVING.add(task)
    task.add_done_callback(_ended)
    return cast(T, await asyncio.shield(task))


async def calls_finished() -> None:
    """Wait until no store call waits on the running loop: each one that was waiting
    (its caller cancelled or not) has run to its end."""
    loop = asyncio.get_running_loop()
    while pending := [task for task in _DRIVING if task.get_loop() is loop]:
        await asyncio.wait(pending)


async def _drive(call: Any, awaitable: Any) -> Any:
    """Await what the call waits for, resume it with the outcome, until it ends."""
    while not call.dead:
        try:
            value = await awaitable
        except BaseException:
            awaitable = call.throw(*sys.exc_info())
        else:
            awaitable = call.switch(value)
    return awaitable


def _ended(task: asyncio.Task[Any]) -> None:
    _DRIVING.discard(task)
    if not task.cancelled():
        task.exception()  # a failure nobody awaits any more is dropped
