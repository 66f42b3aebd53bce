"""A store's engine with its schema in place: what a store opens its database with.

Above the engine (`engine.py`: connections, transactions) and the migrations
(`migrate.py`, which runs inside the engine's transactions): a database from
before migrations is adopted through Alembic, imported only then.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from sqlalchemy.engine import Engine

from m3grpc.storage.engine import (
    SQLiteSynchronous,
    dispose_engine,
    lock_schema,
    open_engine,
    read_transaction,
    write_transaction,
)
from m3grpc.storage.schema import metadata
from m3grpc.storage.schema_version import (
    REVISIONS,
    SchemaState,
    SchemaVersionError,
    read_schema_status,
    stamp,
)


def create_store_engine(
    database: str | os.PathLike[str],
    *,
    busy_timeout_ms: int = 5000,
    sqlite_synchronous: SQLiteSynchronous = "FULL",
) -> Engine:
    """Create an engine for `database` (a URL or an SQLite path) and its schema.

    Raises SchemaVersionError when the database holds a schema this version does
    not run on (see m3grpc/storage/schema_version.py).
    """
    engine = open_engine(
        database, busy_timeout_ms=busy_timeout_ms, sqlite_synchronous=sqlite_synchronous
    )
    try:
        ensure_schema(engine)
    except BaseException:
        dispose_engine(engine)
        raise
    return engine


def ensure_schema(engine: Engine, revisions: Sequence[str] = REVISIONS) -> None:
    """Create the schema in an empty database, or check that it is current.

    An empty database gets the head schema and its revision stamp in one
    transaction; M3 tables from before migrations are adopted when they match the
    head schema. A schema that is behind (or ahead) raises SchemaVersionError:
    `m3grpc db upgrade` migrates it, never a store on its own. Safe when several
    processes start at once (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock).

    A current schema is read and left without the write lock: a store opening a database
    that another process writes (a worker process, a replica) does not wait for its
    writes, nor fail when one holds the lock past the busy timeout.
    """
    with read_transaction(engine) as conn:
        if read_schema_status(conn, revisions).state is SchemaState.CURRENT:
            return
    with write_transaction(engine) as conn:
        lock_schema(conn)
        status = read_schema_status(conn, revisions)
        if status.state is SchemaState.EMPTY:
            metadata.create_all(conn)
            stamp(conn, status.head)
        elif status.state is SchemaState.UNVERSIONED:
            # Alembic is imported only here, for databases made before migrations.
            from m3grpc.storage.migrate import adopt_unversioned

            adopt_unversioned(conn)
        elif not status.servable:
            raise SchemaVersionError(status.describe())
