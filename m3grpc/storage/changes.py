"""Cross-process change notifications on PostgreSQL (LISTEN/NOTIFY).

A write that other replicas may be waiting for announces itself with
`pg_notify` in its own transaction, so the notification is delivered exactly
when (and only if) the write commits. A `ChangeListener` holds one dedicated
connection that LISTENs on the channel and hands every change to a callback
on its own thread; when the connection drops it says so and reconnects, and
the caller falls back to polling meanwhile (notifications sent while nobody
listened are lost, so the caller re-reads what it waits for on every state
change). SQLite has no such mechanism: there `announce` only notes the change for this
process's change listeners after the commit (`CHANGES`, read by
m3grpc/storage/commit_listeners.py), which
the worker processes of one `m3grpc serve` pass to one another
(m3grpc/runtime/local_wakes.py); other processes poll.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from m3grpc.storage import commit_notes
from m3grpc.storage.commit_notes import NoteKind

log = logging.getLogger(__name__)

CHANNEL = "m3_changes"
# The listening connection's name in pg_stat_activity.
APPLICATION_NAME = "m3grpc-listen"
# Besides the event log's kinds (m3grpc.storage.events.EventKind):
EXECUTION_QUEUED = "execution_queued"
CANCEL_REQUESTED = "cancel_requested"

_NOTIFY = sa.text("SELECT pg_notify(:channel, :payload)")


@dataclass(frozen=True)
class Change:
    """What a committed write changed: an event kind (or EXECUTION_QUEUED,
    CANCEL_REQUESTED) and the execution and round it concerns."""

    kind: str
    execution_id: str
    round_id: str | None = None


# The changes a transaction announced, for this process's change listeners after
# its commit (where the database has no notification of its own: SQLite).
CHANGES: NoteKind[Change] = NoteKind("changes")


def announce(conn: Connection, change: Change) -> None:
    """Notify listeners of `change` when the caller's transaction commits (PostgreSQL;
    elsewhere this process's change listeners: m3grpc.storage.commit_listeners)."""
    if conn.dialect.name != "postgresql":
        commit_notes.note(conn, CHANGES, change)
        return
    payload = json.dumps([change.kind, change.execution_id, change.round_id])
    conn.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload})


def parse_change(payload: str) -> Change | None:
    try:
        kind, execution_id, round_id = json.loads(payload)
    except (ValueError, TypeError):
        return None
    if not isinstance(kind, str) or not isinstance(execution_id, str):
        return None
    return Change(kind, execution_id, round_id if isinstance(round_id, str) else None)


class ChangeListener:
    """LISTEN on a dedicated connection, on a daemon thread of its own.

    `on_change` gets every change other processes (and this one) commit;
    `on_live(True)` once LISTEN is in place (again), `on_live(False)` when the
    connection is lost. Both run on the listener's thread: keep them quick.
    """

    def __init__(
        self,
        engine: Engine,
        on_change: Callable[[Change], None],
        on_live: Callable[[bool], None],
        *,
        retry_seconds: float = 1.0,
        heartbeat_seconds: float = 5.0,
    ) -> None:
        self._engine = engine
        self._on_change = on_change
        self._on_live = on_live
        self._retry_seconds = retry_seconds
        self._heartbeat_seconds = heartbeat_seconds
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="m3-listen", daemon=True)
        self._connection: Any = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        self._thread.join(timeout)

    def _connect(self) -> Any:
        import psycopg  # the `postgres` extra; only PostgreSQL stores get here

        # The same connection arguments the engine's own connections use.
        args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
        kwargs.setdefault("application_name", APPLICATION_NAME)
        connection = psycopg.connect(*args, **kwargs, autocommit=True)
        connection.execute(f"LISTEN {CHANNEL}")
        return connection

    def _run(self) -> None:
        live = False
        while not self._stopped.is_set():
            try:
                connection = self._connect()
            except Exception as exc:
                log.warning("LISTEN %s: cannot connect (%s); polling meanwhile", CHANNEL, exc)
                self._stopped.wait(self._retry_seconds)
                continue
            try:
                live = True
                log.info("LISTEN %s: hearing other processes' changes", CHANNEL)
                self._on_live(True)
                self._listen(connection)
            except Exception as exc:
                if not self._stopped.is_set():
                    log.warning("LISTEN %s: connection lost (%s); reconnecting", CHANNEL, exc)
            finally:
                if live:
                    live = False
                    self._on_live(False)
                connection.close()
            self._stopped.wait(self._retry_seconds)

    def _listen(self, connection: Any) -> None:
        # Wait in short slices so stop() is honoured quickly; a quiet slice ends
        # with a round trip, so a connection that died silently is noticed.
        idle = 0.0
        while not self._stopped.is_set():
            received = False
            for notify in connection.notifies(timeout=0.5):
                received = True
                change = parse_change(notify.payload)
                if change is not None:
                    self._on_change(change)
            idle = 0.0 if received else idle + 0.5
            if idle >= self._heartbeat_seconds:
                connection.execute("SELECT 1")
                idle = 0.0
