"""Schema migrations with Alembic, configured in code (no alembic.ini on disk).

`upgrade_database` is what `m3grpc db upgrade` runs: an empty database gets
every revision in order, an older one the revisions it lacks, and one made
before migrations existed is adopted (stamped) when its tables match the head
schema. All in one transaction, under the schema lock, so replicas upgrading at
once do it one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from m3grpc.storage.engine import lock_schema, write_transaction
from m3grpc.storage.schema import metadata
from m3grpc.storage.schema_version import (
    HEAD_REVISION,
    REVISIONS,
    VERSION_TABLE,
    SchemaState,
    SchemaStatus,
    SchemaVersionError,
    read_schema_status,
    stamp,
)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


@dataclass(frozen=True)
class Migrations:
    """A migration history: Alembic's script directory and its revisions in order.

    The packaged one by default; tests build a longer one to play a later release.
    """

    location: Path = MIGRATIONS
    revisions: tuple[str, ...] = REVISIONS

    def config(self, connection: Connection | None = None) -> Config:
        """An Alembic configuration for these migrations, running on `connection`."""
        config = Config()
        config.set_main_option("script_location", str(self.location))
        config.attributes["connection"] = connection
        return config

    def script_directory(self) -> ScriptDirectory:
        return ScriptDirectory.from_config(self.config())


PACKAGED = Migrations()


def schema_differences(conn: Connection) -> list[Any]:
    """Alembic's differences between the database on `conn` and the head schema
    (m3grpc/storage/schema.py): empty when they match."""
    context = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "compare_type": True}
    )
    return list(compare_metadata(context, metadata))


def adopt_unversioned(conn: Connection) -> None:
    """Stamp the head revision on M3 tables made before migrations, if they match it
    (the head schema is this version's schema.py); SchemaVersionError otherwise."""
    differences = schema_differences(conn)
    if differences:
        shown = "; ".join(_describe(diff) for diff in differences[:5])
        more = f" and {len(differences) - 5} more" if len(differences) > 5 else ""
        raise SchemaVersionError(
            "schema unversioned: M3 tables without a schema version that differ from "
            f"revision {HEAD_REVISION} ({shown}{more}); migrate them by hand, or start "
            "from an empty database"
        )
    stamp(conn)


def _describe(diff: Any) -> str:
    # A difference is a tuple ("add_column", schema, table, column, ...) or a list of them.
    if isinstance(diff, list):
        diff = diff[0]
    kind, *rest = diff
    names = [getattr(item, "name", None) or str(item) for item in rest if item is not None]
    return " ".join([kind, *names[:3]])


@dataclass(frozen=True)
class UpgradeResult:
    before: SchemaStatus
    after: SchemaStatus


def upgrade_database(engine: Engine, migrations: Migrations = PACKAGED) -> UpgradeResult:
    """Bring the database on `engine` to the head revision (see the module docstring)."""
    with write_transaction(engine) as conn:
        lock_schema(conn)
        before = read_schema_status(conn, migrations.revisions)
        if before.state is SchemaState.AHEAD:
            raise SchemaVersionError(before.describe())
        if before.state is SchemaState.UNVERSIONED:
            adopt_unversioned(conn)
        elif before.state in (SchemaState.EMPTY, SchemaState.BEHIND):
            # Inside our transaction: Alembic sees it and does not commit on its own.
            command.upgrade(migrations.config(conn), "head")
        after = read_schema_status(conn, migrations.revisions)
    return UpgradeResult(before, after)
