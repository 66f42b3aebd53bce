"""Where a configured database stands, looked at without changing it (check-config, serve's
start-up summary): reachable or not, and its schema revision."""

from __future__ import annotations

import os

import sqlalchemy as sa

from m3grpc.storage.engine import database_url, open_engine, read_transaction
from m3grpc.storage.schema_version import (
    HEAD_REVISION,
    SchemaState,
    SchemaStatus,
    read_schema_status,
)


class DatabaseLocationError(OSError):
    """An SQLite file that does not exist and cannot be created where it is named."""


def sqlite_location_problem(database: str | os.PathLike[str]) -> str | None:
    """Why the SQLite file `database` names cannot be created, or None (it exists, it
    can be, or `database` is not an SQLite path). SQLite itself says only "unable to
    open database file"."""
    url = sa.make_url(database_url(database))
    path = url.database
    if url.get_backend_name() != "sqlite" or not path or os.path.exists(path):
        return None
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.exists(directory) else "does not exist"
        return f"cannot create the SQLite file: directory {directory} {what}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"cannot create the SQLite file: directory {directory} is not writable"
    return None


def inspect_database(database: str | os.PathLike[str]) -> SchemaStatus:
    """The schema status of `database` (a URL or an SQLite path).

    A missing SQLite file is reported empty without creating it, or raises
    DatabaseLocationError when it could not be created. Connection and driver
    errors propagate (SQLAlchemy's, or ImportError for a missing driver).
    """
    if (problem := sqlite_location_problem(database)) is not None:
        raise DatabaseLocationError(problem)
    url = sa.make_url(database_url(database))
    if url.get_backend_name() == "sqlite" and url.database and not os.path.exists(url.database):
        return SchemaStatus(SchemaState.EMPTY, None, HEAD_REVISION)
    engine = open_engine(database)
    try:
        with read_transaction(engine) as conn:
            return read_schema_status(conn)
    finally:
        engine.dispose()
