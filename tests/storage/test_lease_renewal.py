"""One heartbeat renews every execution of an owner, then their open rounds; a
lapsed lease renews unless recovery fenced it; on PostgreSQL it never deadlocks
with a round transition (which locks its round before its execution)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from m3grpc.runtime.recovery import recover_expired
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import ExecutionStatus, ManagedInputLease, ManagedInputStatus
from tests.storage.conftest import POSTGRES_URL, ManualClock, make_round, postgres_database

LEASE = timedelta(seconds=30)


def _claimed(store: SqlExecutionStore, owner: str) -> tuple[str, str]:
    execution_id = store.create_execution({}, human_input="managed").state.execution_id
    claimed = store.claim_next(owner_id=owner, lease_duration=LEASE)
    assert claimed is not None and claimed.execution_id == execution_id
    return execution_id, claimed.lease.lease_token


def test_renews_executions_and_rounds_lapsed_or_not(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    first, first_token = _claimed(execution_store, "w")
    second, second_token = _claimed(execution_store, "w")
    rounds = execution_store.managed_input_store
    pending = make_round(first, clock)
    rounds.create_round(
        pending,
        lease=ManagedInputLease(owner_id="w", lease_token=first_token, expires_at=clock() + LEASE),
    )
    clock.advance(45)  # the owner's loop stalled past both leases
    renewed = execution_store.renew_leases(
        "w", {first: first_token, second: second_token}, lease_duration=LEASE
    )
    assert set(renewed) == {first, second}
    assert all(expires == clock() + LEASE for expires, _cancel in renewed.values())
    record = rounds.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.PENDING
    assert record.lease is not None and record.lease.expires_at == clock() + LEASE
    assert execution_store.expired_execution_ids() == []
    assert rounds.expired_round_ids() == []


def test_a_fenced_or_foreign_lease_is_not_renewed(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    mine, token = _claimed(execution_store, "w")
    clock.advance(31)
    assert recover_expired(execution_store) == [mine]  # a dead owner's work is failed
    assert execution_store.renew_leases("w", {mine: token}, lease_duration=LEASE) == {}
    other, other_token = _claimed(execution_store, "v")
    assert execution_store.renew_leases("w", {other: other_token}, lease_duration=LEASE) == {}
    assert execution_store.renew_leases("v", {other: "forged"}, lease_duration=LEASE) == {}


def test_recovery_skips_the_callers_live_executions(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    live, _token = _claimed(execution_store, "w")
    gone, _other = _claimed(execution_store, "w")
    clock.advance(31)
    assert recover_expired(execution_store, live={live}) == [gone]
    assert execution_store.get_state(live).lifecycle is ExecutionStatus.RUNNING


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from postgres_database()


@pytest.mark.postgres
@pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set")
def test_renewal_does_not_deadlock_with_a_round_transition(postgres_url: str) -> None:
    # Found by the crash campaign (tests/campaigns): the heartbeat held its
    # executions' rows while it waited for their rounds; start_delivery (or another
    # replica's fail_recovery) held a round while it waited for its execution.
    # PostgreSQL aborted one of them: a lapsed lease, or a failed live execution.
    store = SqlExecutionStore(postgres_url)
    engine = sa.create_engine(postgres_url)
    try:
        execution_id, token = _claimed(store, "w")
        pending = make_round(execution_id, ManualClock(datetime.now(UTC)))
        lease = ManagedInputLease(
            owner_id="w", lease_token=token, expires_at=datetime.now(UTC) + LEASE
        )
        store.managed_input_store.create_round(pending, lease=lease)
        outcome: list[object] = []

        def heartbeat() -> None:
            try:
                outcome.append(store.renew_leases("w", {execution_id: token}, lease_duration=LEASE))
            except Exception as error:
                outcome.append(error)

        with engine.connect() as transition, engine.connect() as observer:
            # A round transition in flight: its round first ...
            transition.execute(
                sa.text("SELECT 1 FROM m3_managed_input_rounds WHERE round_id = :r FOR UPDATE"),
                {"r": pending.round_id},
            )
            thread = threading.Thread(target=heartbeat, daemon=True)
            thread.start()
            waiting = sa.text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            for _ in range(600):  # until the heartbeat waits for that round
                if observer.execute(waiting).scalar_one() or not thread.is_alive():
                    break
                time.sleep(0.05)
            # ... then its execution, as start_delivery does.
            transition.execute(
                sa.text("UPDATE m3_executions SET updated_at = updated_at WHERE execution_id = :e"),
                {"e": execution_id},
            )
            transition.commit()
            thread.join(timeout=60)
        (renewed,) = outcome
        assert isinstance(renewed, dict) and set(renewed) == {execution_id}, renewed
        record = store.managed_input_store.get_round(pending.round_id)
        assert record.lease is not None
        assert record.lease.expires_at == renewed[execution_id][0]
    finally:
        engine.dispose()
        store.close()
