"""In-process wake-ups: a response commit wakes the worker waiting on its round at once.

Waiters live on one event loop; `notify` may be called from any thread. A
notification with no waiter is dropped, so waiters re-check the database after
registering (and poll it as a fallback for writes made by other processes).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


def pending_key(execution_id: str) -> str:
    """The key woken when this process stores a pending round of the execution."""
    return f"m3:pending:{execution_id}"


class Notifier:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: defaultdict[str, set[asyncio.Future[None]]] = defaultdict(set)

    def register(self, key: str) -> asyncio.Future[None]:
        """A future resolved by the next notify(key). Call on the loop's thread."""
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiters[key].add(future)
        return future

    def unregister(self, key: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[key]

    def notify(self, key: str) -> None:
        """Wake every waiter of `key`; safe from any thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake(key)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, key)

    def _wake(self, key: str) -> None:
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)


async def wait_for(future: asyncio.Future[None], timeout: float | None) -> bool:
    """Wait for a registered future; True if it fired, False on timeout."""
    try:
        await asyncio.wait_for(asyncio.shield(future), timeout)
    except TimeoutError:
        return False
    return True
