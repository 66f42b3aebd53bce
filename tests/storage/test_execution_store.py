"""Contract suite of the execution store: queue, leases, finish, cancel, recovery."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.errors import (
    ConflictKind,
    ExecutionNotFoundError,
    ManagedInputConflict,
    ManagedInputRecoveryError,
)
from m3grpc.storage import (
    RECOVERY_FAILURE_CODE,
    EphemeralExecutionStore,
    EventKind,
    SqlExecutionStore,
    SQLiteExecutionStore,
)
from m3grpc.storage.engine import SQLITE_CACHE_KIB, write_transaction
from m3grpc.storage.events import append_event
from m3grpc.storage.managed_input import RoundSettle
from m3grpc.storage.schema import executions, rounds
from m3grpc.types import (
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionResult,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
    OperationResult,
)
from tests.storage.conftest import ACCEPT, ManualClock, make_lease, make_round, new_execution

LEASE = timedelta(seconds=30)


def test_create_is_queued_and_idempotent_by_request_id(execution_store: SqlExecutionStore) -> None:
    spec = {"prompt": "book it", "tools": ["shipping:book_shipment"]}
    first = execution_store.create_execution(spec, human_input="managed", request_id="req-1")
    assert first.created and first.state.lifecycle is ExecutionStatus.QUEUED
    assert first.state.human_input == "managed"
    again = execution_store.create_execution(dict(spec), human_input="managed", request_id="req-1")
    assert not again.created and again.state == first.state
    with pytest.raises(ManagedInputConflict) as caught:
        execution_store.create_execution(
            {"prompt": "other"}, human_input="managed", request_id="req-1"
        )
    assert caught.value.conflict_kind is ConflictKind.REQUEST_ID_REUSED
    other = execution_store.create_execution(spec, human_input="managed")
    assert other.state.execution_id != first.state.execution_id
    claimed = execution_store.claim_next(owner_id="w1", lease_duration=LEASE)
    assert claimed is not None and claimed.spec == spec  # both executions hold `spec`


def test_a_named_binding_is_digested_by_its_name(execution_store: SqlExecutionStore) -> None:
    # Over gRPC the caller names the binding and the service stores its configuration:
    # a retry after the configuration changed (a rotated token) is the same request.
    def spec(token: str, prompt: str = "book it") -> dict[str, object]:
        server = {"transport": "stdio", "name": "shipping", "command": "srv", "env": {"T": token}}
        return {"prompt": prompt, "server": server}

    first = execution_store.create_execution(
        spec("old"), human_input="managed", request_id="req-n", server_name="shipping"
    )
    retry = execution_store.create_execution(
        spec("rotated"), human_input="managed", request_id="req-n", server_name="shipping"
    )
    assert not retry.created and retry.state == first.state
    with pytest.raises(ManagedInputConflict) as caught:
        execution_store.create_execution(
            spec("rotated", "other"),
            human_input="managed",
            request_id="req-n",
            server_name="shipping",
        )
    assert caught.value.conflict_kind is ConflictKind.REQUEST_ID_REUSED
    # A request stored with the digest of its configuration (as before names were
    # digested) is still found by it.
    older = execution_store.create_execution(spec("old"), human_input="managed", request_id="req-o")
    again = execution_store.create_execution(
        spec("old"),
        human_input="managed",
        request_id="req-o",
        server_name="shipping",
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    assert not again.created and again.state == older.state


def test_trace_context_travels_with_the_execution_outside_its_digest(
    execution_store: SqlExecutionStore,
) -> None:
    spec = {"prompt": "book it", "tools": ["shipping:book_shipment"]}
    carrier = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    first = execution_store.create_execution(
        spec, human_input="managed", request_id="req-t", trace_context=carrier
    )
    # A retry from another trace is the same submission, not a request_id conflict.
    retry = execution_store.create_execution(
        spec,
        human_input="managed",
        request_id="req-t",
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    assert not retry.created and retry.state == first.state
    untraced = execution_store.create_execution(spec, human_input="managed")
    assert execution_store.trace_context(first.state.execution_id) == carrier
    assert execution_store.trace_context(untraced.state.execution_id) == {}
    claims = [execution_store.claim_next(owner_id="w1", lease_duration=LEASE) for _ in range(2)]
    by_id = {claim.execution_id: claim for claim in claims if claim is not None}
    # The worker gets the spec as submitted, and the context beside it.
    assert [claim.spec for claim in by_id.values()] == [spec, spec]
    assert by_id[first.state.execution_id].trace_context == carrier
    assert by_id[untraced.state.execution_id].trace_context == {}


def test_unknown_execution(execution_store: SqlExecutionStore) -> None:
    with pytest.raises(ExecutionNotFoundError) as caught:
        execution_store.get_state("exe_missing")
    assert caught.value.metadata == {"execution_id": "exe_missing"}


def test_claim_next_is_fifo_and_exclusive(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    ids = []
    for index in range(3):
        clock.advance(1)
        ids.append(
            execution_store.create_execution({"n": index}, human_input="fail").state.execution_id
        )
    claimed = [execution_store.claim_next(owner_id="w1", lease_duration=LEASE) for _ in range(3)]
    assert [c.execution_id for c in claimed if c] == ids
    assert execution_store.claim_next(owner_id="w2", lease_duration=LEASE) is None
    first = claimed[0]
    assert first is not None and first.spec == {"n": 0} and first.human_input == "fail"
    assert execution_store.get_state(first.execution_id).lifecycle is ExecutionStatus.RUNNING


def test_create_claimed_for_a_worker_in_one_transaction(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    """`claim_for`: the new execution is claimed (claim_next's move) in the transaction
    that creates it; no claim finds it afterwards, and its lease works as a claim's."""
    spec = {"prompt": "book it", "tools": ["shipping:book_shipment"]}
    created = execution_store.create_execution(
        spec,
        human_input="managed",
        request_id="req-claimed",
        trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        claim_for=("w1", LEASE),
    )
    claimed = created.claimed
    assert created.created and claimed is not None
    execution_id = created.state.execution_id
    assert claimed.execution_id == execution_id
    assert claimed.spec == spec and claimed.human_input == "managed"
    assert claimed.trace_context == {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
    assert claimed.resumed_round_id is None and not claimed.more_claimable
    assert claimed.lease.owner_id == "w1" and claimed.lease.expires_at == clock() + LEASE
    assert created.state.lifecycle is ExecutionStatus.RUNNING
    assert execution_store.get_state(execution_id).lifecycle is ExecutionStatus.RUNNING
    assert execution_store.claim_next(owner_id="w2", lease_duration=LEASE) is None
    # A replay of the request_id returns the execution as it is, claiming nothing.
    again = execution_store.create_execution(
        spec, human_input="managed", request_id="req-claimed", claim_for=("w2", LEASE)
    )
    assert not again.created and again.claimed is None
    assert again.state.execution_id == execution_id
    # The lease is the worker's: it renews and finishes the execution.
    clock.advance(20)
    lease, cancel = execution_store.renew_execution(
        execution_id, claimed.lease, lease_duration=LEASE
    )
    assert not cancel and lease.expires_at == clock() + LEASE
    result = ExecutionResult(
        execution_id=execution_id,
        outcome=ExecutionOutcome.SUCCEEDED,
        operations=(),
        finished_at=clock(),
    )
    state = execution_store.finish(execution_id, lease, result)
    assert state.lifecycle is ExecutionStatus.FINISHED


def test_renew_and_finish_under_lease(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = execution_store.create_execution({}, human_input="managed").state.execution_id
    claimed = execution_store.claim_next(owner_id="w1", lease_duration=LEASE)
    assert claimed is not None
    clock.advance(20)
    lease, cancel = execution_store.renew_execution(
        execution_id, claimed.lease, lease_duration=LEASE
    )
    assert not cancel and lease.expires_at == clock() + LEASE
    result = ExecutionResult(
        execution_id=execution_id,
        outcome=ExecutionOutcome.SUCCEEDED,
        operations=(
            OperationResult(
                logical_operation_id="op-0",
                server="s",
                operation_kind="tool",
                operation_name="t",
                ok=True,
                result={"text": "done"},
            ),
        ),
        finished_at=clock(),
    )
    with pytest.raises(ManagedInputConflict):  # a stale lease token
        execution_store.finish(execution_id, lease.model_copy(update={"lease_token": "x"}), result)
    state = execution_store.finish(execution_id, lease, result)
    assert state.lifecycle is ExecutionStatus.FINISHED
    assert state.outcome is ExecutionOutcome.SUCCEEDED and state.finished_at == clock()
    assert execution_store.get_result(execution_id) == result
    with pytest.raises(ManagedInputConflict):  # finished once; the lease is gone
        execution_store.finish(execution_id, lease, result)
    events = execution_store.read_events(after_seq=0, execution_id=execution_id)
    assert [e.kind for e in events] == [EventKind.EXECUTION_FINISHED]


def test_cancel_queued_finishes_at_once_running_sets_flag(
    execution_store: SqlExecutionStore,
) -> None:
    queued = execution_store.create_execution({"a": 1}, human_input="fail").state.execution_id
    state = execution_store.request_cancel(queued)
    assert state.lifecycle is ExecutionStatus.FINISHED
    assert state.outcome is ExecutionOutcome.CANCELLED
    running = execution_store.create_execution({"a": 2}, human_input="fail").state.execution_id
    claimed = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    assert claimed is not None and claimed.execution_id == running
    assert execution_store.request_cancel(running).lifecycle is ExecutionStatus.RUNNING
    _, cancel = execution_store.renew_execution(running, claimed.lease, lease_duration=LEASE)
    assert cancel
    # Cancelling a finished execution changes nothing.
    assert execution_store.request_cancel(queued) == execution_store.get_state(queued)


def test_recovery_fails_expired_execution_and_its_rounds(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = execution_store.create_execution({}, human_input="managed").state.execution_id
    claimed = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    assert claimed is not None
    rounds = execution_store.managed_input_store
    pending = make_round(execution_id, clock)
    rounds.create_round(pending, lease=claimed.lease)
    with pytest.raises(ManagedInputRecoveryError):
        execution_store.fail_recovery(execution_id)
    assert execution_store.expired_execution_ids() == []
    clock.advance(31)
    assert execution_store.expired_execution_ids() == [execution_id]
    state = execution_store.fail_recovery(execution_id)
    assert state.outcome is ExecutionOutcome.FAILED
    assert state.failure_code == RECOVERY_FAILURE_CODE
    record = rounds.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.FAILED
    assert record.failure_code == RECOVERY_FAILURE_CODE
    assert execution_store.expired_execution_ids() == []
    kinds = [
        (e.kind, e.status)
        for e in execution_store.read_events(after_seq=0, execution_id=execution_id)
    ]
    assert kinds[-2:] == [
        (EventKind.ROUND_LEFT_PENDING, "failed"),
        (EventKind.EXECUTION_FINISHED, "failed"),
    ]


def _operation(logical_operation_id: str, *, ok: bool = True) -> OperationResult:
    return OperationResult(
        logical_operation_id=logical_operation_id,
        server="shipping",
        operation_kind="tool",
        operation_name="book_shipment",
        ok=ok,
        result={"content": [{"type": "text", "text": "booked"}]} if ok else None,
        failure_code=None if ok else "connection_closed",
        failure_message=None if ok else "gone",
    )


def _responded_round(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> tuple[str, str, ManagedInputLease]:
    """A claimed execution whose round has a validated response."""
    execution_id = execution_store.create_execution({}, human_input="managed").state.execution_id
    claimed = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    assert claimed is not None
    rounds_store = execution_store.managed_input_store
    pending = make_round(execution_id, clock)
    rounds_store.create_round(pending, lease=claimed.lease)
    rounds_store.submit_responses(
        pending.round_id,
        {
            "shipping_address": ElicitationResponse(
                action="accept", content={"street": "1 Main", "city": "Pune"}
            )
        },
        idempotency_key="k",
    )
    return execution_id, pending.round_id, claimed.lease


def _answered_round(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> tuple[str, str, ManagedInputLease]:
    """A claimed execution whose round was answered and delivered."""
    execution_id, round_id, lease = _responded_round(execution_store, clock)
    execution_store.managed_input_store.start_delivery(round_id, lease)
    execution_store.managed_input_store.mark_delivered(round_id, lease)
    return execution_id, round_id, lease


def test_recovery_keeps_the_results_of_a_completed_execution(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    # The round's resolve stores the last operation's result: every operation
    # completed, so recovery finishes with the outcome they earned.
    execution_id, round_id, lease = _answered_round(execution_store, clock)
    execution_store.managed_input_store.resolve(
        round_id, lease, operation=_operation("op-0"), last=True
    )
    clock.advance(31)
    state = execution_store.fail_recovery(execution_id)
    assert state.outcome is ExecutionOutcome.SUCCEEDED
    assert state.failure_code is None
    result = execution_store.get_result(execution_id)
    assert result is not None
    assert result.operations == (_operation("op-0"),)


@pytest.mark.parametrize("delivered", [True, False])
def test_finish_settling_resolves_the_last_round_and_finishes_in_one_commit(
    execution_store: SqlExecutionStore, clock: ManualClock, delivered: bool
) -> None:
    """The last round's resolve (marked delivered first when it was not yet) and the
    finish commit together: one commit, each status change with its event."""
    execution_id, round_id, lease = _responded_round(execution_store, clock)
    rounds_store = execution_store.managed_input_store
    rounds_store.start_delivery(round_id, lease)
    if delivered:
        rounds_store.mark_delivered(round_id, lease)
    commits: list[None] = []
    execution_store.add_commit_listener(lambda: commits.append(None))
    settle = RoundSettle(
        execution_id=execution_id,
        round_id=round_id,
        operation=_operation("op-0"),
        mark_delivered=not delivered,
    )
    before = execution_store.last_event_seq()
    state, resolved = execution_store.finish_settling(
        execution_id, lease, _succeeded(execution_id, clock), settle
    )
    assert resolved and len(commits) == 1
    assert state.lifecycle is ExecutionStatus.FINISHED
    assert state.outcome is ExecutionOutcome.SUCCEEDED
    record = rounds_store.get_round(round_id)
    assert record.status is ManagedInputStatus.RESOLVED and record.delivered_at is not None
    kinds = [
        (event.kind, event.status)
        for event in execution_store.read_events(after_seq=before, execution_id=execution_id)
    ]
    assert kinds == [
        *([] if delivered else [(EventKind.ROUND_CHANGED, "delivered")]),
        (EventKind.ROUND_CHANGED, "resolved"),
        (EventKind.EXECUTION_FINISHED, "succeeded"),
    ]
    # What the operation returned is stored as resolve stores it.
    assert execution_store.operation_results(execution_id) == [_operation("op-0")]


def test_finish_settling_a_round_resolve_refuses_finishes_and_keeps_the_operation(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    """A round resolve may not move (here: answered, never delivering) is not
    resolved: the execution finishes all the same, its operation stored, and the
    round fails with the execution as any open round does."""
    execution_id, round_id, lease = _responded_round(execution_store, clock)
    settle = RoundSettle(execution_id=execution_id, round_id=round_id, operation=_operation("op-0"))
    state, resolved = execution_store.finish_settling(
        execution_id, lease, _succeeded(execution_id, clock), settle
    )
    assert not resolved and state.lifecycle is ExecutionStatus.FINISHED
    record = execution_store.managed_input_store.get_round(round_id)
    assert record.status is ManagedInputStatus.FAILED
    assert execution_store.operation_results(execution_id) == [_operation("op-0")]
    # Only the lease holder settles: a stale lease changes nothing.
    other_id, other_round, _lease = _responded_round(execution_store, clock)
    stale = make_lease(clock, owner_id="w")
    with pytest.raises(ManagedInputConflict):
        execution_store.finish_settling(
            other_id,
            stale,
            _succeeded(other_id, clock),
            RoundSettle(execution_id=other_id, round_id=other_round, operation=_operation("op-0")),
        )
    assert execution_store.get_state(other_id).lifecycle is not ExecutionStatus.FINISHED


@pytest.mark.parametrize("mark_delivered", [False, True])
def test_an_answer_starts_its_delivery_in_its_commit_for_the_waiting_worker(
    execution_store: SqlExecutionStore, clock: ManualClock, mark_delivered: bool
) -> None:
    """`start_delivery`: the answer is stored, then the worker's start_delivery (and
    mark_delivered) move runs in the same commit; the submission reports the answer."""
    execution_id = execution_store.create_execution({}, human_input="managed").state.execution_id
    claimed = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    assert claimed is not None
    rounds_store = execution_store.managed_input_store
    pending = make_round(execution_id, clock)
    rounds_store.create_round(pending, lease=claimed.lease)
    commits: list[None] = []
    execution_store.add_commit_listener(lambda: commits.append(None))
    before = execution_store.last_event_seq()
    submission = rounds_store.submit_responses_detailed(
        pending.round_id,
        ACCEPT,
        idempotency_key="k",
        start_delivery=(claimed.lease, mark_delivered),
    )
    assert len(commits) == 1
    assert submission.status is ManagedInputStatus.RESPONSE_VALIDATED and not submission.replayed
    started = submission.started_record
    target = ManagedInputStatus.DELIVERED if mark_delivered else ManagedInputStatus.DELIVERY_STARTED
    assert started is not None and started.status is target
    assert started.responses == ACCEPT and started.delivery_attempts == 1
    assert rounds_store.get_round(pending.round_id).status is target
    assert execution_store.get_state(execution_id).lifecycle is ExecutionStatus.RUNNING
    statuses = [e.status for e in execution_store.read_events(after_seq=before)]
    assert statuses == ["response_validated", "delivery_started"] + (
        ["delivered"] if mark_delivered else []
    )
    # A replay reports the round as it is now, and starts nothing again.
    again = rounds_store.submit_responses_detailed(
        pending.round_id, ACCEPT, idempotency_key="k", start_delivery=(claimed.lease, False)
    )
    assert again.replayed and again.started_record is None and again.status is target


def test_an_answer_whose_delivery_may_not_start_is_stored_all_the_same(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    """A stale worker lease refuses the delivery's start, not the answer."""
    execution_id = execution_store.create_execution({}, human_input="managed").state.execution_id
    claimed = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    assert claimed is not None
    rounds_store = execution_store.managed_input_store
    pending = make_round(execution_id, clock)
    rounds_store.create_round(pending, lease=claimed.lease)
    submission = rounds_store.submit_responses_detailed(
        pending.round_id,
        ACCEPT,
        idempotency_key="k",
        start_delivery=(make_lease(clock, owner_id="w"), False),
    )
    assert submission.status is ManagedInputStatus.RESPONSE_VALIDATED
    assert submission.started_record is None
    record = rounds_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.RESPONSE_VALIDATED and record.responses == ACCEPT
    # The worker starts it itself, as before.
    assert rounds_store.start_delivery(pending.round_id, claimed.lease).delivery_attempts == 1


def _succeeded(execution_id: str, clock: ManualClock) -> ExecutionResult:
    return ExecutionResult(
        execution_id=execution_id,
        outcome=ExecutionOutcome.SUCCEEDED,
        operations=(_operation("op-0"),),
        finished_at=clock(),
    )


def test_recovery_keeps_finished_results_of_an_unfinished_execution(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = _answered_round(execution_store, clock)
    execution_store.managed_input_store.resolve(round_id, lease, operation=_operation("op-0"))
    execution_store.record_operation(execution_id, lease, _operation("op-1"))
    execution_store.record_operation(execution_id, lease, _operation("op-1"))  # once only
    clock.advance(31)
    state = execution_store.fail_recovery(execution_id)
    assert state.outcome is ExecutionOutcome.FAILED
    assert state.failure_code == RECOVERY_FAILURE_CODE
    result = execution_store.get_result(execution_id)
    assert result is not None
    assert result.operations == (_operation("op-0"), _operation("op-1"))


def test_a_failed_last_operation_fails_the_recovered_execution_with_its_code(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id, round_id, lease = _answered_round(execution_store, clock)
    failed = _operation("op-0", ok=False)
    record = execution_store.managed_input_store.fail(
        round_id,
        lease,
        failure_code="connection_closed",
        failure_message="gone",
        operation=failed,
        last=True,
    )
    assert record.status is ManagedInputStatus.FAILED
    clock.advance(31)
    state = execution_store.fail_recovery(execution_id)
    assert (state.outcome, state.failure_code) == (ExecutionOutcome.FAILED, "connection_closed")
    result = execution_store.get_result(execution_id)
    assert result is not None and result.operations == (failed,)


def _delivering_round(
    execution_store: SqlExecutionStore, clock: ManualClock, *, delivered: bool
) -> tuple[str, str, ManagedInputLease]:
    """A claimed execution whose round's answer is being delivered (`delivered`:
    a legacy answer, recorded DELIVERED with the start of its delivery)."""
    execution_id, round_id, lease = _responded_round(execution_store, clock)
    rounds_store = execution_store.managed_input_store
    record = rounds_store.start_delivery(round_id, lease, mark_delivered=delivered)
    expected = ManagedInputStatus.DELIVERED if delivered else ManagedInputStatus.DELIVERY_STARTED
    assert record.status is expected and record.delivery_attempts == 1
    assert record.delivery_started_at == clock()
    assert (record.delivered_at is not None) is delivered
    return execution_id, round_id, lease


@pytest.mark.parametrize("delivered", [True, False], ids=["legacy", "retry-reply"])
def test_a_legacy_answer_is_delivered_with_the_start_of_its_delivery(
    execution_store: SqlExecutionStore, clock: ManualClock, delivered: bool
) -> None:
    execution_id, round_id, lease = _delivering_round(execution_store, clock, delivered=delivered)
    rounds_store = execution_store.managed_input_store
    if not delivered:
        rounds_store.mark_delivered(round_id, lease)
    record = rounds_store.resolve(round_id, lease, operation=_operation("op-0"), last=True)
    assert record.status is ManagedInputStatus.RESOLVED and record.delivered_at == clock()
    events = execution_store.read_events(after_seq=0, execution_id=execution_id)
    # Both steps are recorded, whether or not they committed together.
    assert [(e.kind, e.status) for e in events] == [
        (EventKind.ROUND_PENDING, "pending"),
        (EventKind.ROUND_LEFT_PENDING, "response_validated"),
        (EventKind.ROUND_CHANGED, "delivery_started"),
        (EventKind.ROUND_CHANGED, "delivered"),
        (EventKind.ROUND_CHANGED, "resolved"),
    ]


def test_a_claim_tells_whether_more_work_is_claimable(
    execution_store: SqlExecutionStore,
) -> None:
    for n in range(2):
        execution_store.create_execution({"n": n}, human_input="fail")
    first = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    second = execution_store.claim_next(owner_id="w", lease_duration=LEASE)
    assert first is not None and first.more_claimable
    assert second is not None and not second.more_claimable
    assert execution_store.claim_next(owner_id="w", lease_duration=LEASE) is None


def test_sqlite_durability_settings(tmp_path: Path) -> None:
    path = tmp_path / "executions.sqlite"
    store = SQLiteExecutionStore(path)
    try:
        store.create_execution({}, human_input="fail")
        with store._engine.connect() as conn:  # the store's own connection settings
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
            # A small page cache per pooled connection (memory with many paused executions).
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -SQLITE_CACHE_KIB
    finally:
        store.close()
    # WAL is a property of the file, seen by any other client.
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_foreign_keys_enforced(tmp_path: Path, clock: ManualClock) -> None:
    store = SQLiteExecutionStore(tmp_path / "fk.sqlite", clock=clock)
    execution_id = store.create_execution({}, human_input="managed").state.execution_id
    pending = make_round(execution_id, clock)
    store.managed_input_store.create_round(pending, lease=make_lease(clock))
    try:
        with store._engine.begin() as conn:
            # ON DELETE CASCADE only acts when SQLite enforces foreign keys.
            conn.execute(sa.delete(executions).where(executions.c.execution_id == execution_id))
            assert conn.execute(sa.select(sa.func.count()).select_from(rounds)).scalar() == 0
    finally:
        store.close()


def test_ephemeral_store_is_not_persistent_and_cleans_up() -> None:
    store = EphemeralExecutionStore()
    directory = store._directory
    assert store.persistent is False and SQLiteExecutionStore.persistent is True
    store.create_execution({}, human_input="fail")
    store.close()
    assert not os.path.exists(directory)


def test_events_listener_hears_exactly_the_commits_that_appended_events(
    execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    # WatchPending's reader of the log wakes on these calls: one missed would leave a
    # subscriber waiting for the poll, one too many costs a read that finds nothing.
    commits: list[int] = []
    appended: list[int] = []
    execution_store.add_commit_listener(lambda: commits.append(execution_store.last_event_seq()))
    execution_store.add_events_listener(lambda: appended.append(execution_store.last_event_seq()))
    rounds_store = execution_store.managed_input_store

    execution_id = new_execution(execution_store)  # queued: no event
    claimed = execution_store.claim_next(owner_id="worker-a", lease_duration=LEASE)
    assert claimed is not None
    assert len(commits) == 2 and appended == []

    created = rounds_store.create_round(  # round_pending: the listener sees it committed
        make_round(execution_id, clock), lease=make_lease(clock), round_limit=3
    )
    assert len(commits) == 3 and appended == [execution_store.last_event_seq()] != [0]

    # A transaction that appended an event and rolled back calls nothing, and leaves
    # nothing behind for the next transaction on its connection.
    with pytest.raises(RuntimeError), write_transaction(rounds_store.engine) as conn:
        append_event(conn, EventKind.ROUND_CHANGED, execution_id=execution_id, created_at=clock())
        raise RuntimeError("rolled back")
    for _ in range(3):
        with write_transaction(rounds_store.engine) as conn:
            conn.execute(sa.text("SELECT 1"))
    assert len(commits) == 6 and len(appended) == 1

    rounds_store.submit_responses(created.round_id, ACCEPT, idempotency_key="k")
    assert len(commits) == 7 and len(appended) == 2
    assert appended[-1] == execution_store.last_event_seq() > appended[0]
