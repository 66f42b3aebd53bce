"""One heartbeat renews every execution of an owner and their open rounds, in
one transaction; a lapsed lease renews unless recovery fenced it."""

from __future__ import annotations

from datetime import timedelta

from m3grpc.runtime.recovery import recover_expired
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import ExecutionStatus, ManagedInputLease, ManagedInputStatus
from tests.storage.conftest import ManualClock, make_round

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
