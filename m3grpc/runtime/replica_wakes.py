"""Wake this process's waiters for changes other replicas commit (PostgreSQL).

The store's change listener (LISTEN/NOTIFY, m3grpc/storage/changes.py) hears
every committed change; each one wakes the waiters it concerns on this
process's notifier, as a commit of this process would: a response wakes the
worker waiting on its round, a new pending round wakes `wait_for_pending`, a
finish wakes result waiters, every event wakes WatchPending streams, queued
work wakes the claim loop, a cancel request cancels the execution if it runs
here. While the listener is down, waiters poll at their own interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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

    def start(self) -> None:
        self._listener = self._store.change_listener(self._heard, self._live)
        if self._listener is not None:
            self._listener.start()

    async def stop(self) -> None:
        if self._listener is not None:
            await asyncio.to_thread(self._listener.stop)
            self._listener = None

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
