"""A worker's round transition in the usual case is one compare-and-set
`UPDATE ... RETURNING` (no read of the round first), on SQLite and PostgreSQL;
a retry or a refusal reads the round and is checked as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from m3grpc.errors import ConflictKind, ManagedInputConflict, ManagedInputStateError
from m3grpc.storage import SqlExecutionStore, SqlManagedInputStore
from m3grpc.storage.store_engine import create_store_engine
from m3grpc.types import (
    ExecutionOutcome,
    ExecutionResult,
    ExecutionStatus,
    ManagedInputStatus,
    OperationResult,
)
from tests.storage.conftest import ACCEPT, ManualClock, make_lease, make_round, new_execution

ROUNDS = "m3_managed_input_rounds"


@pytest.fixture
def traced(database: str, clock: ManualClock) -> Iterator[tuple[SqlManagedInputStore, list[str]]]:
    """A managed-input store on its own engine, and every SQL statement it runs
    (SQLite: as the driver runs them, which is where round transitions run)."""
    statements: list[str] = []

    def trace(dbapi_connection: object, record: object) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.set_trace_callback(statements.append)

    # Every connection this engine opens, from its first (the store keeps its
    # write connection).
    sa.event.listen(sa.pool.Pool, "connect", trace)
    try:
        engine = create_store_engine(database)
    finally:
        sa.event.remove(sa.pool.Pool, "connect", trace)
    if engine.dialect.name != "sqlite":

        @sa.event.listens_for(engine, "before_cursor_execute")
        def record_statement(*args: object) -> None:
            statements.append(str(args[2]))

    try:
        yield SqlManagedInputStore(engine, clock=clock), statements
    finally:
        engine.dispose()


def _round_reads(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith("SELECT") and ROUNDS in s]


def _round_writes(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith("UPDATE " + ROUNDS.upper())]


def test_usual_worker_moves_write_without_reading_the_round(
    execution_store: SqlExecutionStore,
    traced: tuple[SqlManagedInputStore, list[str]],
    clock: ManualClock,
) -> None:
    store, statements = traced
    lease = make_lease(clock)
    pending = make_round(new_execution(execution_store), clock)
    store.create_round(pending, lease=lease)
    store.submit_responses(pending.round_id, ACCEPT, idempotency_key="k")
    statements.clear()
    started = store.start_delivery(pending.round_id, lease)
    result = OperationResult(
        logical_operation_id=pending.logical_operation_id,
        server="shipping",
        operation_kind="tool",
        operation_name="book_shipment",
        ok=True,
        result={"content": []},
    )
    resolved = store.resolve(
        pending.round_id, lease, operation=result, last=True, mark_delivered=True
    )
    assert _round_reads(statements) == []
    writes = _round_writes(statements)
    assert len(writes) == 2 and all("RETURNING" in w.upper() for w in writes)
    # What the round's record says is what a read gives.
    assert started.status is ManagedInputStatus.DELIVERY_STARTED
    assert started.delivery_attempts == 1
    assert resolved == store.get_round(pending.round_id)
    assert resolved.status is ManagedInputStatus.RESOLVED
    assert resolved.delivered_at == resolved.resolved_at == clock()
    kinds = [
        (e.kind.value, e.status)
        for e in execution_store.read_events(after_seq=0)
        if e.round_id == pending.round_id
    ]
    assert kinds[-3:] == [
        ("round_changed", "delivery_started"),
        ("round_changed", "delivered"),
        ("round_changed", "resolved"),
    ]
    stored = execution_store.operation_results(pending.execution_id)
    assert [op.logical_operation_id for op in stored] == [pending.logical_operation_id]


def test_a_retry_and_refusals_read_the_round_and_explain(
    execution_store: SqlExecutionStore,
    traced: tuple[SqlManagedInputStore, list[str]],
    clock: ManualClock,
) -> None:
    store, statements = traced
    lease = make_lease(clock)
    pending = make_round(new_execution(execution_store), clock)
    store.create_round(pending, lease=lease)
    store.submit_responses(pending.round_id, ACCEPT, idempotency_key="k")
    store.start_delivery(pending.round_id, lease)
    statements.clear()
    # A retry of the delivery by the same live owner: from delivery_started again.
    retried = store.start_delivery(pending.round_id, lease)
    assert retried.delivery_attempts == 2
    assert len(_round_reads(statements)) == 1
    # Another token: a stale lease, nothing written.
    other = make_lease(clock)
    with pytest.raises(ManagedInputConflict) as stale:
        store.mark_delivered(pending.round_id, other)
    assert stale.value.conflict_kind is ConflictKind.STALE_LEASE
    # The wrong state for the move: a state error.
    with pytest.raises(ManagedInputStateError):
        store.resolve(pending.round_id, lease)
    # The lease expired: stale, even though owner and token match.
    clock.advance(31)
    with pytest.raises(ManagedInputConflict) as expired:
        store.mark_delivered(pending.round_id, lease)
    assert expired.value.conflict_kind is ConflictKind.STALE_LEASE
    assert "expired" in str(expired.value)
    assert store.get_round(pending.round_id) == retried


def test_an_executions_hot_path_runs_straight_on_sqlite(
    database: str, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    """Create, claim, read the state and the rounds of, and finish an execution: on SQLite every
    statement runs on the driver, none through SQLAlchemy's execution path (which
    costs several times the statement)."""
    if database.startswith("postgresql"):
        pytest.skip("SQLite runs these on the driver; PostgreSQL through SQLAlchemy")
    through_sqlalchemy: list[str] = []

    def record_statement(*args: object) -> None:
        through_sqlalchemy.append(str(args[2]))

    engine = execution_store.managed_input_store.engine
    sa.event.listen(engine, "before_cursor_execute", record_statement)
    created = execution_store.create_execution({"prompt": "p"}, human_input="managed").state
    claimed = execution_store.claim_next(owner_id="w", lease_duration=timedelta(minutes=5))
    assert claimed is not None and claimed.execution_id == created.execution_id
    assert execution_store.get_state(created.execution_id).lifecycle is ExecutionStatus.RUNNING
    rounds = execution_store.managed_input_store
    assert (
        rounds.list_rounds(execution_id=created.execution_id, statuses=[ManagedInputStatus.PENDING])
        == []
    )
    finished = execution_store.finish(
        created.execution_id,
        claimed.lease,
        ExecutionResult(
            execution_id=created.execution_id,
            outcome=ExecutionOutcome.SUCCEEDED,
            finished_at=clock(),
        ),
    )
    assert finished.lifecycle is ExecutionStatus.FINISHED
    assert finished == execution_store.get_state(created.execution_id)
    assert through_sqlalchemy == []
