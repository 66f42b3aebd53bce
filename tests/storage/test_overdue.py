"""Overdue rounds (storage/overdue.py), against a real store on every backend: a read
`as_read` reports what Respond would do at that instant, and the sweep's writes
(`expire_released`, `recover_expired`) carry it out exactly once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from m3grpc.errors import ManagedInputRecoveryError, OperationTimeout
from m3grpc.runtime.recovery import recover_expired
from m3grpc.storage import SqlExecutionStore, SqlManagedInputStore
from m3grpc.storage.events import EventKind
from m3grpc.types import (
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
    OperationResult,
)
from tests.storage import test_handover as handover
from tests.storage.conftest import ManualClock, make_round

LEASE = timedelta(seconds=30)
TIMEOUT = timedelta(seconds=10)
ANSWER = {"shipping_address": ElicitationResponse(action="decline")}
S = ManagedInputStatus


def paused(
    execution_store: SqlExecutionStore, clock: ManualClock, *, resumable: bool
) -> tuple[str, str, ManagedInputLease]:
    """A claimed execution waiting on one pending round with a deadline TIMEOUT away."""
    return handover.paused(execution_store, clock, resumable=resumable, deadline=clock() + TIMEOUT)


def listed(store: SqlManagedInputStore, execution_id: str, status: S) -> list[str]:
    return [
        r.round_id
        for r in store.list_rounds(execution_id=execution_id, statuses=[status], as_read=True)
    ]


def test_a_round_past_its_deadline_reads_failed_as_respond_refuses_it(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, _ = paused(execution_store, clock, resumable=False)
    assert store.get_round(round_id, as_read=True).status is S.PENDING
    clock.advance(TIMEOUT.total_seconds())  # the deadline itself: Respond refuses
    with pytest.raises(OperationTimeout):
        store.submit_responses(round_id, ANSWER, idempotency_key="late")
    read = store.get_round(round_id, as_read=True)
    assert read.status is S.FAILED
    assert (read.failure_code, read.failed_at) == ("operation_timeout", read.pending.deadline)
    assert store.get_round(round_id).status is S.PENDING  # as stored: its worker's to write
    assert listed(store, execution_id, S.PENDING) == []
    assert listed(store, execution_id, S.FAILED) == [round_id]
    everything = store.list_rounds(execution_id=execution_id, as_read=True)
    assert [r.status for r in everything] == [S.FAILED]


@pytest.mark.parametrize("answered", [False, True])
def test_a_round_whose_worker_is_gone_reads_failed_as_respond_refuses_it(
    execution_store: SqlExecutionStore,
    store: SqlManagedInputStore,
    clock: ManualClock,
    answered: bool,
) -> None:
    execution_id, round_id, _ = paused(execution_store, clock, resumable=False)
    if answered:
        store.submit_responses(round_id, ANSWER, idempotency_key="k")
    clock.advance(LEASE.total_seconds())
    read = store.get_round(round_id, as_read=True)
    assert (read.status, read.failure_code) == (S.FAILED, "recovery_unavailable")
    assert read.lease is not None and read.failed_at == read.lease.expires_at
    with pytest.raises(ManagedInputRecoveryError):
        store.submit_responses(round_id, ANSWER, idempotency_key="other")
    if answered:  # a replay tells what became of the answer
        replay = store.submit_responses_detailed(round_id, ANSWER, idempotency_key="k")
        assert replay.replayed and replay.status is S.FAILED
    status = S.RESPONSE_VALIDATED if answered else S.PENDING
    assert listed(store, execution_id, status) == []
    assert listed(store, execution_id, S.FAILED) == [round_id]
    # Recovery writes what was read, and only once.
    assert recover_expired(execution_store) == [execution_id]
    stored = store.get_round(round_id)
    assert (stored.status, stored.failure_code) == (S.FAILED, "recovery_unavailable")
    assert not execution_store.recover_expired(execution_id)
    assert recover_expired(execution_store) == []


def test_a_resumable_round_outlives_its_worker_but_not_its_deadline(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = paused(execution_store, clock, resumable=True)
    assert execution_store.release(execution_id, lease)
    assert execution_store.released_past_deadline() == []
    assert execution_store.next_due(clock()) == clock() + TIMEOUT
    clock.advance(TIMEOUT.total_seconds() - 1)
    assert store.get_round(round_id, as_read=True).status is S.PENDING
    clock.advance(1)
    assert store.get_round(round_id, as_read=True).failure_code == "operation_timeout"
    with pytest.raises(OperationTimeout):
        store.submit_responses(round_id, ANSWER, idempotency_key="late")
    assert execution_store.released_past_deadline() == [execution_id]
    assert execution_store.next_due(clock()) is None


def test_the_sweep_expires_a_released_round_as_its_worker_would(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = paused(execution_store, clock, resumable=True)
    before = OperationResult(
        logical_operation_id="op-reserve",
        server="shipping",
        operation_kind="tool",
        operation_name="reserve",
        ok=True,
        result={"content": []},
    )
    execution_store.record_operation(execution_id, lease, before)
    assert execution_store.release(execution_id, lease)
    seq = execution_store.last_event_seq()
    assert execution_store.expire_released(execution_id, owner_id="s", lease_duration=LEASE) is None
    clock.advance(TIMEOUT.total_seconds())

    expired = execution_store.expire_released(execution_id, owner_id="s", lease_duration=LEASE)
    assert expired is not None
    expired_round, result = expired
    assert expired_round == round_id
    assert (result.outcome, result.failure_code) == (ExecutionOutcome.FAILED, "operation_timeout")
    assert [op.logical_operation_id for op in result.operations] == ["op-reserve", "op-0"]
    assert [op.ok for op in result.operations] == [True, False]
    assert result.failure_message == f"round {round_id} expired at its deadline {clock()}"
    stored = store.get_round(round_id)
    assert (stored.status, stored.failure_code) == (S.FAILED, "operation_timeout")
    state = execution_store.get_state(execution_id)
    assert state.lifecycle is ExecutionStatus.FINISHED
    assert execution_store.get_result(execution_id) == result
    events = execution_store.read_events(after_seq=seq)
    assert [(e.kind, e.status) for e in events] == [
        (EventKind.ROUND_LEFT_PENDING, "failed"),
        (EventKind.EXECUTION_FINISHED, "failed"),
    ]
    # Once: a second sweep, or another replica's, finds nothing to do.
    assert execution_store.expire_released(execution_id, owner_id="t", lease_duration=LEASE) is None
    assert execution_store.released_past_deadline() == []


def test_the_sweep_leaves_a_released_round_a_worker_claimed(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    parked_id, parked_round, lease = paused(execution_store, clock, resumable=True)
    clock.advance(1)
    answered_id, answered_round, other = paused(execution_store, clock, resumable=True)
    store.submit_responses(answered_round, ANSWER, idempotency_key="k")
    assert execution_store.release(parked_id, lease)
    assert execution_store.release(answered_id, other)
    # A released round waiting for its answer stays parked; an answered one is claimed.
    claim = execution_store.claim_next(owner_id="next", lease_duration=LEASE)
    assert claim is not None and claim.execution_id == answered_id
    assert execution_store.claim_next(owner_id="next", lease_duration=LEASE) is None
    clock.advance(TIMEOUT.total_seconds())
    # The claimed one is its worker's now (to deliver, or to expire): the sweep leaves it.
    assert execution_store.expire_released(answered_id, owner_id="s", lease_duration=LEASE) is None
    assert store.get_round(answered_round, as_read=True).status is S.RESPONSE_VALIDATED
    # The parked one, past its deadline and still released, is the sweep's.
    expired = execution_store.expire_released(parked_id, owner_id="s", lease_duration=LEASE)
    assert expired is not None and expired[0] == parked_round
    assert store.get_round(parked_round).status is S.FAILED


def test_next_due_is_the_earliest_deadline_or_lease_expiry(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    start = clock()
    assert execution_store.next_due(start) is None
    paused(execution_store, clock, resumable=False)
    assert execution_store.next_due(start) == start + TIMEOUT
    assert execution_store.next_due(start + TIMEOUT) == start + LEASE
    assert execution_store.next_due(start + LEASE) is None


def test_the_status_filter_agrees_with_the_rows_as_read(
    execution_store: SqlExecutionStore, store: SqlManagedInputStore, clock: ManualClock
) -> None:
    """Every open status x resumable or not x lease lapsed or not x deadline passed
    or not: ListRounds' SQL filter (`status_in`) selects exactly the rounds whose
    status `as_read` (Python) reports."""
    for status in (S.PENDING, S.RESPONSE_VALIDATED, S.DELIVERY_STARTED, S.DELIVERED):
        for resumable in (False, True):
            for lease_seconds in (5, 60):
                for deadline_seconds in (5, 60):
                    execution_store.create_execution({"t": 1}, human_input="managed")
                    claimed = execution_store.claim_next(
                        owner_id="w", lease_duration=timedelta(seconds=lease_seconds)
                    )
                    assert claimed is not None
                    round_id = store.create_round(
                        make_round(
                            claimed.execution_id,
                            clock,
                            deadline=clock() + timedelta(seconds=deadline_seconds),
                        ),
                        lease=claimed.lease,
                        harness_resume_token="{}" if resumable else None,
                    ).round_id
                    if status is not S.PENDING:
                        store.submit_responses(round_id, ANSWER, idempotency_key="k")
                    if status in (S.DELIVERY_STARTED, S.DELIVERED):
                        store.start_delivery(round_id, claimed.lease)
                    if status is S.DELIVERED:
                        store.mark_delivered(round_id, claimed.lease)
    clock.advance(10)
    read = store.list_rounds(as_read=True)
    assert len(read) == 32
    assert {r.status for r in read} > {S.FAILED}  # some overdue, some not
    for status in S:
        selected = {r.round_id for r in store.list_rounds(statuses=[status], as_read=True)}
        assert selected == {r.round_id for r in read if r.status is status}, status
