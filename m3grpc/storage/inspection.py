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


def inspect_database(database: str | os.PathLike[str]) -> SchemaStatus:
    """The schema status of `database` (a URL or an SQLite path).

    A missing SQLite file is reported empty without creating it. Connection and
    driver errors propagate (SQLAlchemy's, or ImportError for a missing driver).
    """
    url = sa.make_url(database_url(database))
    if url.get_backend_name() == "sqlite" and url.database and not os.path.exists(url.database):
        return SchemaStatus(SchemaState.EMPTY, None, HEAD_REVISION)
    engine = open_engine(database)
    try:
        with read_transaction(engine) as conn:
            return read_schema_status(conn)
    finally:
        engine.dispose()
