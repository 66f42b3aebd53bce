"""The schema's JSON documents on each backend: JSONB on PostgreSQL, JSON text on
SQLite, Python None stored as JSON null (not SQL NULL) on both, and a store on
SQLite that never loads SQLAlchemy's PostgreSQL dialect (memory per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.storage import SqlExecutionStore, SqlManagedInputStore
from m3grpc.storage.engine import open_engine
from tests.storage.conftest import ManualClock, make_lease, make_round, new_execution

# Every JSON document column of the schema, by table.
JSON_COLUMNS = {
    "m3_executions": ("spec", "result"),
    "m3_managed_input_rounds": ("requests", "responses", "turn_metadata", "operation_parameters"),
    "m3_operation_results": ("result",),
}


def test_none_in_a_json_column_is_stored_as_json_null(
    database: str,
    execution_store: SqlExecutionStore,
    store: SqlManagedInputStore,
    clock: ManualClock,
) -> None:
    pending = make_round(new_execution(execution_store), clock)
    record = store.create_round(pending, lease=make_lease(clock), turn_metadata=None)
    assert record.turn_metadata is None
    assert store.get_round(pending.round_id).turn_metadata is None
    engine = open_engine(database)
    try:
        with engine.connect() as conn:
            is_sql_null, text = conn.execute(
                sa.text(
                    "SELECT turn_metadata IS NULL, CAST(turn_metadata AS TEXT) "
                    "FROM m3_managed_input_rounds WHERE round_id = :round_id"
                ),
                {"round_id": pending.round_id},
            ).one()
            # Never answered: no value written at all, SQL NULL.
            unanswered = conn.execute(
                sa.text(
                    "SELECT responses IS NULL FROM m3_managed_input_rounds "
                    "WHERE round_id = :round_id"
                ),
                {"round_id": pending.round_id},
            ).scalar_one()
    finally:
        engine.dispose()
    assert (bool(is_sql_null), text) == (False, "null")
    assert unanswered


@pytest.mark.postgres
def test_json_documents_are_jsonb_on_postgresql(database: str) -> None:
    if not database.startswith("postgresql"):
        pytest.skip("a PostgreSQL column type")
    SqlExecutionStore(database).close()
    engine = open_engine(database)
    try:
        with engine.connect() as conn:
            types = {
                (table, column): data_type
                for table, column, data_type in conn.execute(
                    sa.text(
                        "SELECT table_name, column_name, data_type FROM information_schema.columns "
                        "WHERE table_name IN ('m3_executions', 'm3_managed_input_rounds', "
                        "'m3_operation_results')"
                    )
                )
            }
    finally:
        engine.dispose()
    for table, columns in JSON_COLUMNS.items():
        for column in columns:
            assert types[(table, column)] == "jsonb", (table, column)


def test_a_store_on_sqlite_does_not_load_the_postgresql_dialect(tmp_path: Path) -> None:
    """A round's whole cycle on SQLite, in a fresh interpreter, without importing
    SQLAlchemy's PostgreSQL dialect (~2 MB a process)."""
    script = textwrap.dedent(
        """
        import sys
        from datetime import UTC, datetime, timedelta
        from m3grpc.storage import SqlExecutionStore
        from m3grpc.types import (
            ElicitationResponse, FormElicitationRequest, ManagedInputLease,
            PendingElicitationRound,
        )
        store = SqlExecutionStore(sys.argv[1])
        rounds = store.managed_input_store
        execution_id = store.create_execution({"p": 1}, human_input="managed").state.execution_id
        now = datetime.now(UTC)
        lease = ManagedInputLease(
            owner_id="w", lease_token="t", expires_at=now + timedelta(minutes=5)
        )
        pending = PendingElicitationRound(
            round_id="rnd_1", execution_id=execution_id, logical_operation_id="op",
            server="s", operation_kind="tool", operation_name="t", created_at=now,
            requests={"a": FormElicitationRequest(
                message="m", requested_schema={"type": "object", "properties": {}}
            )},
        )
        rounds.create_round(pending, lease=lease)
        rounds.submit_responses(
            "rnd_1", {"a": ElicitationResponse(action="accept", content={})},
            idempotency_key="k",
        )
        rounds.start_delivery("rnd_1", lease, mark_delivered=True)
        assert rounds.resolve("rnd_1", lease).status.value == "resolved"
        store.close()
        print(sorted(m for m in sys.modules if m.startswith("sqlalchemy.dialects.")))
        """
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "store.sqlite")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "sqlalchemy.dialects.sqlite" in loaded
    assert "sqlalchemy.dialects.postgresql" not in loaded
