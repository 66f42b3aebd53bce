"""What a write transaction leaves for after its commit, kept in its connection's
info until then: the events it appended, the changes it announced. The engine hands
a committed transaction's notes to the hooks registered with it
(`m3grpc.storage.engine.add_commit_hook`) without knowing what they are; the
modules that write them (`events.py`, `changes.py`) define their kinds, and the
ones that read them (`commit_listeners.py`) sit above both.

A group-commit member rolled back to its savepoint drops what it noted (`mark`,
`drop_after`: an event's sequence number is used again by the next member); a
transaction that rolls back entirely leaves its notes behind, cleared when the
connection's next write transaction begins (`clear`).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Connection

T = TypeVar("T")

_KEY = "m3.commit_notes"


class NoteKind(Generic[T]):
    """One kind of note, with the type of what it carries (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"NoteKind({self.name!r})"


class CommitNotes:
    """What one committed transaction noted, by kind, each in the order noted."""

    __slots__ = ("_notes",)

    def __init__(self, notes: dict[NoteKind[Any], list[Any]] | None = None) -> None:
        self._notes = notes or {}

    def get(self, kind: NoteKind[T]) -> list[T]:
        found: list[T] = self._notes.get(kind, [])
        return found

    def __bool__(self) -> bool:
        return bool(self._notes)


def note(conn: Connection, kind: NoteKind[T], item: T) -> None:
    """Note `item` in the caller's write transaction, for after its commit."""
    notes: dict[NoteKind[Any], list[Any]] = conn.info.setdefault(_KEY, {})
    notes.setdefault(kind, []).append(item)


Mark = tuple[tuple[NoteKind[Any], int], ...]


def mark(conn: Connection) -> Mark:
    """How much the transaction has noted so far (see `drop_after`)."""
    notes: dict[NoteKind[Any], list[Any]] | None = conn.info.get(_KEY)
    return tuple((kind, len(items)) for kind, items in notes.items()) if notes else ()


def drop_after(conn: Connection, marked: Mark) -> None:
    """Forget what was noted after `mark` returned `marked` (rolled back)."""
    notes: dict[NoteKind[Any], list[Any]] | None = conn.info.get(_KEY)
    if not notes:
        return
    kept = dict(marked)
    for kind in list(notes):
        count = kept.get(kind, 0)
        if count:
            del notes[kind][count:]
        else:
            del notes[kind]


def take(conn: Connection) -> CommitNotes:
    """The transaction's notes, forgotten here (after its commit)."""
    return CommitNotes(conn.info.pop(_KEY, None))


def clear(conn: Connection) -> None:
    """Forget notes left by a transaction that rolled back (before one begins)."""
    conn.info.pop(_KEY, None)
