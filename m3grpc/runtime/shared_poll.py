"""One database read per polling interval for everything this process waits on.

Writes of this process wake their waiters at once (the notifier), and on
PostgreSQL so do other replicas' (LISTEN/NOTIFY). Writes the notifier cannot
hear (another process on the same SQLite file, or a replica while the listener
is down) are found by polling. Polling per waiter made that cost grow with the
number of waiters: 1,000 paused executions read their rounds 2,000 times a
second and queued every other store call behind those reads. Here one loop
reads, every interval, which of the awaited rounds left pending and which of
the awaited executions finished, and wakes their waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Iterator

from m3grpc.runtime.notifier import Notifier
from m3grpc.runtime.offload import offload
from m3grpc.storage import SqlExecutionStore

log = logging.getLogger(__name__)

# How often a waiter re-reads on its own anyway: a safety net, not the way it wakes.
SAFETY_REREAD_SECONDS = 30.0
_POLL_KEY = "m3:shared-poll"


class SharedPoll:
    def __init__(self, store: SqlExecutionStore, notifier: Notifier, interval: float) -> None:
        self._store = store
        self._notifier = notifier
        self._interval = interval
        self._rounds: Counter[str] = Counter()
        self._executions: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="m3-shared-poll")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @contextlib.contextmanager
    def round(self, round_id: str) -> Iterator[None]:
        """While inside: the round's waiter is woken when the round leaves pending."""
        with _counted(self._rounds, round_id):
            yield

    @contextlib.contextmanager
    def execution(self, execution_id: str) -> Iterator[None]:
        """While inside: the execution's waiters are woken when it has finished."""
        with _counted(self._executions, execution_id):
            yield

    async def poll_once(self) -> None:
        round_ids, execution_ids = list(self._rounds), list(self._executions)
        if not round_ids and not execution_ids:
            return
        left, finished = await offload(self._store.settled, round_ids, execution_ids)
        for key in (*left, *finished):
            self._notifier.notify(key)

    async def _loop(self) -> None:
        failing = False
        while not self._stopping:
            # wake_all (e.g. the listener went down or up) polls now, then at the new interval.
            wake = self._notifier.register(_POLL_KEY)
            try:
                # asyncio.wait, not wait_for: on 3.11 wait_for can swallow a cancel
                # that arrives together with the wake-up, and stop() would wait forever.
                await asyncio.wait({wake}, timeout=self._notifier.poll_interval(self._interval))
            finally:
                self._notifier.unregister(_POLL_KEY, wake)
            try:
                await self.poll_once()
            except Exception:  # the database may be briefly unavailable
                if not failing:
                    log.exception("polling for other processes' writes failed; retrying")
                failing = True
            else:
                failing = False


@contextlib.contextmanager
def _counted(counter: Counter[str], key: str) -> Iterator[None]:
    counter[key] += 1
    try:
        yield
    finally:
        counter[key] -= 1
        if counter[key] <= 0:
            del counter[key]
