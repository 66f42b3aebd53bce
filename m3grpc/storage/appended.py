"""The events a write transaction appended, kept in its connection's info until
the commit, so this process's reader of the log is handed what it committed
instead of reading it back (SQLite only: there an event's `seq` is the row ID the
insert returns; elsewhere nothing is kept and readers read the log).

A group-commit member rolled back to its savepoint drops what it appended (its
sequence numbers are used again by the next member); a transaction that rolls
back entirely leaves its list behind, cleared when the connection's next write
transaction begins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from m3grpc.storage.events import StoredEvent

_KEY = "m3.appended_events"


def note(conn: Connection, event: StoredEvent) -> None:
    conn.info.setdefault(_KEY, []).append(event)


def mark(conn: Connection) -> int:
    """How many events the transaction has appended so far (see `drop_after`)."""
    return len(conn.info.get(_KEY, ()))


def drop_after(conn: Connection, count: int) -> None:
    """Forget the events appended after `mark` returned `count` (rolled back)."""
    kept = conn.info.get(_KEY)
    if kept:
        del kept[count:]


def take(conn: Connection) -> list[StoredEvent]:
    """The events the transaction appended, forgotten here (after its commit; or
    before a transaction begins, left by one that rolled back)."""
    taken: list[StoredEvent] | None = conn.info.pop(_KEY, None)
    return taken or []
