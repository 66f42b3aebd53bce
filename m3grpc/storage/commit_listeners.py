"""What a commit sets off in this process: the listeners a store's users register
(through `SqlExecutionStore.add_*_listener`), called after each committed write
transaction on the store's engine with what it noted.

One `CommitListeners` per store is the engine's commit hook (the engine knows
nothing of events or changes). In this order, so that what the later ones wake
finds the earlier ones' work done: the events the transaction appended (SQLite:
handed to the log's reader), every commit, commits that appended events (readers
of the log; not claims, lease renewals, heartbeats), the changes it announced
(SQLite's worker processes wake one another with them:
m3grpc/runtime/local_wakes.py). All on the committing thread: each must be quick
and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable

from m3grpc.storage.changes import CHANGES, Change
from m3grpc.storage.commit_notes import CommitNotes
from m3grpc.storage.events import APPENDED, StoredEvent

OnCommit = Callable[[], None]
OnAppended = Callable[[list[StoredEvent]], None]
OnChanges = Callable[[list[Change]], None]


class CommitListeners:
    """The listeners of one engine's commits, by what they are called for."""

    def __init__(self) -> None:
        self.appended: list[OnAppended] = []
        self.commits: list[OnCommit] = []
        self.events: list[OnCommit] = []
        self.changes: list[OnChanges] = []

    def __call__(self, notes: CommitNotes) -> None:
        """The engine's commit hook (`m3grpc.storage.engine.add_commit_hook`)."""
        appended = notes.get(APPENDED) if notes else []
        if appended and self.appended:
            handed = [event for event in appended if event is not None]
            if handed:
                for appended_listener in self.appended:
                    appended_listener(handed)
        for listener in self.commits:
            listener()
        if appended:
            for listener in self.events:
                listener()
        changes = notes.get(CHANGES) if notes else []
        if changes:
            for change_listener in self.changes:
                change_listener(changes)


def discard(listeners: list[Callable[..., None]], listener: Callable[..., None]) -> None:
    """Remove `listener` if it is registered."""
    if listener in listeners:
        listeners.remove(listener)
