"""Wake this process's waiters for changes other processes commit.

On PostgreSQL the store's change listener (LISTEN/NOTIFY, m3grpc/storage/changes.py)
hears every committed change of every replica; on SQLite the worker processes of
one `m3grpc serve` send each other theirs (m3grpc/runtime/local_wakes.py). Each
change wakes the waiters it concerns on this process's notifier, as a commit of
this process would: a response wakes the worker waiting on its round, a new
pending round wakes `wait_for_pending`, a finish wakes result waiters, every
event wakes WatchPending streams, queued work wakes the claim loop, a cancel
request cancels the execution if it runs here. While the listener is down (and
for processes not linked), waiters poll at their own interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from m3grpc.runtime.local_wakes import HUB
from m3grpc.runtime.notifier import EVENTS_KEY, Notifier, pending_key
from m3grpc.storage import EventKind, SqlExecutionStore
from m3grpc.storage.changes import CANCEL_REQUESTED, EXECUTION_QUEUED, Change, ChangeListener


def woken_keys(change: Change) -> list[str]:
    """The notifier keys a change wakes."""
    if change.kind == EXECUTION_QUEUED:
        return []
    if change.kind == CANCEL_REQUESTED:
        return [change.execution_id]
    keys = [EVENTS_KEY]
    if change.kind == EventKind.ROUND_PENDING:
        keys.append(pending_key(change.execution_id))
    elif change.kind == EventKind.EXECUTION_FINISHED:
        keys.append(change.execution_id)
    if change.round_id is not None:
        keys.append(change.round_id)  # its worker re-reads the round
    return keys


class ReplicaWakes:
    def __init__(
        self,
        store: SqlExecutionStore,
        notifier: Notifier,
        *,
        on_queued: Callable[[], None],
        on_cancel: Callable[[str], None],
    ) -> None:
        self._store = store
        self._notifier = notifier
        self._on_queued = on_queued
        self._on_cancel = on_cancel
        self._loop = asyncio.get_running_loop()
        self._listener: ChangeListener | None = None

    @property
    def store(self) -> SqlExecutionStore:
        return self._store

    def start(self) -> None:
        self._listener = self._store.change_listener(self._heard, self._live)
        if self._listener is not None:
            self._listener.start()
        else:
            # SQLite: the changes of the other processes of this `m3grpc serve`, if
            # it has worker processes (linked now or later, see local_wakes).
            HUB.attach(self)

    async def stop(self) -> None:
        HUB.detach(self)
        if self._listener is not None:
            await asyncio.to_thread(self._listener.stop)
            self._listener = None

    def heard(self, changes: Sequence[Change]) -> None:
        """Changes other processes committed (SQLite's linked worker processes)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            if not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self.heard, changes)
            return
        # A commit's changes may name the same keys: each is woken once.
        keys = dict.fromkeys(key for change in changes for key in woken_keys(change))
        for key in keys:
            self._notifier.notify(key)
        queued = False
        for change in changes:
            if change.kind == EXECUTION_QUEUED:
                queued = True
            elif change.kind == CANCEL_REQUESTED:
                self._on_cancel(change.execution_id)
        if queued:
            self._on_queued()

    # Both run on the listener's thread: hand over to the loop.

    def _heard(self, change: Change) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._dispatch, change)

    def _live(self, live: bool) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._notifier.set_hears_other_processes, live)

    def _dispatch(self, change: Change) -> None:
        for key in woken_keys(change):
            self._notifier.notify(key)
        if change.kind == EXECUTION_QUEUED:
            self._on_queued()
        elif change.kind == CANCEL_REQUESTED:
            self._on_cancel(change.execution_id)
