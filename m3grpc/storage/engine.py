"""Engines and transactions for every backend M3 stores data in.

SQLite: WAL with `synchronous=FULL` by default (an acknowledged write survives
power loss), foreign keys on, the busy timeout honoured, and `BEGIN IMMEDIATE`
for every read-then-write transaction: a deferred transaction that upgrades
its read lock can fail with `database is locked` past any busy timeout, an
immediate one waits its turn instead.

Within one process, SQLite write transactions take turns on their engine before
`BEGIN IMMEDIATE`: SQLite's busy handler waits by sleeping and polling, so under
many concurrent writers one could starve past the busy timeout while others
commit; the turn is handed over at once. Writes that queue for the turn at the
same moment share one transaction and one commit, each in a savepoint of its own
(group commit, `m3grpc/storage/group_commit.py`). Other processes still wait
through the busy timeout.

PostgreSQL: the same statements; read-then-write transactions lock their rows
with `SELECT ... FOR UPDATE`.

The engine knows nothing of what its transactions store: what a commit sets off
in this process (handing the appended events to the log's reader, waking
watchers, passing changes to other worker processes) is registered with it from
above as commit hooks (`add_commit_hook`), which get what the transaction noted
for them (`m3grpc/storage/commit_notes.py`). The schema is put in place above it
too (`m3grpc/storage/store_engine.py`).

Storage faults become typed errors here, the one place every transaction passes
through: lock contention past the busy timeout (or a PostgreSQL serialization
failure) is a ManagedInputConflict (ABORTED), and a database that is unreachable,
restarting, full, or that refuses the commit (a trigger, a constraint) is a
StorageUnavailableError (UNAVAILABLE with a retry delay). Either way the
transaction rolled back, so a retry with the same request ID or idempotency key
is safe. Errors in M3's own SQL (ProgrammingError, DataError) stay unexpected.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal
from weakref import WeakKeyDictionary

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, RootTransaction
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

from m3grpc.errors import StorageUnavailableError, TransactionConflict
from m3grpc.storage import commit_notes
from m3grpc.storage.commit_notes import CommitNotes
from m3grpc.storage.group_commit import BeginWouldWait, GroupCommit, GroupFailed

log = logging.getLogger(__name__)

# The retry delay a StorageUnavailableError suggests: a restart or a lock clears
# in about this time, and retrying sooner only adds load.
STORAGE_RETRY_SECONDS = 1.0

SQLiteSynchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# Serialises schema creation across processes on PostgreSQL.
_SCHEMA_LOCK_KEY = 0x4D33_0001
# The commit lock (PostgreSQL): the rows a write transaction inserts at its commit
# (`insert_at_commit`: the event log's) are inserted under this advisory lock, in
# the COMMIT's own round trip. So the sequence values they take are in commit
# order, and the lock is held only while the server inserts them and commits, by
# a transaction that waits for no row lock then: writers never deadlock on it and
# run side by side until their commits. Taken at a transaction's first event
# instead, before its other statements, it was held across them and their round
# trips: two replicas' writers deadlocked hundreds of times a run (bench/scale.py),
# each victim found after the 1 s deadlock_timeout; taken first thing, it made the
# writers wait for each other's round trips (two replicas answered no faster than one).
_COMMIT_LOCK_KEY = 0x4D33_0002
_AT_COMMIT = "m3.at_commit"


def database_url(database: str | os.PathLike[str]) -> str:
    """A SQLAlchemy URL for a URL string, or for a path to an SQLite file."""
    text = os.fspath(database)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


# Connections an SQLite engine keeps open; the runtime runs store calls on as many
# threads (m3grpc.runtime.offload), so busy ones are not opened and closed per call.
SQLITE_POOL_SIZE = 16
# Page cache per SQLite connection, KiB (SQLite's default: 2,000). Each of the pool's
# connections keeps its own cache, up to 32 MB for 16 at the default; under writes
# from the other connections a WAL reader's cache is emptied at each transaction
# that sees a new commit anyway, so a small one costs no speed (issue 11: RSS with
# 1,000 executions paused, bench/compare.py --scale 1000).
SQLITE_CACHE_KIB = 512
# Pooled connections to a PostgreSQL server, per engine: the store's threads
# (m3grpc.runtime.offload, as many as SQLITE_POOL_SIZE), its lease threads, and the
# service's own readers (event tail, health) each hold one at a time. SQLAlchemy's
# default (5, and 10 more opened and closed per checkout) made the server start a
# backend for most transactions under load: at N = 1,500 answered with two replicas,
# a third of the machine's CPU went to backends living a few milliseconds
# (bench/scale.py, "everything else"). Two replicas at most 64 of the server's
# 100 connections by default.
POSTGRES_POOL_SIZE = 24
POSTGRES_MAX_OVERFLOW = 8


def open_engine(
    database: str | os.PathLike[str],
    *,
    busy_timeout_ms: int = 5000,
    sqlite_synchronous: SQLiteSynchronous = "FULL",
) -> Engine:
    """An engine for `database`, configured like a store's, schema untouched."""
    url = sa.make_url(database_url(database))
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError("an SQLite store needs a file path; use EphemeralExecutionStore")
        engine = sa.create_engine(
            url,
            # One connection per operation, checked out of a small pool and
            # returned when the operation ends. Reusing connections matters:
            # closing the last connection to a WAL database checkpoints and
            # deletes the -wal file, which costs more than the commit itself.
            poolclass=QueuePool,
            pool_size=SQLITE_POOL_SIZE,
            max_overflow=16,
            connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False},
        )
        _configure_sqlite(engine, busy_timeout_ms, sqlite_synchronous)
        _WRITE_GROUPS[engine] = GroupCommit(_begin_write)
    else:
        engine = sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_size=POSTGRES_POOL_SIZE,
            max_overflow=POSTGRES_MAX_OVERFLOW,
        )
    return engine


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, synchronous: str) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver issues no BEGIN of its own: M3's transactions issue theirs
        # (`_transaction`), deferred or IMMEDIATE as they need.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            # Persistent in the file; a no-op once set, and it cannot run inside a transaction.
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        finally:
            cursor.close()


def lock_schema(conn: Connection) -> None:
    """Serialise schema changes across processes for the rest of the transaction.

    SQLite needs nothing: a write transaction (BEGIN IMMEDIATE) is already exclusive.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})


# SQLite engines: the in-process turn and group commit of write transactions.
_WRITE_GROUPS: WeakKeyDictionary[Engine, GroupCommit] = WeakKeyDictionary()

# Called after every committed write transaction with what it noted
# (m3grpc.storage.commit_notes): what a commit sets off is registered from above.
CommitHook = Callable[[CommitNotes], None]
_COMMIT_HOOKS: WeakKeyDictionary[Engine, list[CommitHook]] = WeakKeyDictionary()


def add_commit_hook(engine: Engine, hook: CommitHook) -> None:
    """Call `hook` after every committed write transaction on `engine`, with its notes.

    It runs on the committing thread (a loop group's: on the loop's thread), after
    the commit is visible to readers; it must be quick and must not raise.
    """
    _COMMIT_HOOKS.setdefault(engine, []).append(hook)


def remove_commit_hook(engine: Engine, hook: CommitHook) -> None:
    hooks = _COMMIT_HOOKS.get(engine, [])
    if hook in hooks:
        hooks.remove(hook)


def dispose_engine(engine: Engine) -> None:
    """Close `engine`'s connections, the one its writers keep between writes too."""
    groups = _WRITE_GROUPS.get(engine)
    if groups is not None:
        groups.close()
    engine.dispose()


def queued_writers(engine: Engine) -> int:
    """Write transactions of this process waiting for their turn on `engine` now
    (SQLite; always 0 on PostgreSQL, whose writers do not queue here)."""
    groups = _WRITE_GROUPS.get(engine)
    return 0 if groups is None else groups.waiting


def _committed(engine: Engine, conn: Connection) -> None:
    """After a commit on `conn` (its connection info still holds the notes)."""
    notes = commit_notes.take(conn)
    for hook in _COMMIT_HOOKS.get(engine, ()):
        hook(notes)


def _begin_write(
    engine: Engine, held: PoolProxiedConnection | None, wait: bool = True
) -> tuple[Connection, RootTransaction]:
    """A connection in a write transaction (BEGIN IMMEDIATE on SQLite): on `held`,
    a connection of the engine's pool kept checked out, else on a new checkout.

    With `wait=False` BEGIN does not wait for another process's write lock (the
    event loop's writers begin on the loop's thread): BeginWouldWait instead."""
    conn = engine.connect() if held is None else Connection(engine, connection=held)
    try:
        commit_notes.clear(conn)  # left by a transaction that rolled back
        if wait:
            _sqlite_begin(conn, write=True)
        else:
            _sqlite_begin_now(conn)
        return conn, conn.begin()
    except BaseException:
        conn.close()
        raise


def _sqlite_begin_now(conn: Connection) -> None:
    """`_sqlite_begin` for a write with no busy wait: BeginWouldWait if another
    connection (another process) holds the database's write lock."""
    driver = conn.connection.driver_connection
    (timeout_ms,) = driver.execute("PRAGMA busy_timeout").fetchone()  # type: ignore[union-attr]
    driver.execute("PRAGMA busy_timeout = 0")  # type: ignore[union-attr]
    try:
        _sqlite_begin(conn, write=True)
    except DBAPIError as exc:
        orig = exc.orig
        if isinstance(orig, sqlite3.Error) and orig.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            raise BeginWouldWait from exc
        raise
    finally:
        driver.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")  # type: ignore[union-attr]


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A read-then-write transaction (BEGIN IMMEDIATE on SQLite), committed on exit.

    Lock contention that outlasts the busy timeout (or makes the transaction a
    deadlock or serialization victim) surfaces as a typed, retryable
    TransactionConflict (a ManagedInputConflict) instead of a raw driver error.
    """
    groups = _WRITE_GROUPS.get(engine)
    try:
        if groups is not None:
            with groups.transaction(engine, functools.partial(_committed, engine)) as conn:
                yield conn
        else:
            with engine.connect() as conn:
                commit_notes.clear(conn)  # left by a transaction that rolled back
                conn.info.pop(_AT_COMMIT, None)
                with conn.begin():
                    yield conn
                    _commit_with_inserts(conn)
                _committed(engine, conn)
    except GroupFailed as failed:
        # Every write of the failed transaction gets its own typed error.
        cause = failed.__cause__
        if isinstance(cause, DBAPIError) and _is_lock_contention(cause):
            raise TransactionConflict("a concurrent transaction conflicted; retry") from failed
        raise _unavailable(cause if isinstance(cause, Exception) else failed) from failed
    except OperationalError as exc:
        if _is_lock_contention(exc):
            # PostgreSQL's deadlock and serialization victims are OperationalErrors too.
            raise TransactionConflict(
                "a concurrent transaction conflicted; retry"
                if _is_conflict_victim(exc)
                else "the database stayed busy past the busy timeout; retry"
            ) from exc
        raise _unavailable(exc) from exc
    except DBAPIError as exc:
        if _is_lock_contention(exc):
            raise TransactionConflict("a concurrent transaction conflicted; retry") from exc
        if not _is_own_mistake(exc):
            raise _unavailable(exc) from exc
        raise
    except PoolTimeoutError as exc:
        raise _unavailable(exc) from exc


def insert_at_commit(conn: Connection, table: str, row: dict[str, Any]) -> None:
    """Insert `row` (column -> a value the driver takes as it is) into `table` at the
    commit, under the commit lock (`_COMMIT_LOCK_KEY`). PostgreSQL only: on SQLite a
    write transaction is alone from its BEGIN."""
    conn.info.setdefault(_AT_COMMIT, []).append((table, row))


def _commit_with_inserts(conn: Connection) -> None:
    """Send the commit lock, the deferred inserts and COMMIT in one round trip (the
    simple query protocol runs several statements, without parameters: the values
    are quoted by the driver). SQLAlchemy's own commit then finds no transaction."""
    deferred: list[tuple[str, dict[str, Any]]] | None = conn.info.pop(_AT_COMMIT, None)
    if not deferred:
        return
    from psycopg import sql  # PostgreSQL's driver: imported only where it is used

    statements: list[sql.Composable] = [
        sql.SQL("SELECT pg_advisory_xact_lock({})").format(_COMMIT_LOCK_KEY)
    ]
    for table, row in deferred:
        statements.append(
            sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                sql.Identifier(table),
                sql.SQL(", ").join(map(sql.Identifier, row)),
                sql.SQL(", ").join(map(sql.Literal, row.values())),
            )
        )
    statements.append(sql.SQL("COMMIT"))
    driver = conn.connection.driver_connection
    conn.exec_driver_sql(sql.SQL("; ").join(statements).as_string(driver))


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction: one consistent snapshot, no write lock."""
    try:
        with (
            engine.connect() as conn,
            _transaction(conn, sqlite=engine in _WRITE_GROUPS, write=False),
        ):
            yield conn
    except DBAPIError as exc:
        if _is_own_mistake(exc):
            raise
        raise _unavailable(exc) from exc
    except PoolTimeoutError as exc:
        raise _unavailable(exc) from exc


@contextmanager
def _transaction(conn: Connection, *, sqlite: bool, write: bool) -> Iterator[None]:
    """`conn.begin()`, committed on exit; on SQLite after M3's own BEGIN."""
    if sqlite:
        _sqlite_begin(conn, write=write)
    with conn.begin():
        yield


def _sqlite_begin(conn: Connection, *, write: bool) -> None:
    """SQLite's BEGIN (IMMEDIATE for a write), straight to the driver: issued by an
    engine `begin` event through SQLAlchemy it cost more CPU than a small
    transaction's own statements, and any engine event makes SQLAlchemy dispatch
    events around every statement. SQLAlchemy's transaction then only commits or
    rolls back the driver's."""
    statement = "BEGIN IMMEDIATE" if write else "BEGIN"
    try:
        conn.connection.driver_connection.execute(statement)  # type: ignore[union-attr]
    except sqlite3.Error as exc:
        # Wrapped as SQLAlchemy wraps driver errors (busy: OperationalError).
        raise DBAPIError.instance(statement, (), exc, sqlite3.Error) from exc


def _is_own_mistake(exc: DBAPIError) -> bool:
    """An error in M3's statements or values, not a fault of the database: a bug."""
    return isinstance(exc, ProgrammingError | DataError | NotSupportedError) and not (
        exc.connection_invalidated
    )


# How loud a fault is logged here. Where a fault ends a command (opening the database
# at start, `m3grpc db`, check-config), that command reports it in its own one line.
_FAULT_LOG_LEVEL: ContextVar[int] = ContextVar(
    "m3_storage_fault_log_level", default=logging.WARNING
)


@contextmanager
def faults_reported_by_caller() -> Iterator[None]:
    """Within this block a database fault is logged at DEBUG only: the caller
    reports it itself (a refusal to start is one line, not a warning and a line)."""
    token = _FAULT_LOG_LEVEL.set(logging.DEBUG)
    try:
        yield
    finally:
        _FAULT_LOG_LEVEL.reset(token)


def _unavailable(exc: Exception) -> StorageUnavailableError:
    # Only the driver's first line is logged: later lines (PostgreSQL's DETAIL)
    # can quote stored values, and the caller gets no driver text at all.
    cause = getattr(exc, "orig", None) or exc
    first_line = (str(cause).strip().splitlines() or [""])[0][:300]
    log.log(
        _FAULT_LOG_LEVEL.get(),
        "database fault: %s: %s",
        type(cause).__name__,
        first_line,
        extra={"event": "storage.unavailable"},
    )
    return StorageUnavailableError(
        "the database is unavailable or refused the request; "
        "retry it (with the same request ID or idempotency key)",
        retry_after_seconds=STORAGE_RETRY_SECONDS,
    )


def _is_conflict_victim(exc: DBAPIError) -> bool:
    """PostgreSQL rolled the transaction back: a serialization failure or a deadlock."""
    return getattr(exc.orig, "sqlstate", None) in ("40001", "40P01")


def _is_lock_contention(exc: DBAPIError) -> bool:
    text = str(exc.orig).lower()
    # SQLite busy/locked; PostgreSQL serialization failure / deadlock.
    return "database is locked" in text or "database is busy" in text or _is_conflict_victim(exc)
