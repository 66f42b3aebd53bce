"""Handing a resumable round's execution to the next worker (storage/handover.py),
against a real store: what may pass on, what still fails closed."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from m3grpc.errors import ManagedInputRecoveryError
from m3grpc.runtime.recovery import recover_expired
from m3grpc.storage import SqlExecutionStore, SqlManagedInputStore
from m3grpc.types import (
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
)
from tests.storage.conftest import ManualClock, make_round

LEASE = timedelta(seconds=30)
ANSWER = {"shipping_address": ElicitationResponse(action="decline")}


def paused(
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    *,
    resumable: bool,
    deadline: datetime | None = None,
) -> tuple[str, str, ManagedInputLease]:
    """A claimed execution waiting on one pending round (resumable or not)."""
    created = execution_store.create_execution({"t": 1}, human_input="managed")
    claimed = execution_store.claim_next(owner_id="first", lease_duration=LEASE)
    assert claimed is not None and claimed.execution_id == created.state.execution_id
    round_id = execution_store.managed_input_store.create_round(
        make_round(claimed.execution_id, clock, deadline=deadline),
        lease=claimed.lease,
        harness_resume_token='{"wire_keys": {}}' if resumable else None,
    ).round_id
    return claimed.execution_id, round_id, claimed.lease


def test_release_then_claim_adopts_the_round(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = paused(execution_store, clock, resumable=True)
    assert execution_store.release(execution_id, lease)
    released = store.get_round(round_id)
    assert released.status is ManagedInputStatus.PENDING and released.lease is None
    state = execution_store.get_state(execution_id)
    assert state.lifecycle is ExecutionStatus.WAITING_FOR_INPUT
    # The old worker can no longer touch it; nobody holds it for recovery to fail.
    clock.advance(LEASE.total_seconds() * 2)
    assert execution_store.expired_execution_ids() == []
    assert store.expired_round_ids() == []
    # The answer is kept while no worker holds the round.
    store.submit_responses(round_id, ANSWER, idempotency_key="k")
    claimed = execution_store.claim_next(owner_id="second", lease_duration=LEASE)
    assert claimed is not None and claimed.resumed_round_id == round_id
    adopted = store.get_round(round_id)
    assert adopted.status is ManagedInputStatus.RESPONSE_VALIDATED
    assert adopted.lease == claimed.lease
    store.start_delivery(round_id, claimed.lease)  # the new owner delivers it
    assert execution_store.claim_next(owner_id="third", lease_duration=LEASE) is None


def test_recovery_releases_a_resumable_round_and_fails_the_others(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    resumable_execution, resumable_round, _ = paused(execution_store, clock, resumable=True)
    closed_execution, closed_round, _ = paused(execution_store, clock, resumable=False)
    with pytest.raises(ManagedInputRecoveryError):  # its worker is alive
        execution_store.release_expired(resumable_execution)
    clock.advance(LEASE.total_seconds() + 1)
    assert execution_store.release_expired(resumable_execution)
    assert store.get_round(resumable_round).status is ManagedInputStatus.PENDING
    assert not execution_store.release_expired(closed_execution)
    execution_store.fail_recovery(closed_execution)
    failed = store.get_round(closed_round)
    assert failed.status is ManagedInputStatus.FAILED
    assert failed.failure_code == "recovery_unavailable"
    # A second recovery pass finds nothing to do with the released one.
    with pytest.raises(ManagedInputRecoveryError):
        execution_store.release_expired(resumable_execution)


def test_a_round_whose_retry_may_have_been_sent_fails_closed(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = paused(execution_store, clock, resumable=True)
    store.submit_responses(round_id, ANSWER, idempotency_key="k")
    store.start_delivery(round_id, lease)
    assert not execution_store.release(execution_id, lease)
    clock.advance(LEASE.total_seconds() + 1)
    assert not execution_store.release_expired(execution_id)
    execution_store.fail_recovery(execution_id)
    assert store.get_round(round_id).failure_code == "recovery_unavailable"


def test_a_non_resumable_round_is_not_released(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = paused(execution_store, clock, resumable=False)
    assert not execution_store.release(execution_id, lease)
    assert store.get_round(round_id).lease == lease


def test_cancel_finishes_a_released_execution_at_once(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = paused(execution_store, clock, resumable=True)
    assert execution_store.release(execution_id, lease)
    state = execution_store.request_cancel(execution_id)
    assert state.lifecycle is ExecutionStatus.FINISHED
    assert state.outcome is ExecutionOutcome.CANCELLED
    assert store.get_round(round_id).failure_code == "execution_finished"
    assert execution_store.claim_next(owner_id="second", lease_duration=LEASE) is None


def test_a_resumable_round_whose_own_lease_lapsed_first_is_released_not_failed(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    # Found by the crash campaign (tests/campaigns): its worker died after renewing
    # the execution's lease and before the round's, so the round's lease ran out
    # first and recovery's round pass failed it closed instead of releasing it.
    execution_id, round_id, lease = paused(execution_store, clock, resumable=True)
    clock.advance(20)
    execution_store.renew_execution(execution_id, lease, lease_duration=LEASE)
    clock.advance(15)  # the round's lease expired, the execution's not yet
    assert store.expired_round_ids() == [round_id]
    assert recover_expired(execution_store) == []
    assert store.get_round(round_id).status is ManagedInputStatus.PENDING
    clock.advance(20)  # now the execution's too: it passes on with its round
    released: list[str] = []
    assert recover_expired(execution_store, released=released) == []
    assert released == [execution_id]
    kept = store.get_round(round_id)
    assert kept.status is ManagedInputStatus.PENDING and kept.lease is None
