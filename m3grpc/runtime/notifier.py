"""Wake-ups: a response commit wakes the worker waiting on its round at once.

Waiters live on one event loop; `notify` may be called from any thread. A
notification may carry what was committed (a round's answer, a new pending round):
in-process waiters then skip the read that would fetch it again. A
notification with no waiter is dropped, so waiters re-check the database after
registering, and poll it as a fallback for writes made by other processes:
every `poll_interval(base)` seconds, `base` unless other processes' changes
are heard too (PostgreSQL LISTEN/NOTIFY, m3grpc/runtime/replica_wakes.py),
then at least `listening_poll_interval`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator

# The key woken after every committed write that appended events (this
# process's, and other replicas' when their changes are heard): WatchPending's
# event log grew.
EVENTS_KEY = "m3:events"


def pending_key(execution_id: str) -> str:
    """The key woken when a pending round of the execution is stored."""
    return f"m3:pending:{execution_id}"


def created_round_key(round_id: str) -> str:
    """The key a round's record is remembered by once this process stored it."""
    return f"m3:round:{round_id}"


def finished_state_key(execution_id: str) -> str:
    """The key an execution's state is remembered by once this process finished it."""
    return f"m3:finished:{execution_id}"


# How many committed values a hand-over keeps: a reader of the event log wants one
# only until it reaches the value's event, a moment after the commit.
_REMEMBERED = 64


class Notifier:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, listening_poll_interval: float = 10.0
    ) -> None:
        self._loop = loop
        self._waiters: defaultdict[str, set[asyncio.Future[object]]] = defaultdict(set)
        self._listening_poll_interval = listening_poll_interval
        # Other processes' changes are heard (a live LISTEN connection).
        self.hears_other_processes = False
        # The latest values this process committed that never change afterwards
        # (a created round's record, a finished execution's state), by key.
        self._remembered: OrderedDict[str, object] = OrderedDict()
        # Hand-overs under way: the write may be committed, its value not at hand yet.
        self._handing_over: dict[str, asyncio.Future[object]] = {}
        # Per thread: the wake-ups collected inside `batched` (None: none open).
        self._batch = threading.local()

    def poll_interval(self, base: float) -> float:
        """How long a waiter may sleep before re-reading the database, given its
        own polling interval `base`: longer while other processes' changes are heard."""
        if self.hears_other_processes:
            return max(base, self._listening_poll_interval)
        return base

    def set_hears_other_processes(self, live: bool) -> None:
        """Record whether other processes' changes are heard; every waiter re-reads
        now (changes may have gone unheard, and its polling interval changes). Call
        on the loop's thread."""
        self.hears_other_processes = live
        self.wake_all()

    def register(self, key: str) -> asyncio.Future[object]:
        """A future resolved by the next notify(key), with its value. Call on the
        loop's thread."""
        future: asyncio.Future[object] = self._loop.create_future()
        self._waiters[key].add(future)
        return future

    def unregister(self, key: str, future: asyncio.Future[object]) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[key]

    def notify(self, key: str, value: object = None) -> None:
        """Wake every waiter of `key` with `value` (what was committed, if the
        notifier knows; None: waiters read the database); safe from any thread."""
        if self._on_loop():
            if key == EVENTS_KEY:
                # The event log's readers after what the caller's callback wakes
                # next (on SQLite a commit's listeners run on the loop: the answered
                # round's worker, resumed with the commit, goes first).
                self._loop.call_soon(self._wake, key, value)
            else:
                self._wake(key, value)
            return
        batch: list[tuple[str, object]] | None = getattr(self._batch, "wakes", None)
        if batch is not None:
            batch.append((key, value))
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, key, value)

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """The wake-ups this thread notifies while inside are issued at exit, as one
        loop callback (each is a loop iteration's callback and a self-pipe write of
        its own otherwise), event-log readers (EVENTS_KEY) last: a Respond's commit
        wakes the worker that delivers the answer before the WatchPending streams.
        On the loop's thread, and nested, it changes nothing."""
        if self._on_loop() or getattr(self._batch, "wakes", None) is not None:
            yield
            return
        wakes: list[tuple[str, object]] = []
        self._batch.wakes = wakes
        try:
            yield
        finally:
            # Issued even when the body raised: a group commit's committer may have
            # collected other writes' wake-ups before its own write failed.
            self._batch.wakes = None
            if wakes and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._wake_batch, wakes)

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _wake_batch(self, wakes: list[tuple[str, object]]) -> None:
        # Futures resume in the order they are resolved.
        events = False
        for key, value in wakes:
            if key == EVENTS_KEY:
                events = True  # one wake-up of the readers is enough
            else:
                self._wake(key, value)
        if events:
            self._wake(EVENTS_KEY)

    @contextlib.contextmanager
    def handing_over(self, key: str) -> Iterator[Callable[[object], None]]:
        """Around a write of this process whose committed value (never changed
        afterwards) readers of the event log would otherwise read back: enter
        before the write starts, call the yielded function with what the write
        returned. Until then a reader that reaches the write's event waits here
        (`handed_over`), however the commit's wake-ups were scheduled; a write
        that fails hands over nothing, and its readers read the store. Call on
        the loop's thread."""
        future: asyncio.Future[object] = self._loop.create_future()
        self._handing_over[key] = future

        def hand_over(value: object) -> None:
            self._remembered[key] = value
            self._remembered.move_to_end(key)
            if len(self._remembered) > _REMEMBERED:
                self._remembered.popitem(last=False)
            if not future.done():
                future.set_result(value)

        try:
            yield hand_over
        finally:
            if not future.done():
                future.set_result(None)  # failed: nothing committed is at hand
            if self._handing_over.get(key) is future:
                del self._handing_over[key]

    async def handed_over(self, key: str) -> object:
        """The value this process's write handed over under `key`, waiting for a
        hand-over under way (None: none, or forgotten: read the store)."""
        remembered = self._remembered.get(key)
        if remembered is not None:
            return remembered
        future = self._handing_over.get(key)
        if future is None:
            return None
        # shield: a reader going away does not cancel what the others await.
        return await asyncio.shield(future)

    def wake_all(self) -> None:
        """Wake every waiter of every key. Call on the loop's thread."""
        for key in list(self._waiters):
            self._wake(key)

    def _wake(self, key: str, value: object = None) -> None:
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(value)


# What a wake-up that timed out holds (see `wait_for`): not a committed value.
_TIMED_OUT = object()


def woken_with(future: asyncio.Future[object]) -> object:
    """The value a fired wake-up carried (None if it carried none or has not fired)."""
    if future.done() and not future.cancelled():
        value = future.result()
        return None if value is _TIMED_OUT else value
    return None


async def wait_for(future: asyncio.Future[object], timeout: float | None) -> bool:
    """Wait for a registered future (the caller's own: `register` gives each waiter
    one); True if it fired, False on timeout.

    The future is awaited directly, a timer ending the wait by resolving it: the
    waiter resumes in the loop iteration after the wake-up (asyncio.wait_for around
    a shield took three more, in which a Respond's reply went out before the worker
    it woke could start the delivery). A waiter cancelled here cancels its future,
    which nothing else awaits."""
    if future.done():
        return not future.cancelled() and future.result() is not _TIMED_OUT
    timer = None
    if timeout is not None:
        timer = asyncio.get_running_loop().call_later(timeout, _time_out, future)
    try:
        value = await future
    finally:
        if timer is not None:
            timer.cancel()
    return value is not _TIMED_OUT


def _time_out(future: asyncio.Future[object]) -> None:
    if not future.done():
        future.set_result(_TIMED_OUT)
