"""Alembic's environment: runs on the connection m3grpc.storage.migrate hands over.

Online only; the caller owns the transaction (and the PostgreSQL advisory lock).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from m3grpc.storage.schema import metadata
from m3grpc.storage.schema_version import VERSION_TABLE


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things in place: batch mode copies the table.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations(context.config.attributes["connection"])
