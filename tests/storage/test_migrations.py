"""Schema migrations (Alembic) and the schema version a store checks, on SQLite and
PostgreSQL: the first revision is exactly schema.py's metadata, a new store makes
the same schema, a database from before migrations is adopted only when it matches,
and a schema that is behind (or ahead) is refused until `db upgrade` moves it.

"A later release" is played by a copy of the packaged migrations with one more
revision, handed to the same functions the CLI uses.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.engine import dispose_engine, open_engine, read_transaction
from m3grpc.storage.migrate import PACKAGED, Migrations, schema_differences, upgrade_database
from m3grpc.storage.schema import metadata
from m3grpc.storage.schema_version import (
    HEAD_REVISION,
    REVISIONS,
    VERSION_TABLE,
    SchemaState,
    SchemaVersionError,
    read_schema_status,
)
from m3grpc.storage.store_engine import create_store_engine, ensure_schema

# The revision after this release's head, as a later release would add it.
NEXT = f"{int(HEAD_REVISION) + 1:04d}"
NEXT_REVISION = f"""
import sqlalchemy as sa
from alembic import op

revision = "{NEXT}"
down_revision = "{HEAD_REVISION}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("m3_executions", sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("m3_executions", "note")
"""


@pytest.fixture
def later_release(tmp_path: Path) -> Migrations:
    """The packaged migrations plus a revision NEXT that adds a column."""
    location = tmp_path / "later_migrations"
    shutil.copytree(PACKAGED.location, location, ignore=shutil.ignore_patterns("__pycache__"))
    (location / "versions" / f"{NEXT}_note.py").write_text(NEXT_REVISION)
    return Migrations(location, (*REVISIONS, NEXT))


@pytest.fixture
def engine(database: str) -> Iterator[sa.Engine]:
    engine = open_engine(database)
    yield engine
    engine.dispose()


def _status(engine: sa.Engine, revisions: tuple[str, ...] = REVISIONS) -> SchemaState:
    with read_transaction(engine) as conn:
        return read_schema_status(conn, revisions).state


def _differences(engine: sa.Engine) -> list[object]:
    with read_transaction(engine) as conn:
        return schema_differences(conn)


def _versions(engine: sa.Engine) -> list[str]:
    with read_transaction(engine) as conn:
        return list(conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars())


def test_revisions_are_the_packaged_migration_chain() -> None:
    script = PACKAGED.script_directory()
    chain = [revision.revision for revision in script.walk_revisions()]
    assert tuple(reversed(chain)) == REVISIONS
    assert script.get_current_head() == HEAD_REVISION


def test_the_revisions_make_exactly_the_metadata_schema(engine: sa.Engine) -> None:
    result = upgrade_database(engine)
    assert result.before.state is SchemaState.EMPTY
    assert result.after.state is SchemaState.CURRENT
    assert _versions(engine) == [HEAD_REVISION]
    assert _differences(engine) == []
    # Upgrading again changes nothing.
    again = upgrade_database(engine)
    assert again.before.state is SchemaState.CURRENT
    assert _versions(engine) == [HEAD_REVISION]


def test_the_comparison_sees_a_difference(engine: sa.Engine) -> None:
    upgrade_database(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX ix_m3_rounds_status"))
    differences = _differences(engine)
    assert [diff[0] for diff in differences] == ["add_index"], differences  # type: ignore[index]
    assert "ix_m3_rounds_status" in str(differences)


def test_a_store_on_an_empty_database_makes_the_same_schema(database: str) -> None:
    SqlExecutionStore(database).close()
    engine = open_engine(database)
    try:
        assert _status(engine) is SchemaState.CURRENT
        assert _versions(engine) == [HEAD_REVISION]
        assert _differences(engine) == []
    finally:
        engine.dispose()


def test_a_store_opens_a_current_database_while_another_writer_holds_the_lock(
    tmp_path: Path,
) -> None:
    """A worker process or a replica opening the database reads its schema without the
    write lock: it neither waits for another process's write nor fails when that one
    holds the lock past the busy timeout (a worker process died at start so)."""
    path = tmp_path / "m3.sqlite"
    SqlExecutionStore(str(path)).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        engine = create_store_engine(str(path), busy_timeout_ms=200)
        try:
            assert _status(engine) is SchemaState.CURRENT
        finally:
            dispose_engine(engine)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_database_from_before_migrations_is_adopted(database: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        metadata.create_all(conn)  # what every store did before there were migrations
    assert _status(engine) is SchemaState.UNVERSIONED
    SqlExecutionStore(database).close()
    assert _status(engine) is SchemaState.CURRENT
    assert _versions(engine) == [HEAD_REVISION]


def test_unversioned_tables_that_differ_are_refused(database: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        metadata.tables["m3_executions"].create(conn)  # the other tables are missing
    with pytest.raises(SchemaVersionError, match="differ from revision") as refused:
        SqlExecutionStore(database)
    assert "m3_managed_input_rounds" in str(refused.value)
    assert "\n" not in str(refused.value)
    # Nothing was stamped or created.
    assert _status(engine) is SchemaState.UNVERSIONED
    assert set(sa.inspect(engine).get_table_names()) == {"m3_executions"}
    with pytest.raises(SchemaVersionError, match="differ from revision"):
        upgrade_database(engine)


def test_a_schema_behind_is_refused_until_upgraded(
    engine: sa.Engine, later_release: Migrations
) -> None:
    upgrade_database(engine)  # this release: its head revision
    with pytest.raises(SchemaVersionError, match=f"behind {NEXT}: run `m3grpc db upgrade`"):
        ensure_schema(engine, later_release.revisions)  # the later release opens it
    assert _versions(engine) == [HEAD_REVISION]

    result = upgrade_database(engine, later_release)
    assert (result.before.state, result.before.revision) == (SchemaState.BEHIND, HEAD_REVISION)
    assert (result.after.state, result.after.revision) == (SchemaState.CURRENT, NEXT)
    columns = {column["name"] for column in sa.inspect(engine).get_columns("m3_executions")}
    assert "note" in columns
    ensure_schema(engine, later_release.revisions)  # now it opens


def test_a_schema_ahead_is_refused(
    database: str, engine: sa.Engine, later_release: Migrations
) -> None:
    upgrade_database(engine, later_release)  # a later release migrated it to NEXT
    with pytest.raises(SchemaVersionError, match=f"{NEXT}, unknown to this version"):
        SqlExecutionStore(database)
    with pytest.raises(SchemaVersionError, match=f"{NEXT}, unknown to this version"):
        upgrade_database(engine)
    assert _versions(engine) == [NEXT]


def _upgraded_from(engine: sa.Engine, revision: str, insert: str) -> None:
    """A database an earlier release left at `revision`, with the row `insert`
    makes, upgraded to this release's head: the metadata schema exactly."""
    from alembic import command

    with engine.begin() as conn:
        command.upgrade(PACKAGED.config(conn), revision)
        conn.execute(sa.text(insert))
    result = upgrade_database(engine)
    assert (result.before.revision, result.after.revision) == (revision, HEAD_REVISION)
    assert _differences(engine) == []


def test_revision_0002_adds_the_principal_and_keeps_the_executions(engine: sa.Engine) -> None:
    _upgraded_from(
        engine,
        "0001",
        "INSERT INTO m3_executions (execution_id, spec, human_input, lifecycle,"
        " cancel_requested, created_at, updated_at)"
        " VALUES ('exe_old', '{}', 'fail', 'queued', false, 0, 0)",
    )
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT execution_id, principal FROM m3_executions")).all()
    assert [tuple(row) for row in rows] == [("exe_old", None)]


def test_revision_0003_indexes_the_sweep_and_keeps_the_executions(engine: sa.Engine) -> None:
    _upgraded_from(
        engine,
        "0002",
        "INSERT INTO m3_executions (execution_id, spec, human_input, lifecycle,"
        " cancel_requested, worker_lease_expires_at, created_at, updated_at)"
        " VALUES ('exe_old', '{}', 'managed', 'waiting_for_input', false, 5, 0, 0)",
    )
    indexes = {
        index["name"]
        for table in ("m3_executions", "m3_managed_input_rounds")
        for index in sa.inspect(engine).get_indexes(table)
    }
    assert {
        "ix_m3_executions_lease_expiry",
        "ix_m3_rounds_status_deadline",
        "ix_m3_rounds_status_lease",
    } <= indexes
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT execution_id FROM m3_executions")).all()
    assert [tuple(row) for row in rows] == [("exe_old",)]
