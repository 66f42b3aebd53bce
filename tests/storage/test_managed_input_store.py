"""Contract suite of ManagedInputStore: every transition, every rejection, reopen.

Runs against every backend of the `database` fixture (SQLite file; PostgreSQL
when M3_TEST_POSTGRES_URL is set).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from m3grpc.errors import (
    ConflictKind,
    M3Error,
    ManagedInputConflict,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    ManagedInputValidationError,
    OperationTimeout,
    RoundNotFoundError,
)
from m3grpc.storage import (
    RECOVERY_FAILURE_CODE,
    ManagedInputStore,
    SqlExecutionStore,
    SQLiteManagedInputStore,
    SqlManagedInputStore,
)
from m3grpc.types import (
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionResult,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
)
from tests.storage.conftest import ACCEPT, ManualClock, make_lease, make_round, new_execution


def _pending(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    **kwargs: object,
) -> tuple[str, ManagedInputLease]:
    lease = make_lease(clock)
    record = store.create_round(
        make_round(new_execution(execution_store), clock, **kwargs),  # type: ignore[arg-type]
        lease=lease,
        round_limit=3,
    )
    return record.round_id, lease


def _delivered(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> tuple[str, ManagedInputLease]:
    round_id, lease = _pending(store, execution_store, clock)
    store.submit_responses(round_id, ACCEPT, idempotency_key="key-1")
    store.start_delivery(round_id, lease)
    store.mark_delivered(round_id, lease)
    return round_id, lease


def test_store_satisfies_protocol(store: SqlManagedInputStore) -> None:
    assert isinstance(store, ManagedInputStore)


# -- create_round -------------------------------------------------------------


def test_create_round_persists_the_pending_round(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = new_execution(execution_store)
    lease = make_lease(clock)
    deadline = clock() + timedelta(minutes=5)
    pending = make_round(execution_id, clock, with_url=True, deadline=deadline)
    pending = pending.model_copy(update={"request_state": "opaque-state"})
    record = store.create_round(
        pending,
        lease=lease,
        round_index=1,
        round_limit=4,
        operation_parameters={"item": "book"},
        harness_session_id="session-1",
        turn_metadata={"turn": 2},
    )
    assert record.status is ManagedInputStatus.PENDING
    assert record.pending == pending
    assert record.pending.deadline == deadline
    assert record.pending.request_state == "opaque-state"
    assert (record.round_index, record.round_limit) == (1, 4)
    assert record.lease == lease
    assert record.operation_parameters == {"item": "book"}
    assert record.harness_session_id == "session-1"
    assert record.turn_metadata == {"turn": 2}
    assert record.delivery_attempts == 0
    assert record.responses is None and record.idempotency_key is None
    assert store.get_round(pending.round_id) == record


def test_operation_parameters_default_to_empty_mapping(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    assert store.get_round(round_id).operation_parameters == {}


def test_pending_round_never_exposes_the_lease(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    dumped = store.get_round(round_id).pending.model_dump_json()
    assert lease.lease_token not in dumped and lease.owner_id not in dumped


@pytest.mark.parametrize(("round_index", "round_limit"), [(3, 3), (-1, 3), (0, 0), (5, 2)])
def test_create_round_rejects_round_index_outside_limit(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    round_index: int,
    round_limit: int,
) -> None:
    pending = make_round(new_execution(execution_store), clock)
    with pytest.raises(ManagedInputValidationError) as caught:
        store.create_round(
            pending, lease=make_lease(clock), round_index=round_index, round_limit=round_limit
        )
    assert caught.value.field_violations
    with pytest.raises(RoundNotFoundError):
        store.get_round(pending.round_id)


def test_create_round_rejects_unknown_execution(
    store: SqlManagedInputStore, clock: ManualClock
) -> None:
    with pytest.raises(ManagedInputValidationError) as caught:
        store.create_round(make_round("exe_missing", clock), lease=make_lease(clock))
    assert caught.value.field_violations[0].field == "pending.execution_id"


def test_create_round_rejects_expired_lease(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    pending = make_round(new_execution(execution_store), clock)
    with pytest.raises(ManagedInputConflict) as caught:
        store.create_round(pending, lease=make_lease(clock, seconds=-1))
    assert caught.value.conflict_kind is ConflictKind.STALE_LEASE


def test_create_round_rejects_duplicates(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = new_execution(execution_store)
    first = make_round(execution_id, clock, round_id="rnd_same")
    store.create_round(first, lease=make_lease(clock))
    with pytest.raises(ManagedInputConflict):
        store.create_round(first, lease=make_lease(clock))
    # Same operation and round_index under another ID is a duplicate too.
    with pytest.raises(ManagedInputConflict):
        store.create_round(make_round(execution_id, clock), lease=make_lease(clock))


def test_create_round_rejects_finished_execution(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = new_execution(execution_store)
    execution_store.request_cancel(execution_id)
    with pytest.raises(ManagedInputStateError):
        store.create_round(make_round(execution_id, clock), lease=make_lease(clock))


# -- reads ----------------------------------------------------------------------


def test_get_round_unknown_and_malformed_ids(store: SqlManagedInputStore) -> None:
    with pytest.raises(RoundNotFoundError) as caught:
        store.get_round("rnd_nope")
    assert isinstance(caught.value, ManagedInputStateError)
    assert caught.value.metadata["round_id"] == "rnd_nope"
    with pytest.raises(ManagedInputValidationError):
        store.get_round("")


def test_list_rounds_filters_and_pages(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = new_execution(execution_store)
    created = []
    for index in range(5):
        clock.advance(1)
        record = store.create_round(
            make_round(execution_id, clock, logical_operation_id=f"op-{index}"),
            lease=make_lease(clock),
        )
        created.append(record.round_id)
    other_round, _ = _pending(store, execution_store, clock)
    store.submit_responses(created[0], ACCEPT, idempotency_key="k")

    mine = store.list_rounds(execution_id=execution_id)
    assert [r.round_id for r in mine] == created
    pending = store.list_rounds(execution_id=execution_id, statuses=[ManagedInputStatus.PENDING])
    assert [r.round_id for r in pending] == created[1:]
    first_page = store.list_rounds(execution_id=execution_id, limit=2)
    last = first_page[-1]
    second_page = store.list_rounds(
        execution_id=execution_id, limit=2, after=(last.pending.created_at, last.round_id)
    )
    assert [r.round_id for r in first_page + second_page] == created[:4]
    assert other_round in {r.round_id for r in store.list_rounds()}


# -- submit_responses -------------------------------------------------------------


def test_submit_responses_validates_and_persists_key(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    record = store.submit_responses(round_id, ACCEPT, idempotency_key="address-1")
    assert record.status is ManagedInputStatus.RESPONSE_VALIDATED
    assert record.responses == ACCEPT
    assert record.idempotency_key == "address-1"
    assert record.response_validated_at == clock()


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_carry_no_content(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    action: str,
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    with pytest.raises(ManagedInputValidationError):
        store.submit_responses(
            round_id,
            {"shipping_address": ElicitationResponse(action=action, content={"street": "x"})},  # type: ignore[arg-type]
            idempotency_key="k",
        )
    assert store.get_round(round_id).status is ManagedInputStatus.PENDING
    record = store.submit_responses(
        round_id,
        {"shipping_address": ElicitationResponse(action=action)},  # type: ignore[arg-type]
        idempotency_key="k",
    )
    assert record.responses is not None
    assert record.responses["shipping_address"].action == action


def _violations(exc: pytest.ExceptionInfo[ManagedInputValidationError]) -> dict[str, str]:
    return {v.field: v.description for v in exc.value.field_violations}


@pytest.mark.parametrize(
    ("responses", "bad_field"),
    [
        ({}, "responses['shipping_address']"),
        ({**ACCEPT, "extra": ElicitationResponse(action="decline")}, "responses['extra']"),
        (
            {"shipping_address": ElicitationResponse(action="accept")},
            "responses['shipping_address'].content",
        ),
        (
            {"shipping_address": ElicitationResponse(action="accept", content={"street": "x"})},
            "responses['shipping_address'].content",
        ),
        (
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "x", "city": "y", "email": "not-an-email"}
                )
            },
            "responses['shipping_address'].content.email",
        ),
        (
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "", "city": "y"}
                )
            },
            "responses['shipping_address'].content.street",
        ),
        ({"shipping_address": {"action": "accept"}}, "responses['shipping_address']"),
        # Text no store keeps (NUL: PostgreSQL) or no JSON carries (a lone surrogate,
        # which the embedded API can pass): refused, never acknowledged then lost.
        (
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "1 Main\x00Street", "city": "y"}
                )
            },
            "responses['shipping_address'].content.street",
        ),
        (
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "1 Main \ud800", "city": "y"}
                )
            },
            "responses['shipping_address'].content.street",
        ),
        (
            {"shipping_address\ud800": ElicitationResponse(action="decline")},
            "responses['shipping_address\\ud800']",
        ),
    ],
    ids=[
        "missing-key",
        "extra-key",
        "accept-without-content",
        "missing-required",
        "bad-email-format",
        "schema-constraint",
        "not-an-ElicitationResponse",
        "nul-in-content",
        "lone-surrogate-in-content",
        "lone-surrogate-in-request-key",
    ],
)
def test_invalid_responses_leave_round_pending(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    responses: dict[str, object],
    bad_field: str,
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    before = store.get_round(round_id)
    events_before = execution_store.last_event_seq()
    with pytest.raises(ManagedInputValidationError) as caught:
        store.submit_responses(round_id, responses, idempotency_key="k")  # type: ignore[arg-type]
    assert bad_field in _violations(caught)
    assert store.get_round(round_id) == before
    assert execution_store.last_event_seq() == events_before
    # The same key can still be used for a valid response afterwards.
    assert store.submit_responses(round_id, ACCEPT, idempotency_key="k").status is (
        ManagedInputStatus.RESPONSE_VALIDATED
    )


def test_url_response_rejects_content_and_accepts_consent(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock, with_url=True)
    bad = {**ACCEPT, "consent": ElicitationResponse(action="accept", content={"ok": True})}
    with pytest.raises(ManagedInputValidationError) as caught:
        store.submit_responses(round_id, bad, idempotency_key="k")
    assert "responses['consent'].content" in _violations(caught)
    good = {**ACCEPT, "consent": ElicitationResponse(action="accept")}
    assert store.submit_responses(round_id, good, idempotency_key="k").responses == good


@pytest.mark.parametrize(("round_id", "key"), [("", "k"), ("rnd", ""), ("rnd", "   ")])
def test_submit_rejects_empty_ids(store: SqlManagedInputStore, round_id: str, key: str) -> None:
    with pytest.raises(ManagedInputValidationError):
        store.submit_responses(round_id, ACCEPT, idempotency_key=key)


@pytest.mark.parametrize(
    ("round_id", "key", "field"),
    [
        ("rnd_\x00", "k", "round_id"),
        ("rnd_\ud800", "k", "round_id"),
        (None, "k\x00", "idempotency_key"),
        (None, "k\udfff", "idempotency_key"),
    ],
    ids=["nul-round-id", "surrogate-round-id", "nul-key", "surrogate-key"],
)
def test_submit_rejects_ids_no_store_keeps(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    round_id: str | None,
    key: str,
    field: str,
) -> None:
    pending_id, _ = _pending(store, execution_store, clock)
    with pytest.raises(ManagedInputValidationError) as caught:
        store.submit_responses(round_id or pending_id, ACCEPT, idempotency_key=key)
    assert field in _violations(caught)
    assert store.get_round(pending_id).status is ManagedInputStatus.PENDING


def test_a_round_whose_execution_is_being_cancelled_takes_no_answer(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    # Cancel only flags an execution a worker holds; until its worker fails the round,
    # an answer would be acknowledged and then never delivered.
    def held_round() -> str:
        execution_id = new_execution(execution_store)
        claimed = execution_store.claim_next(
            owner_id="worker-a", lease_duration=timedelta(minutes=5)
        )
        assert claimed is not None and claimed.execution_id == execution_id
        record = store.create_round(
            make_round(execution_id, clock), lease=make_lease(clock), round_limit=3
        )
        return record.round_id

    answered = held_round()
    store.submit_responses(answered, ACCEPT, idempotency_key="before")
    round_id = held_round()
    for round_ in (answered, round_id):
        state = execution_store.request_cancel(store.get_round(round_).pending.execution_id)
        assert state.lifecycle is not ExecutionStatus.FINISHED  # its worker finishes it
    with pytest.raises(ManagedInputStateError) as caught:
        store.submit_responses(round_id, ACCEPT, idempotency_key="after")
    assert "cancelled" in str(caught.value)
    assert store.get_round(round_id).status is ManagedInputStatus.PENDING
    # An answer taken before the cancel is still answered the same on a retry.
    replay = store.submit_responses_detailed(answered, ACCEPT, idempotency_key="before")
    assert replay.replayed


def test_submit_to_unknown_round(store: SqlManagedInputStore) -> None:
    with pytest.raises(RoundNotFoundError):
        store.submit_responses("rnd_missing", ACCEPT, idempotency_key="k")


def test_submit_checks_the_rounds_execution(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    with pytest.raises(ManagedInputValidationError) as caught:
        store.submit_responses_detailed(
            round_id, ACCEPT, idempotency_key="k", execution_id="exe_other"
        )
    assert caught.value.metadata == {"round_id": round_id, "execution_id": "exe_other"}
    owner = store.get_round(round_id)
    assert owner.status is ManagedInputStatus.PENDING
    done = store.submit_responses_detailed(
        round_id, ACCEPT, idempotency_key="k", execution_id=owner.pending.execution_id
    )
    assert (done.round_id, done.status, done.replayed) == (
        round_id,
        ManagedInputStatus.RESPONSE_VALIDATED,
        False,
    )
    assert done.record == store.get_round(round_id)


def test_idempotent_replay_and_conflict(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    first = store.submit_responses_detailed(round_id, ACCEPT, idempotency_key="k1")
    assert not first.replayed
    clock.advance(5)
    replay = store.submit_responses_detailed(round_id, dict(ACCEPT), idempotency_key="k1")
    assert replay.replayed and replay.record == first.record
    with pytest.raises(ManagedInputConflict) as caught:
        store.submit_responses(
            round_id,
            {"shipping_address": ElicitationResponse(action="decline")},
            idempotency_key="k1",
        )
    assert caught.value.conflict_kind is ConflictKind.IDEMPOTENCY_KEY_REUSED
    with pytest.raises(ManagedInputStateError):
        store.submit_responses(round_id, ACCEPT, idempotency_key="k2")
    assert store.get_round(round_id).responses == ACCEPT


def test_replay_still_answers_after_round_resolved(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _delivered(store, execution_store, clock)
    store.resolve(round_id, lease)
    replay = store.submit_responses_detailed(round_id, ACCEPT, idempotency_key="key-1")
    assert replay.replayed and replay.record.status is ManagedInputStatus.RESOLVED


def test_submit_rejected_when_owner_lease_expired(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    clock.advance(31)
    with pytest.raises(ManagedInputRecoveryError):
        store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    assert store.get_round(round_id).status is ManagedInputStatus.PENDING


def test_submit_rejected_after_deadline(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock, deadline=clock() + timedelta(seconds=10))
    clock.advance(11)
    with pytest.raises(OperationTimeout):
        store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    assert store.get_round(round_id).status is ManagedInputStatus.PENDING


# -- worker transitions -----------------------------------------------------------


def test_full_cycle_timestamps_and_attempts(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    clock.advance(1)
    started = store.start_delivery(round_id, lease)
    assert started.status is ManagedInputStatus.DELIVERY_STARTED
    assert started.delivery_attempts == 1 and started.delivery_started_at == clock()
    retried = store.start_delivery(round_id, lease)
    assert retried.delivery_attempts == 2
    clock.advance(1)
    delivered = store.mark_delivered(round_id, lease)
    assert delivered.status is ManagedInputStatus.DELIVERED and delivered.delivered_at == clock()
    clock.advance(1)
    resolved = store.resolve(round_id, lease)
    assert resolved.status is ManagedInputStatus.RESOLVED and resolved.resolved_at == clock()
    assert resolved.responses == ACCEPT


@pytest.mark.parametrize(
    ("method", "status"),
    [
        ("start_delivery", ManagedInputStatus.PENDING),
        ("mark_delivered", ManagedInputStatus.PENDING),
        ("mark_delivered", ManagedInputStatus.RESPONSE_VALIDATED),
        ("resolve", ManagedInputStatus.RESPONSE_VALIDATED),
        ("resolve", ManagedInputStatus.DELIVERY_STARTED),
        ("start_delivery", ManagedInputStatus.DELIVERED),
    ],
)
def test_out_of_order_transitions_are_state_errors(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    method: str,
    status: ManagedInputStatus,
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    steps = [
        lambda: store.submit_responses(round_id, ACCEPT, idempotency_key="k"),
        lambda: store.start_delivery(round_id, lease),
        lambda: store.mark_delivered(round_id, lease),
    ]
    order = [
        ManagedInputStatus.PENDING,
        ManagedInputStatus.RESPONSE_VALIDATED,
        ManagedInputStatus.DELIVERY_STARTED,
        ManagedInputStatus.DELIVERED,
    ]
    for step in steps[: order.index(status)]:
        step()
    before = store.get_round(round_id)
    with pytest.raises(ManagedInputStateError):
        getattr(store, method)(round_id, lease)
    assert store.get_round(round_id) == before


def _stale_leases(lease: ManagedInputLease, clock: ManualClock) -> dict[str, ManagedInputLease]:
    return {
        "wrong-token": lease.model_copy(update={"lease_token": "forged"}),
        "other-owner": lease.model_copy(update={"owner_id": "worker-b"}),
    }


@pytest.mark.parametrize("stale", ["wrong-token", "other-owner", "expired"])
@pytest.mark.parametrize("method", ["start_delivery", "renew", "fail"])
def test_stale_lease_never_writes(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    stale: str,
    method: str,
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    if stale == "expired":
        used = lease
        clock.advance(31)
    else:
        used = _stale_leases(lease, clock)[stale]
    before = store.get_round(round_id)
    calls = {
        "start_delivery": lambda: store.start_delivery(round_id, used),
        "renew": lambda: store.renew(round_id, used, lease_duration=timedelta(seconds=30)),
        "fail": lambda: store.fail(round_id, used, failure_code="x", failure_message="y"),
    }
    with pytest.raises(ManagedInputConflict) as caught:
        calls[method]()
    assert caught.value.conflict_kind is ConflictKind.STALE_LEASE
    assert store.get_round(round_id) == before


def test_renew_extends_the_lease(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    clock.advance(20)
    renewed = store.renew(round_id, lease, lease_duration=timedelta(seconds=30))
    assert renewed.lease is not None
    assert renewed.lease.expires_at == clock() + timedelta(seconds=30)
    assert renewed.lease.lease_token == lease.lease_token
    clock.advance(20)  # past the original expiry, within the renewed one
    store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    assert store.start_delivery(round_id, renewed.lease).status is (
        ManagedInputStatus.DELIVERY_STARTED
    )


def test_claim_round_reissues_token_to_live_owner_only(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    with pytest.raises(ManagedInputConflict):
        store.claim_round(round_id, owner_id="worker-b", lease_duration=timedelta(seconds=30))
    claimed = store.claim_round(
        round_id, owner_id=lease.owner_id, lease_duration=timedelta(seconds=30)
    )
    assert claimed.lease is not None and claimed.lease.lease_token != lease.lease_token
    # The old token is now stale.
    store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    with pytest.raises(ManagedInputConflict):
        store.start_delivery(round_id, lease)
    store.start_delivery(round_id, claimed.lease)


def test_claim_round_after_expiry_is_a_recovery_error(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    clock.advance(31)
    with pytest.raises(ManagedInputRecoveryError):
        store.claim_round(round_id, owner_id=lease.owner_id, lease_duration=timedelta(seconds=30))


@pytest.mark.parametrize(
    "status",
    [
        ManagedInputStatus.PENDING,
        ManagedInputStatus.RESPONSE_VALIDATED,
        ManagedInputStatus.DELIVERY_STARTED,
        ManagedInputStatus.DELIVERED,
    ],
)
def test_fail_from_every_non_terminal_state(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    status: ManagedInputStatus,
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    if status is not ManagedInputStatus.PENDING:
        store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    if status in (ManagedInputStatus.DELIVERY_STARTED, ManagedInputStatus.DELIVERED):
        store.start_delivery(round_id, lease)
    if status is ManagedInputStatus.DELIVERED:
        store.mark_delivered(round_id, lease)
    failed = store.fail(round_id, lease, failure_code="operation_timeout", failure_message="late")
    assert failed.status is ManagedInputStatus.FAILED
    assert (failed.failure_code, failed.failure_message) == ("operation_timeout", "late")
    assert failed.failed_at == clock()


def test_fail_with_expected_statuses(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, lease = _pending(store, execution_store, clock)
    store.submit_responses(round_id, ACCEPT, idempotency_key="k")
    with pytest.raises(ManagedInputStateError):
        store.fail(
            round_id,
            lease,
            failure_code="operation_timeout",
            failure_message="t",
            expected_statuses=[ManagedInputStatus.PENDING],
        )
    assert store.get_round(round_id).status is ManagedInputStatus.RESPONSE_VALIDATED


@pytest.mark.parametrize("terminal", ["resolved", "failed"])
def test_terminal_round_never_changes(
    store: SqlManagedInputStore,
    execution_store: SqlExecutionStore,
    clock: ManualClock,
    terminal: str,
) -> None:
    round_id, lease = _delivered(store, execution_store, clock)
    if terminal == "resolved":
        store.resolve(round_id, lease)
    else:
        store.fail(round_id, lease, failure_code="cancelled", failure_message="c")
    before = store.get_round(round_id)
    attempts = [
        lambda: store.submit_responses(round_id, ACCEPT, idempotency_key="other"),
        lambda: store.start_delivery(round_id, lease),
        lambda: store.mark_delivered(round_id, lease),
        lambda: store.resolve(round_id, lease),
        lambda: store.fail(round_id, lease, failure_code="x", failure_message="y"),
        lambda: store.renew(round_id, lease, lease_duration=timedelta(seconds=5)),
        lambda: store.claim_round(
            round_id, owner_id=lease.owner_id, lease_duration=timedelta(seconds=5)
        ),
        lambda: store.fail_recovery(round_id),
    ]
    for attempt in attempts:
        with pytest.raises(ManagedInputStateError):
            attempt()
    assert store.get_round(round_id) == before


# -- recovery -----------------------------------------------------------------------


def test_fail_recovery_fails_round_and_execution_closed(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _lease = _pending(store, execution_store, clock)
    execution_id = store.get_round(round_id).pending.execution_id
    with pytest.raises(ManagedInputRecoveryError):
        store.fail_recovery(round_id)  # the owner is still live
    clock.advance(31)
    assert store.expired_round_ids() == [round_id]
    failed = store.fail_recovery(round_id)
    assert failed.status is ManagedInputStatus.FAILED
    assert failed.failure_code == RECOVERY_FAILURE_CODE
    state = execution_store.get_state(execution_id)
    assert state.lifecycle is ExecutionStatus.FINISHED
    assert state.outcome is ExecutionOutcome.FAILED
    assert state.failure_code == RECOVERY_FAILURE_CODE
    result = execution_store.get_result(execution_id)
    assert result is not None and result.outcome is ExecutionOutcome.FAILED
    # Never pending again: a late response and a replacement worker are refused.
    with pytest.raises(ManagedInputRecoveryError) as late:
        store.submit_responses(round_id, ACCEPT, idempotency_key="late")
    assert late.value.metadata == {"round_id": round_id, "execution_id": execution_id}
    with pytest.raises(ManagedInputStateError):
        store.claim_round(round_id, owner_id="worker-b", lease_duration=timedelta(seconds=30))
    assert store.expired_round_ids() == []


# -- redaction ----------------------------------------------------------------------


def test_redacted_responses_never_carry_content(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    empty = store.redacted_responses(round_id)
    assert empty.digest is None and empty.actions == {}
    store.submit_responses(round_id, ACCEPT, idempotency_key="address-1")
    redacted = store.redacted_responses(round_id)
    assert redacted.actions == {"shipping_address": "accept"}
    assert redacted.content_keys == {"shipping_address": ("city", "street")}
    assert redacted.idempotency_key == "address-1"
    assert redacted.digest and len(redacted.digest) == 64
    text = redacted.model_dump_json()
    assert "1 Main Street" not in text and "Pune" not in text


# -- events ---------------------------------------------------------------------------


def test_every_transition_appends_one_event(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    start = execution_store.last_event_seq()
    round_id, lease = _delivered(store, execution_store, clock)
    store.resolve(round_id, lease)
    events = execution_store.read_events(after_seq=start)
    assert [(e.kind.value, e.status) for e in events] == [
        ("round_pending", "pending"),
        ("round_left_pending", "response_validated"),
        ("round_changed", "delivery_started"),
        ("round_changed", "delivered"),
        ("round_changed", "resolved"),
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert len({e.seq for e in events}) == 5


# -- clocks and reopening ------------------------------------------------------------------


def test_naive_clock_is_rejected(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        SQLiteManagedInputStore(f"{tmp_path}/x.sqlite", clock=lambda: datetime(2026, 1, 1))


def test_reopen_after_close_reads_everything_back(database: str, clock: ManualClock) -> None:
    first = SqlExecutionStore(database, clock=clock)
    execution_id = new_execution(first)
    lease = make_lease(clock)
    pending = make_round(execution_id, clock, deadline=clock() + timedelta(minutes=1))
    first.managed_input_store.create_round(pending, lease=lease, round_limit=2)
    first.managed_input_store.submit_responses(pending.round_id, ACCEPT, idempotency_key="k")
    state = first.get_state(execution_id)
    first.close()

    reopened = SqlExecutionStore(database, clock=clock)
    try:
        assert reopened.get_state(execution_id) == state
        record = reopened.managed_input_store.get_round(pending.round_id)
        assert record.pending == pending
        assert record.status is ManagedInputStatus.RESPONSE_VALIDATED
        assert record.responses == ACCEPT and record.idempotency_key == "k"
        assert record.lease == lease
    finally:
        reopened.close()
    if "://" not in database:
        # A standalone managed-input store on the same file reads it too.
        standalone = SQLiteManagedInputStore(database, clock=clock)
        assert standalone.get_round(pending.round_id).status is (
            ManagedInputStatus.RESPONSE_VALIDATED
        )


def test_every_error_is_typed(store: SqlManagedInputStore) -> None:
    with pytest.raises(M3Error) as caught:
        store.submit_responses("rnd_x", ACCEPT, idempotency_key="k")
    assert caught.value.reason == "ROUND_NOT_FOUND"


def test_times_are_utc_aware(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    round_id, _ = _pending(store, execution_store, clock)
    record = store.get_round(round_id)
    assert record.created_at.tzinfo is not None
    assert record.pending.created_at.astimezone(UTC) == clock()


def test_recovery_of_one_round_closes_its_sibling_rounds(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_id = new_execution(execution_store)
    expiring = store.create_round(
        make_round(execution_id, clock, logical_operation_id="op-a"),
        lease=make_lease(clock, seconds=10),
    )
    sibling_lease = make_lease(clock, seconds=300)
    sibling = store.create_round(
        make_round(execution_id, clock, logical_operation_id="op-b"), lease=sibling_lease
    )
    clock.advance(20)
    store.fail_recovery(expiring.round_id)
    assert execution_store.get_state(execution_id).lifecycle is ExecutionStatus.FINISHED
    closed = store.get_round(sibling.round_id)
    assert closed.status is ManagedInputStatus.FAILED
    assert closed.failure_code == RECOVERY_FAILURE_CODE
    with pytest.raises(ManagedInputRecoveryError):
        store.submit_responses(sibling.round_id, ACCEPT, idempotency_key="k")


def test_finishing_an_execution_closes_its_open_rounds(
    store: SqlManagedInputStore, execution_store: SqlExecutionStore, clock: ManualClock
) -> None:
    execution_store.create_execution({"p": 1}, human_input="managed")
    claimed = execution_store.claim_next(owner_id="w", lease_duration=timedelta(seconds=30))
    assert claimed is not None
    pending = make_round(claimed.execution_id, clock)
    store.create_round(pending, lease=claimed.lease)
    execution_store.finish(
        claimed.execution_id,
        claimed.lease,
        ExecutionResult(
            execution_id=claimed.execution_id,
            outcome=ExecutionOutcome.SUCCEEDED,
            finished_at=clock(),
        ),
    )
    record = store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.FAILED
    assert record.failure_code == "execution_finished"
