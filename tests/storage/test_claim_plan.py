"""A claim of a released execution reads no further than the first row it can take,
however many answered rounds wait for a worker (m3grpc/storage/executions.py,
`_released`). At N = 20,000 on PostgreSQL, a claim that sorted every answered round
first took 530 ms with 8,600 of them waiting; these tests read the plans the
databases choose with a few thousand waiting, and the order claims take them in."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from m3grpc.storage import SqlExecutionStore
from m3grpc.storage import executions as execution_rows
from m3grpc.storage.schema import executions, rounds
from m3grpc.types import ElicitationResponse
from tests.storage.conftest import ManualClock, make_round

LEASE = timedelta(seconds=30)
ANSWER = {"shipping_address": ElicitationResponse(action="decline")}
WAITING = 3000


def released(
    execution_store: SqlExecutionStore, clock: ManualClock, deadline_minutes: int
) -> tuple[str, str]:
    """An execution its worker released while its round waits: (execution, round)."""
    created = execution_store.create_execution({"t": 1}, human_input="managed")
    claimed = execution_store.claim_next(owner_id="first", lease_duration=LEASE)
    assert claimed is not None and claimed.execution_id == created.state.execution_id
    round_id = execution_store.managed_input_store.create_round(
        make_round(
            claimed.execution_id, clock, deadline=clock() + timedelta(minutes=deadline_minutes)
        ),
        lease=claimed.lease,
        harness_resume_token='{"wire_keys": {}}',
    ).round_id
    assert execution_store.release(claimed.execution_id, claimed.lease)
    return claimed.execution_id, round_id


def copies(engine: sa.Engine, execution_id: str, count: int, **round_values: Any) -> None:
    """`count` more executions like `execution_id`, their rounds' columns changed by
    `round_values`, inserted as rows: the store's calls would take minutes for thousands."""
    with engine.begin() as conn:
        execution = dict(
            conn.execute(sa.select(executions).where(executions.c.execution_id == execution_id))
            .one()
            ._mapping
        )
        round_row = dict(
            conn.execute(sa.select(rounds).where(rounds.c.execution_id == execution_id))
            .one()
            ._mapping
        )
        new_ids = [f"exe_{uuid.uuid4().hex}" for _ in range(count)]
        conn.execute(
            sa.insert(executions),
            [{**execution, "execution_id": new_id, "request_id": None} for new_id in new_ids],
        )
        conn.execute(
            sa.insert(rounds),
            [
                {
                    **round_row,
                    **round_values,
                    "round_id": f"rnd_{uuid.uuid4().hex}",
                    "execution_id": new_id,
                }
                for new_id in new_ids
            ],
        )


def plan(conn: sa.Connection, statement: Any, now: int) -> str:
    """The plan the database chooses for one of the claim's statements, as text."""
    sql = statement.statement.element.text
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("ANALYZE"))
        rows = conn.execute(sa.text(f"EXPLAIN (FORMAT JSON) {sql}"), {"now": now}).scalar_one()
        return json.dumps(rows)
    rows = conn.execute(sa.text(f"EXPLAIN QUERY PLAN {sql}"), {"now": now}).all()
    return "\n".join(str(row[-1]) for row in rows)


def test_a_claim_reads_the_released_rounds_index_in_order_without_sorting(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    store = execution_store.managed_input_store
    waiting, _ = released(execution_store, clock, deadline_minutes=60)
    answered, round_id = released(execution_store, clock, deadline_minutes=60)
    store.submit_responses(round_id, ANSWER, idempotency_key="k")
    engine = store.engine
    copies(engine, answered, WAITING)
    # As many overdue: still pending, released, their deadline passed.
    copies(engine, waiting, WAITING, deadline=clock() - timedelta(minutes=1))
    postgres = engine.dialect.name == "postgresql"
    now = int(clock().timestamp() * 1_000_000)
    with engine.connect() as conn:
        for overdue in (False, True):
            chosen = plan(conn, execution_rows._NEXT_RELEASED[postgres, overdue], now)
            assert "ix_m3_rounds_released" in chosen, chosen
            # A sort would read every waiting round before taking one.
            assert ("Sort" not in chosen) if postgres else ("TEMP B-TREE" not in chosen), chosen


def test_released_executions_are_claimed_nearest_their_deadline_first(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    # Created first, due last: age does not decide among released ones.
    paused = [released(execution_store, clock, minutes) for minutes in (90, 30, 60)]
    for _, round_id in paused:
        execution_store.managed_input_store.submit_responses(round_id, ANSWER, idempotency_key="k")
    taken = []
    for worker in ("a", "b", "c"):
        claimed = execution_store.claim_next(owner_id=worker, lease_duration=LEASE)
        assert claimed is not None and claimed.resumed_round_id is not None
        taken.append(claimed.execution_id)
    late, early, middle = (execution_id for execution_id, _ in paused)
    assert taken == [early, middle, late]
    assert execution_store.claim_next(owner_id="d", lease_duration=LEASE) is None
