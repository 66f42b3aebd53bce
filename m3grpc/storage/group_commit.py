"""Group commit for SQLite: the writes of one process that queue at the same
moment share one transaction and one commit (one fsync).

With `synchronous=FULL` every commit waits for the disk. Writers of one process
used to take turns on a lock, each with a transaction and an fsync of its own, so
128 executions resuming at once queued for as many fsyncs. Now a writer that
finds the turn taken queues; the writer holding the turn runs its work inside the
shared transaction (`BEGIN IMMEDIATE`, then its own `SAVEPOINT`) and, if others
are queued, hands the turn to the next one instead of committing. The last one
of the queue commits once for all of them. A writer that finds nobody ahead of it
begins, writes and commits at once: nothing waits for a group to fill, the group
is whatever queued while the previous transaction ran.

What each caller still sees as its own:
- its work runs on its own thread (its context variables, its exceptions);
- its failure (a typed state error, a refused statement) rolls back to its
  savepoint, so only its own work is undone, and raises only to it;
- it returns only once the commit holding its write is durable. If that commit
  fails (or SQLite rolled the whole transaction back under a later member), every
  member gets GroupFailed, with the driver's error as its cause: nothing of
  theirs was stored, so a retry is safe. A member whose own work failed waits for
  the commit too, and gets GroupFailed instead of its error when it fails: its
  error may rest on what earlier members wrote, which was then never stored.

PostgreSQL needs none of this: its server groups concurrent commits itself.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection, Engine, RootTransaction
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import PoolProxiedConnection

from m3grpc.storage import appended

# At most this many writes share a transaction: the first of them waits for all
# the others' work before its commit, and other processes wait for the whole group
# through their busy timeout.
MAX_GROUP = 32


class GroupFailed(Exception):
    """The shared transaction holding this write did not commit: nothing of it
    was stored. `__cause__` is the error that ended the transaction."""


@dataclass(eq=False)
class _Group:
    """One open transaction and the writes that joined it."""

    conn: Connection
    transaction: RootTransaction
    members: int = 0
    # One held lock per member waiting for the commit; the committer releases them.
    # (Not an Event: a lone write, the common case at low load, creates nothing.)
    waiting: list[threading.Lock] = field(default_factory=list)
    failure: BaseException | None = None


Begin = Callable[[Engine, PoolProxiedConnection | None], tuple[Connection, RootTransaction]]


class GroupCommit:
    """The turn and the open transaction of one SQLite engine's writers."""

    def __init__(self, begin: Begin) -> None:
        # `begin` begins a write transaction (BEGIN IMMEDIATE) on the connection
        # it is given, or on one of the engine's pool when given None.
        self._begin = begin
        self._mutex = threading.Lock()
        self._held = False  # a writer holds the turn (running its work, or committing)
        self._queue: deque[threading.Lock] = deque()  # writers waiting, in arrival order
        self._group: _Group | None = None  # touched only by the writer holding the turn
        # The connection of the last committed group, kept for the next one (only
        # one group is open at a time): a pool checkout and return cost more than
        # a small transaction's statements. Touched only by the writer holding the turn.
        self._writer: PoolProxiedConnection | None = None
        self._closed = False  # close() was called: the turn's last holder closes `_writer`
        self._inside = threading.local()

    def close(self) -> None:
        """Return the kept connection to the pool (before the engine is disposed):
        now if no writer holds the turn, else when the last writer queued passes it.
        (Not by queueing for the turn: a writer handing the turn on would wait
        for this caller to commit its group.)"""
        with self._mutex:
            self._closed = True
            writer = None if self._held else self._writer
            if writer is not None:
                self._writer = None
        if writer is not None:
            _quietly(writer.close)

    @property
    def waiting(self) -> int:
        """Writers queued for the turn now."""
        with self._mutex:
            return len(self._queue)

    @contextmanager
    def transaction(
        self, engine: Engine, after_commit: Callable[[Connection], None]
    ) -> Iterator[Connection]:
        """A write inside the shared transaction, durable when this returns.

        `after_commit` runs once per commit, with the committed transaction's
        connection, on the committing thread, before any member returns. Errors
        of this write's own work and of BEGIN propagate unchanged; GroupFailed
        when the commit failed (see the module docstring)."""
        if getattr(self._inside, "active", False):
            # The turn is this thread's own: waiting for it would never end.
            raise RuntimeError("a write transaction inside another on the same thread")
        self._take_turn()
        try:
            group = self._group
            if group is None:
                writer, self._writer = self._writer, None
                conn, transaction = self._begin(engine, writer)
                group = self._group = _Group(conn, transaction)
        except BaseException:
            self._pass_turn()
            raise
        group.members += 1
        first = group.members == 1
        own_error: BaseException | None = None
        self._inside.active = True
        try:
            if first:
                # Nothing else is in the transaction yet: a failure rolls it all back.
                try:
                    yield group.conn
                except BaseException as exc:
                    own_error = exc
            else:
                # Straight to the driver: SQLAlchemy's savepoints cost more than the write.
                driver = _driver(group.conn)
                driver.execute("SAVEPOINT m3_write")
                events_before = appended.mark(group.conn)
                try:
                    yield group.conn
                except BaseException as exc:
                    own_error = exc
                    # Its events are undone too: the next member reuses their seqs.
                    appended.drop_after(group.conn, events_before)
                    driver.execute("ROLLBACK TO m3_write")
                driver.execute("RELEASE m3_write")
        except BaseException as exc:
            if own_error is None:
                own_error = exc  # SAVEPOINT, ROLLBACK TO or RELEASE failed
        finally:
            self._inside.active = False
        if own_error is not None and (first or not _in_transaction(group.conn)):
            # The first write's failure ends the transaction (nothing else is in it);
            # so does one after which SQLite rolled the whole transaction back (a full
            # disk, an I/O error, a trigger's RAISE(ROLLBACK)): the earlier members'
            # work is gone too.
            group.failure = own_error

        ticket = self._hand_on(group) if group.failure is None else None
        if ticket is not None:
            ticket.acquire()  # released once the group's commit ended
        else:
            self._finish(group, after_commit)
        if group.failure is not None and group.failure is not own_error:
            raise GroupFailed("the transaction it shared did not commit") from group.failure
        if own_error is not None:
            raise own_error

    def _take_turn(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            ticket = threading.Lock()
            ticket.acquire()
            self._queue.append(ticket)
        ticket.acquire()  # released by the writer that hands the turn over

    def _hand_on(self, group: _Group) -> threading.Lock | None:
        """Give the turn to the next writer in line, to join `group`, if there is
        one and the group is not full, and return the ticket to wait on for the
        group's commit; None: the caller commits."""
        with self._mutex:
            if not self._queue or group.members >= MAX_GROUP:
                return None
            ticket = threading.Lock()
            ticket.acquire()
            group.waiting.append(ticket)
            self._queue.popleft().release()
            return ticket

    def _pass_turn(self) -> None:
        writer = None
        with self._mutex:
            if self._queue:
                self._queue.popleft().release()
            else:
                self._held = False
                if self._closed:
                    writer, self._writer = self._writer, None
        if writer is not None:
            _quietly(writer.close)

    def _finish(self, group: _Group, after_commit: Callable[[Connection], None]) -> None:
        """Commit (or, once failed, roll back) `group` and release its members."""
        self._group = None
        try:
            if group.failure is None:
                try:
                    group.transaction.commit()
                except BaseException as exc:
                    group.failure = exc
                    _quietly(group.transaction.rollback)
                else:
                    after_commit(group.conn)
            else:
                _quietly(group.transaction.rollback)
        finally:
            self._keep_or_close(group)
            for ticket in group.waiting:
                ticket.release()
            self._pass_turn()

    def _keep_or_close(self, group: _Group) -> None:
        """Keep a committed group's connection for the next group; after a failure
        it goes back to the pool (or, invalidated, is discarded)."""
        if group.failure is None:
            with suppress(Exception):
                self._writer = group.conn.connection
                return
        _quietly(group.conn.close)


def _driver(conn: Connection) -> DBAPIConnection:
    driver = conn.connection.dbapi_connection
    if driver is None:
        raise RuntimeError("the write transaction's connection was closed")
    return driver


def _in_transaction(conn: Connection) -> bool:
    try:
        return bool(getattr(_driver(conn), "in_transaction", False))
    except Exception:
        return False  # the connection is invalidated or closed


def _quietly(action: Callable[[], object]) -> None:
    with suppress(Exception):  # the connection is gone; the pool discards it
        action()
