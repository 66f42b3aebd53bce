"""The append-only event log that WatchPending streams and resumes from."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from m3grpc.storage import commit_notes
from m3grpc.storage.changes import Change, announce
from m3grpc.storage.commit_notes import NoteKind
from m3grpc.storage.engine import insert_at_commit
from m3grpc.storage.schema import events, executions, from_micros, to_micros
from m3grpc.storage.statements import INSERT_EVENT


class EventKind(enum.StrEnum):
    ROUND_PENDING = "round_pending"
    ROUND_LEFT_PENDING = "round_left_pending"
    ROUND_CHANGED = "round_changed"
    EXECUTION_FINISHED = "execution_finished"


def round_event_kind(previous_status: str) -> EventKind:
    """The event a round's status change appends, given the status it leaves."""
    return EventKind.ROUND_LEFT_PENDING if previous_status == "pending" else EventKind.ROUND_CHANGED


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    kind: EventKind
    execution_id: str
    round_id: str | None
    status: str | None
    created_at: datetime


@dataclass(frozen=True)
class OwnedEvent:
    """An event with the principal that submitted its execution (None: no principal),
    so a reader of the whole log can tell which callers may see it."""

    event: StoredEvent
    principal: str | None


# The events a transaction appended, one note each, for this process's reader of the
# log after its commit (m3grpc.storage.commit_listeners): the event itself where
# the insert returns its `seq` (SQLite), so the reader is handed what was committed
# instead of reading it back; None elsewhere (the reader reads the log).
APPENDED: NoteKind[StoredEvent | None] = NoteKind("appended events")


def append_event(
    conn: Connection,
    kind: EventKind,
    *,
    execution_id: str,
    created_at: datetime,
    round_id: str | None = None,
    status: str | None = None,
) -> None:
    """Append one event inside the caller's transaction; other replicas hear of
    it when the transaction commits (PostgreSQL NOTIFY, m3grpc.storage.changes),
    this process's events listeners are called after the commit (`APPENDED`).

    Sequence order is commit order, so a reader resuming after seq N never later
    sees a smaller seq commit: SQLite's writers are serial; on PostgreSQL the insert
    runs at the commit, under the commit lock (`insert_at_commit`)."""
    row = {
        "kind": kind.value,
        "execution_id": execution_id,
        "round_id": round_id,
        "status": status,
        "created_at": created_at,
    }
    seq = None
    if conn.dialect.name == "postgresql":
        insert_at_commit(conn, events.name, {**row, "created_at": to_micros(created_at)})
    else:
        seq = INSERT_EVENT.insert_rowid(conn, row)
    appended: StoredEvent | None = None
    if seq is not None:  # SQLite: handed to this process's reader after the commit
        stored_at = from_micros(to_micros(created_at))  # as a read would return it
        appended = StoredEvent(seq, kind, execution_id, round_id, status, stored_at)
    commit_notes.note(conn, APPENDED, appended)  # its commit wakes the log's readers
    announce(conn, Change(kind.value, execution_id, round_id))


def read_events(
    conn: Connection,
    *,
    after_seq: int,
    execution_id: str | None = None,
    principal: str | None = None,
    limit: int = 500,
) -> list[StoredEvent]:
    """Events after `after_seq`, of one execution and/or of one principal's executions."""
    query = sa.select(events).where(events.c.seq > after_seq).order_by(events.c.seq).limit(limit)
    if execution_id is not None:
        query = query.where(events.c.execution_id == execution_id)
    if principal is not None:
        query = query.where(
            events.c.execution_id.in_(
                sa.select(executions.c.execution_id).where(executions.c.principal == principal)
            )
        )
    return [_stored_event(row) for row in conn.execute(query)]


# Built once: WatchPending's one reader of the log runs it after every commit of the
# process that appended events, and building the statement cost more than running it.
_SELECT_OWNED_EVENTS = (
    sa.select(events, executions.c.principal)
    .select_from(events.outerjoin(executions, events.c.execution_id == executions.c.execution_id))
    .where(events.c.seq > sa.bindparam("after_seq"))
    .order_by(events.c.seq)
    .limit(sa.bindparam("limit"))
)


def read_owned_events(conn: Connection, *, after_seq: int, limit: int) -> list[OwnedEvent]:
    """Every execution's events after `after_seq`, each with its execution's principal."""
    rows = conn.execute(_SELECT_OWNED_EVENTS, {"after_seq": after_seq, "limit": limit})
    return [OwnedEvent(_stored_event(row), row.principal) for row in rows]


def _stored_event(row: Row[Any]) -> StoredEvent:
    return StoredEvent(
        seq=row.seq,
        kind=EventKind(row.kind),
        execution_id=row.execution_id,
        round_id=row.round_id,
        status=row.status,
        created_at=row.created_at,
    )


def last_seq(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(events.c.seq), 0))).scalar_one())
