"""SQLite: the changes a commit announced reach this process's change listeners.

The worker processes of one `m3grpc serve` pass them to each other
(m3grpc/runtime/local_wakes.py) because SQLite has no NOTIFY: a change missed here
leaves another process's waiter to its poll; one of a write that rolled back would
be a needless wake-up. PostgreSQL announces by NOTIFY instead (test_changes.py).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.storage import EventKind, SqlExecutionStore
from m3grpc.storage.changes import CANCEL_REQUESTED, EXECUTION_QUEUED, Change
from m3grpc.storage.engine import write_transaction
from m3grpc.storage.events import append_event
from tests.storage.conftest import ACCEPT, ManualClock, make_lease, make_round, new_execution

LEASE = timedelta(seconds=30)


def test_commits_hand_their_changes_to_the_change_listeners(tmp_path: Path) -> None:
    clock = ManualClock()
    execution_store = SqlExecutionStore(tmp_path / "m3.sqlite", clock=clock)
    heard: list[list[Change]] = []
    try:
        new_execution(execution_store)  # before any listener: nothing is kept for it
        execution_store.add_change_listener(lambda changes: heard.append(list(changes)))
        rounds_store = execution_store.managed_input_store

        execution_id = new_execution(execution_store)
        assert heard == [[Change(EXECUTION_QUEUED, execution_id)]]
        # Claims and reads announce nothing.
        while execution_store.claim_next(owner_id="worker-a", lease_duration=LEASE):
            pass
        assert len(heard) == 1

        created = rounds_store.create_round(
            make_round(execution_id, clock), lease=make_lease(clock), round_limit=3
        )
        pending = Change(EventKind.ROUND_PENDING.value, execution_id, created.round_id)
        assert heard[-1] == [pending]

        # A write that rolled back hands over nothing, and leaves nothing behind
        # for the next transaction on its connection.
        with pytest.raises(RuntimeError), write_transaction(rounds_store.engine) as conn:
            append_event(
                conn, EventKind.ROUND_CHANGED, execution_id=execution_id, created_at=clock()
            )
            raise RuntimeError("rolled back")
        for _ in range(3):
            with write_transaction(rounds_store.engine) as conn:
                conn.execute(sa.text("SELECT 1"))
        assert len(heard) == 2

        rounds_store.submit_responses(created.round_id, ACCEPT, idempotency_key="k")
        answered = heard[-1]
        assert [(c.execution_id, c.round_id) for c in answered] == [
            (execution_id, created.round_id)
        ]
        assert answered[0].kind == EventKind.ROUND_LEFT_PENDING.value

        execution_store.request_cancel(execution_id)
        assert Change(CANCEL_REQUESTED, execution_id) in heard[-1]
    finally:
        execution_store.close()
