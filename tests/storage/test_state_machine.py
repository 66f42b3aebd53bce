"""Model-based test of the managed-input round state machine on a real SQLite file.

Hypothesis drives random sequences of store calls by several simulated workers
(each holding leases that expire as the ManualClock advances) and by callers
(valid, invalid, duplicate and conflicting responses). A small model predicts
the outcome of every call: a legal transition must succeed and change exactly
what the model says; an illegal one must raise the predicted typed error
(an M3Error subclass) and change nothing. After every step the whole store is
compared with the model, and the event log with the model's status history.

The model's allowed moves are the table's (m3grpc/storage/transitions.py): the
from-states it expects come from ROUND_RULE, and every move it predicts is
checked against the table as it is made. (tests/storage/test_transitions.py
walks every rule from every state, deterministically.)
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

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
    EventKind,
    ManagedInputLease,
    ManagedInputRecord,
    ManagedInputStatus,
    SqlExecutionStore,
)
from m3grpc.storage.transitions import (
    EXECUTION_FINISHED_FAILURE_CODE,
    OPEN_ROUND_STATES,
    RESUMABLE_ROUND_STATES,
    ROUND_RULE,
)
from m3grpc.types import ElicitationResponse, ExecutionOutcome, ExecutionStatus
from tests.storage.conftest import ManualClock, make_round

S = ManagedInputStatus
T = TypeVar("T")

WORKERS = ("worker-a", "worker-b", "worker-c")
IDEMPOTENCY_KEYS = ("key-1", "key-2", "key-3")
LEASE_SECONDS = (10, 60, 300)
ADVANCE_SECONDS = (1, 5, 20, 61)
MISSING_ROUND = "rnd_missing"
MISSING = -1
ROUND_INDEXES = st.integers(0, 60)

# Where a worker call's lease comes from, relative to the round's current lease.
LEASE_SOURCES = ("owner", "owner", "owner", "other_owner", "old_token", "forged_token")

VALID_CHOICES = ("accept_home", "accept_work", "decline", "cancel")
INVALID_CHOICES = (
    "missing_key",
    "extra_key",
    "accept_without_content",
    "content_violates_schema",
    "bad_email_format",
    "decline_with_content",
)
MALFORMED_CHOICES = ("value_not_a_response", "empty_idempotency_key")

HOME = {"street": "1 Main St", "city": "Springfield"}
WORK = {"street": "2 Side St", "city": "Shelbyville", "email": "ops@example.com"}


def build_responses(choice: str, *, with_url: bool) -> Mapping[str, Any]:
    """The response map a caller sends for `choice` to a round with or without a URL request."""
    accept = ElicitationResponse
    address: dict[str, Any] = {
        "accept_home": {"shipping_address": accept(action="accept", content=HOME)},
        "accept_work": {"shipping_address": accept(action="accept", content=WORK)},
        "decline": {"shipping_address": accept(action="decline")},
        "cancel": {"shipping_address": accept(action="cancel")},
        "missing_key": {},
        "extra_key": {
            "shipping_address": accept(action="decline"),
            "not_requested": accept(action="decline"),
        },
        "accept_without_content": {"shipping_address": accept(action="accept")},
        "content_violates_schema": {
            "shipping_address": accept(action="accept", content={"street": "", "city": "X"})
        },
        "bad_email_format": {
            "shipping_address": accept(
                action="accept", content={**HOME, "email": "no-at-sign.example.com"}
            )
        },
        "decline_with_content": {"shipping_address": accept(action="decline", content=HOME)},
        "value_not_a_response": {"shipping_address": {"action": "decline"}},
        "empty_idempotency_key": {"shipping_address": accept(action="decline")},
    }[choice]
    if with_url and choice not in ("missing_key",):
        # The URL request is answered with consent only; a valid choice stays valid.
        address = {**address, "consent": accept(action="accept")}
    return address


@dataclass
class ModelRound:
    round_id: str
    execution_id: str
    logical_operation_id: str
    round_index: int
    round_limit: int
    with_url: bool
    deadline: datetime | None
    status: ManagedInputStatus
    owner_id: str
    lease_token: str
    lease_expires_at: datetime
    created_at: datetime
    updated_at: datetime
    responses: dict[str, ElicitationResponse] | None = None
    idempotency_key: str | None = None
    delivery_attempts: int = 0
    response_validated_at: datetime | None = None
    delivery_started_at: datetime | None = None
    delivered_at: datetime | None = None
    resolved_at: datetime | None = None
    failed_at: datetime | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    # (event kind, status) of every status change, in order.
    history: list[tuple[EventKind, str]] = field(default_factory=list)
    # Leases once valid for this round and since replaced by claim_round.
    old_leases: list[ManagedInputLease] = field(default_factory=list)
    # It carries a harness resume token (a 2026-07-28 round of a pinned binding):
    # a response is accepted even once its owner's lease expired.
    resumable: bool = False

    def lease(self) -> ManagedInputLease:
        return ManagedInputLease(
            owner_id=self.owner_id,
            lease_token=self.lease_token,
            expires_at=self.lease_expires_at,
        )

    def move(self, method: str, target: ManagedInputStatus | None = None) -> None:
        """Make the table's move `method` (target None: the table's target); a move
        the table does not allow is a bug in the model (or the table)."""
        rule = ROUND_RULE[method]
        assert rule.allows(self.status), f"{method} may not move a {self.status} round"
        expected = rule.target(self.status)
        assert target is None or target is expected, f"{method}: {self.status} -> {target}"
        if expected is self.status:
            return
        kind = EventKind.ROUND_LEFT_PENDING if self.status is S.PENDING else EventKind.ROUND_CHANGED
        self.history.append((kind, expected.value))
        self.status = expected


Outcome = tuple[type[M3Error], ConflictKind | None] | None


def _orphaned(m: ModelRound, now: datetime) -> bool:
    """Its owner's lease ran out on an open round no other worker may take over:
    every read reports it failed `recovery_unavailable` before recovery writes it
    (m3grpc.storage.overdue)."""
    return (
        m.status in OPEN_ROUND_STATES
        and m.lease_expires_at <= now
        and not (m.resumable and m.status in RESUMABLE_ROUND_STATES)
    )


def _not_pending_error(m: ModelRound, now: datetime) -> type[M3Error]:
    """A response to a round that is not pending: one that recovery failed, or will
    (orphaned), cannot be resumed (ManagedInputRecoveryError); any other is in the
    wrong state."""
    if (m.status is S.FAILED and m.failure_code == RECOVERY_FAILURE_CODE) or _orphaned(m, now):
        return ManagedInputRecoveryError
    return ManagedInputStateError


class RoundStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="m3-state-machine-")
        self.clock = ManualClock()
        self.execution_store = SqlExecutionStore(
            str(Path(self.directory) / "rounds.sqlite"), clock=self.clock
        )
        self.store = self.execution_store.managed_input_store
        self.rounds: dict[str, ModelRound] = {}
        self.order: list[str] = []
        # Finished executions and the outcome they finished with.
        self.finished_executions: dict[str, ExecutionOutcome] = {}
        self.events_seen = 0
        # Records frozen the first time a round was seen terminal / with a response.
        self.terminal_records: dict[str, ManagedInputRecord] = {}
        self.accepted: dict[str, tuple[str, dict[str, ElicitationResponse]]] = {}

    def teardown(self) -> None:
        self.execution_store.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------

    def now(self) -> datetime:
        return self.clock()

    def pick(self, index: int) -> ModelRound | None:
        """A model round for a drawn index; MISSING names a round that does not exist."""
        if index == MISSING or not self.order:
            return None
        return self.rounds[self.order[index % len(self.order)]]

    def lease_for(self, m: ModelRound | None, source: str, worker: str) -> ManagedInputLease:
        """A lease a worker might present for round `m` (current, stale, forged, foreign)."""
        expires = self.now() + timedelta(seconds=60)
        if m is None:
            return ManagedInputLease(owner_id=worker, lease_token="tok-x", expires_at=expires)
        if source == "owner":
            return m.lease()
        if source == "other_owner":
            other = next(w for w in WORKERS if w != m.owner_id)
            return ManagedInputLease(
                owner_id=other, lease_token=m.lease_token, expires_at=m.lease_expires_at
            )
        if source == "old_token" and m.old_leases:
            return m.old_leases[-1]
        return ManagedInputLease(
            owner_id=m.owner_id,
            lease_token=f"tok-forged-{uuid.uuid4().hex}",
            expires_at=m.lease_expires_at,
        )

    def guard_outcome(
        self,
        m: ModelRound | None,
        lease: ManagedInputLease,
        allowed: Collection[ManagedInputStatus | None],
    ) -> Outcome:
        """What a worker compare-and-set call must do, by the state machine table."""
        if m is None:
            return (RoundNotFoundError, None)
        if m.status.terminal:
            return (ManagedInputStateError, None)
        if lease.owner_id != m.owner_id or lease.lease_token != m.lease_token:
            return (ManagedInputConflict, ConflictKind.STALE_LEASE)
        if m.lease_expires_at <= self.now():
            return (ManagedInputConflict, ConflictKind.STALE_LEASE)
        if m.status not in allowed:
            return (ManagedInputStateError, None)
        return None

    def snapshot(self) -> tuple[list[ManagedInputRecord], int]:
        return self.store.list_rounds(), self.execution_store.last_event_seq()

    def call(self, label: str, expected: Outcome, action: Callable[[], T]) -> T | None:
        """Run `action`; if the model expects an error, it must be exactly that typed
        error and the store (rounds and event log) must be unchanged."""
        if expected is None:
            result = action()
            event(f"{label}: ok")
            return result
        error_type, conflict_kind = expected
        event(f"{label}: {error_type.__name__}")
        before = self.snapshot()
        with pytest.raises(M3Error) as info:
            action()
        assert type(info.value) is error_type, f"expected {error_type.__name__}, got {info.value!r}"
        if conflict_kind is not None:
            assert isinstance(info.value, ManagedInputConflict)
            assert info.value.conflict_kind is conflict_kind
        assert self.snapshot() == before, "a rejected call changed the store"
        return None

    def expect_events(self, round_events: int, execution_events: int = 0) -> None:
        seq = self.execution_store.last_event_seq()
        assert seq - self.events_seen == round_events + execution_events
        self.events_seen = seq

    # -- creation --------------------------------------------------------------

    @initialize(with_url=st.booleans())
    def two_rounds(self, with_url: bool) -> None:
        self.create_round("worker-a", 60, with_url, with_deadline=False, round_limit=1)
        self.create_round(
            "worker-b", 300, not with_url, with_deadline=True, round_limit=2, resumable=True
        )

    @rule(
        worker=st.sampled_from(WORKERS),
        seconds=st.sampled_from(LEASE_SECONDS),
        with_url=st.booleans(),
        with_deadline=st.booleans(),
        round_limit=st.integers(1, 3),
        resumable=st.booleans(),
    )
    def create_round(
        self,
        worker: str,
        seconds: int,
        with_url: bool,
        with_deadline: bool,
        round_limit: int,
        resumable: bool = False,
    ) -> None:
        execution_id = self.execution_store.create_execution(
            {"prompt": "p"}, human_input="managed"
        ).state.execution_id
        deadline = self.now() + timedelta(seconds=45) if with_deadline else None
        pending = make_round(execution_id, self.clock, with_url=with_url, deadline=deadline)
        lease = ManagedInputLease(
            owner_id=worker,
            lease_token=f"tok-{uuid.uuid4().hex}",
            expires_at=self.now() + timedelta(seconds=seconds),
        )
        record = self.store.create_round(
            pending,
            lease=lease,
            round_index=round_limit - 1,
            round_limit=round_limit,
            harness_resume_token='{"wire_keys": {}}' if resumable else None,
        )
        m = ModelRound(
            round_id=pending.round_id,
            execution_id=execution_id,
            logical_operation_id=pending.logical_operation_id,
            round_index=round_limit - 1,
            round_limit=round_limit,
            with_url=with_url,
            deadline=deadline,
            status=S.PENDING,
            owner_id=worker,
            lease_token=lease.lease_token,
            lease_expires_at=lease.expires_at,
            created_at=self.now(),
            updated_at=self.now(),
            history=[(EventKind.ROUND_PENDING, S.PENDING.value)],
            resumable=resumable,
        )
        self.rounds[m.round_id] = m
        self.order.append(m.round_id)
        assert record.pending == pending
        self.expect_events(1)

    @rule(kind=st.sampled_from(("index_out_of_range", "expired_lease", "unknown_execution")))
    def create_round_invalid(self, kind: str) -> None:
        execution_id = (
            "exe_missing"
            if kind == "unknown_execution"
            else self.execution_store.create_execution(
                {"prompt": "p"}, human_input="managed"
            ).state.execution_id
        )
        seconds = 0 if kind == "expired_lease" else 30
        lease = ManagedInputLease(
            owner_id="worker-a",
            lease_token=f"tok-{uuid.uuid4().hex}",
            expires_at=self.now() + timedelta(seconds=seconds),
        )
        round_index = 2 if kind == "index_out_of_range" else 0
        expected: Outcome = {
            "index_out_of_range": (ManagedInputValidationError, None),
            "expired_lease": (ManagedInputConflict, ConflictKind.STALE_LEASE),
            "unknown_execution": (ManagedInputValidationError, None),
        }[kind]
        self.call(
            "create_round",
            expected,
            lambda: self.store.create_round(
                make_round(execution_id, self.clock),
                lease=lease,
                round_index=round_index,
                round_limit=2,
            ),
        )

    @precondition(lambda self: self.order)
    @rule(index=ROUND_INDEXES, same_round_id=st.booleans())
    def create_round_duplicate(self, index: int, same_round_id: bool) -> None:
        """The same round_id, or the same (execution, operation, round_index), is refused;
        so is any new round of an execution that has finished."""
        m = self.pick(index)
        assert m is not None
        pending = make_round(
            m.execution_id,
            self.clock,
            round_id=m.round_id if same_round_id else None,
            logical_operation_id=m.logical_operation_id,
        )
        lease = ManagedInputLease(
            owner_id=m.owner_id,
            lease_token=f"tok-{uuid.uuid4().hex}",
            expires_at=self.now() + timedelta(seconds=30),
        )
        expected: Outcome = (
            (ManagedInputStateError, None)
            if m.execution_id in self.finished_executions
            else (ManagedInputConflict, ConflictKind.CONCURRENT_UPDATE)
        )
        self.call(
            "create_round",
            expected,
            lambda: self.store.create_round(
                pending, lease=lease, round_index=m.round_index, round_limit=m.round_limit
            ),
        )

    # -- the caller's transition ---------------------------------------------

    def submit(self, m: ModelRound | None, key: str, choice: str) -> None:
        round_id = m.round_id if m is not None else MISSING_ROUND
        with_url = m.with_url if m is not None else False
        responses = build_responses(choice, with_url=with_url)
        idempotency_key = "" if choice == "empty_idempotency_key" else key
        now = self.now()
        expected: Outcome
        replay = False
        if choice in MALFORMED_CHOICES:
            expected = (ManagedInputValidationError, None)
        elif m is None:
            expected = (RoundNotFoundError, None)
        elif m.idempotency_key is not None:
            if m.idempotency_key != key:
                expected = (_not_pending_error(m, now), None)
            elif m.responses != dict(responses):
                expected = (ManagedInputConflict, ConflictKind.IDEMPOTENCY_KEY_REUSED)
            else:
                expected, replay = None, True
        elif m.status is not S.PENDING:
            expected = (_not_pending_error(m, now), None)
        elif m.lease_expires_at <= now and not m.resumable:
            # A resumable round's answer waits for the next worker instead.
            expected = (ManagedInputRecoveryError, None)
        elif m.deadline is not None and m.deadline <= now:
            expected = (OperationTimeout, None)
        elif choice in INVALID_CHOICES:
            expected = (ManagedInputValidationError, None)
        else:
            expected = None

        before = self.snapshot() if replay else None
        result = self.call(
            "submit_replay" if replay else "submit_responses",
            expected,
            lambda: self.store.submit_responses_detailed(
                round_id, responses, idempotency_key=idempotency_key
            ),
        )
        if expected is not None:
            return
        assert m is not None and result is not None
        if replay:
            # An idempotent replay returns the record as read and changes nothing: an
            # orphaned round's reads say it failed (m3grpc.storage.overdue).
            assert result.replayed is True
            assert result.record.status is (S.FAILED if _orphaned(m, now) else m.status)
            assert result.record.responses == m.responses
            assert result.record.idempotency_key == key
            assert self.snapshot() == before
            assert result.record == self.store.get_round(m.round_id, as_read=True)
            return
        assert result.replayed is False
        m.move("submit_responses", S.RESPONSE_VALIDATED)
        m.responses = dict(responses)
        m.idempotency_key = key
        m.response_validated_at = now
        m.updated_at = now
        assert result.record.status is S.RESPONSE_VALIDATED
        assert result.record.responses == m.responses
        self.expect_events(1)

    @rule(
        index=ROUND_INDEXES,
        key=st.sampled_from(IDEMPOTENCY_KEYS),
        choice=st.sampled_from(VALID_CHOICES + INVALID_CHOICES + MALFORMED_CHOICES),
    )
    def submit_responses(self, index: int, key: str, choice: str) -> None:
        self.submit(self.pick(index), key, choice)

    @precondition(lambda self: any(m.responses is not None for m in self.rounds.values()))
    @rule(index=ROUND_INDEXES, conflicting=st.booleans())
    def resubmit_with_same_key(self, index: int, conflicting: bool) -> None:
        """Same key + same response replays; same key + another response conflicts."""
        answered = [m for m in self.rounds.values() if m.responses is not None]
        m = answered[index % len(answered)]
        assert m.idempotency_key is not None
        same = next(
            c for c in VALID_CHOICES if build_responses(c, with_url=m.with_url) == m.responses
        )
        choice = next(c for c in VALID_CHOICES if c != same) if conflicting else same
        self.submit(m, m.idempotency_key, choice)

    # -- worker transitions ----------------------------------------------------

    @rule(
        operation=st.sampled_from(("start_delivery", "mark_delivered", "resolve")),
        index=ROUND_INDEXES,
        source=st.sampled_from(LEASE_SOURCES),
        worker=st.sampled_from(WORKERS),
    )
    def advance_round(self, operation: str, index: int, source: str, worker: str) -> None:
        m = self.pick(index)
        lease = self.lease_for(m, source, worker)
        stamp = {
            "start_delivery": "delivery_started_at",
            "mark_delivered": "delivered_at",
            "resolve": "resolved_at",
        }[operation]
        expected = self.guard_outcome(m, lease, ROUND_RULE[operation].from_states)
        round_id = m.round_id if m is not None else MISSING_ROUND
        record = self.call(
            operation, expected, lambda: getattr(self.store, operation)(round_id, lease)
        )
        if expected is not None:
            return
        assert m is not None and record is not None
        before = m.status
        m.move(operation)
        target = m.status
        changed = target is not before
        setattr(m, stamp, self.now())
        m.updated_at = self.now()
        if operation == "start_delivery":
            m.delivery_attempts += 1
        assert record.status is target
        self.expect_events(1 if changed else 0)

    @rule(
        index=ROUND_INDEXES,
        source=st.sampled_from(LEASE_SOURCES),
        worker=st.sampled_from(WORKERS),
        expected_statuses=st.sampled_from(
            (None, (S.PENDING,), (S.RESPONSE_VALIDATED, S.DELIVERY_STARTED), ())
        ),
        failure_code=st.sampled_from(("operation_failed", "cancelled", "")),
    )
    def fail(
        self,
        index: int,
        source: str,
        worker: str,
        expected_statuses: tuple[ManagedInputStatus, ...] | None,
        failure_code: str,
    ) -> None:
        m = self.pick(index)
        lease = self.lease_for(m, source, worker)
        table = ROUND_RULE["fail"].from_states
        allowed = table if expected_statuses is None else table & frozenset(expected_statuses)
        expected = (
            (ManagedInputValidationError, None)
            if not failure_code
            else self.guard_outcome(m, lease, allowed)
        )
        round_id = m.round_id if m is not None else MISSING_ROUND
        record = self.call(
            "fail",
            expected,
            lambda: self.store.fail(
                round_id,
                lease,
                failure_code=failure_code,
                failure_message="it broke",
                expected_statuses=expected_statuses,
            ),
        )
        if expected is not None:
            return
        assert m is not None and record is not None
        m.move("fail", S.FAILED)
        m.failed_at = m.updated_at = self.now()
        m.failure_code, m.failure_message = failure_code, "it broke"
        assert record.status is S.FAILED
        self.expect_events(1)

    @rule(
        index=ROUND_INDEXES,
        source=st.sampled_from(LEASE_SOURCES),
        worker=st.sampled_from(WORKERS),
        seconds=st.sampled_from(LEASE_SECONDS),
    )
    def renew(self, index: int, source: str, worker: str, seconds: int) -> None:
        m = self.pick(index)
        lease = self.lease_for(m, source, worker)
        expected = self.guard_outcome(m, lease, ROUND_RULE["renew"].from_states)
        round_id = m.round_id if m is not None else MISSING_ROUND
        record = self.call(
            "renew",
            expected,
            lambda: self.store.renew(round_id, lease, lease_duration=timedelta(seconds=seconds)),
        )
        if expected is not None:
            return
        assert m is not None and record is not None
        m.move("renew")
        m.lease_expires_at = self.now() + timedelta(seconds=seconds)
        m.updated_at = self.now()
        assert record.lease == m.lease()
        self.expect_events(0)

    @rule(
        index=ROUND_INDEXES,
        worker=st.sampled_from((*WORKERS, "owner")),
        seconds=st.sampled_from(LEASE_SECONDS),
    )
    def claim_round(self, index: int, worker: str, seconds: int) -> None:
        """The live owner may get a fresh token; anyone else, or after expiry, may not."""
        m = self.pick(index)
        owner_id = worker
        if worker == "owner":
            owner_id = m.owner_id if m is not None else WORKERS[0]
        expected: Outcome
        if m is None:
            expected = (RoundNotFoundError, None)
        elif m.status.terminal:
            expected = (ManagedInputStateError, None)
        elif m.lease_expires_at <= self.now():
            expected = (ManagedInputRecoveryError, None)
        elif m.owner_id != owner_id:
            expected = (ManagedInputConflict, ConflictKind.STALE_LEASE)
        else:
            expected = None
        round_id = m.round_id if m is not None else MISSING_ROUND
        record = self.call(
            "claim_round",
            expected,
            lambda: self.store.claim_round(
                round_id, owner_id=owner_id, lease_duration=timedelta(seconds=seconds)
            ),
        )
        if expected is not None:
            return
        assert m is not None and record is not None and record.lease is not None
        assert record.lease.owner_id == owner_id
        assert record.lease.lease_token != m.lease_token
        m.move("claim_round")
        m.old_leases.append(m.lease())
        m.lease_token = record.lease.lease_token
        m.lease_expires_at = self.now() + timedelta(seconds=seconds)
        m.updated_at = self.now()
        self.expect_events(0)

    @precondition(lambda self: any(not m.status.terminal for m in self.rounds.values()))
    @rule(
        index=ROUND_INDEXES,
        key=st.sampled_from(IDEMPOTENCY_KEYS),
        choice=st.sampled_from(VALID_CHOICES),
        steps=st.integers(1, 4),
        retry_delivery=st.booleans(),
    )
    def drive_round(
        self, index: int, key: str, choice: str, steps: int, retry_delivery: bool
    ) -> None:
        """Up to `steps` happy-path steps on one open round, by a caller then its owner."""
        open_rounds = [m for m in self.rounds.values() if not m.status.terminal]
        m = open_rounds[index % len(open_rounds)]
        position = self.order.index(m.round_id)
        for step in range(steps):
            before = m.status
            if m.status.terminal:
                break
            if m.status is S.PENDING:
                self.submit(m, key, choice)
            else:
                operation = {
                    S.RESPONSE_VALIDATED: "start_delivery",
                    S.DELIVERY_STARTED: (
                        "start_delivery" if retry_delivery and step == 0 else "mark_delivered"
                    ),
                    S.DELIVERED: "resolve",
                }[m.status]
                self.advance_round(operation, position, "owner", m.owner_id)
            if m.status is before and not retry_delivery:
                break  # the model predicted a rejection (e.g. the lease expired)

    @rule(
        operation=st.sampled_from(
            (
                "submit_responses",
                "start_delivery",
                "mark_delivered",
                "resolve",
                "fail",
                "renew",
                "claim_round",
                "fail_recovery",
            )
        ),
        worker=st.sampled_from(WORKERS),
    )
    def missing_round(self, operation: str, worker: str) -> None:
        """Every call on a round that does not exist raises RoundNotFoundError."""
        if operation == "submit_responses":
            self.submit(None, IDEMPOTENCY_KEYS[0], VALID_CHOICES[0])
        elif operation in ("start_delivery", "mark_delivered", "resolve"):
            self.advance_round(operation, MISSING, "owner", worker)
        elif operation == "fail":
            self.fail(MISSING, "owner", worker, None, "operation_failed")
        elif operation == "renew":
            self.renew(MISSING, "owner", worker, 60)
        elif operation == "claim_round":
            self.claim_round(MISSING, worker, 60)
        else:
            self.fail_recovery(MISSING)

    # -- recovery and time -------------------------------------------------------

    @rule(index=ROUND_INDEXES)
    def fail_recovery(self, index: int) -> None:
        m = self.pick(index)
        expected: Outcome
        if m is None:
            expected = (RoundNotFoundError, None)
        elif m.status.terminal:
            expected = (ManagedInputStateError, None)
        elif m.lease_expires_at > self.now():
            expected = (ManagedInputRecoveryError, None)
        else:
            expected = None
        round_id = m.round_id if m is not None else MISSING_ROUND
        record = self.call("fail_recovery", expected, lambda: self.store.fail_recovery(round_id))
        if expected is not None:
            return
        assert m is not None and record is not None
        m.move("fail_recovery", S.FAILED)
        m.failed_at = m.updated_at = self.now()
        m.failure_code = RECOVERY_FAILURE_CODE
        assert m.execution_id not in self.finished_executions, "its rounds would be closed"
        self.finished_executions[m.execution_id] = ExecutionOutcome.FAILED
        # Its sibling rounds still open fail with the execution.
        siblings = self.close_rounds(m.execution_id, RECOVERY_FAILURE_CODE, None)
        assert record.status is S.FAILED
        self.expect_events(1 + siblings, execution_events=1)

    def close_rounds(self, execution_id: str, failure_code: str, message: str | None) -> int:
        """The model of an execution finishing: its open rounds fail with it."""
        closed = 0
        for other in self.rounds.values():
            if other.execution_id == execution_id and not other.status.terminal:
                other.move("finish_execution", S.FAILED)
                other.failed_at = other.updated_at = self.now()
                other.failure_code, other.failure_message = failure_code, message
                closed += 1
        return closed

    @precondition(lambda self: self.order)
    @rule(index=ROUND_INDEXES)
    def cancel_execution(self, index: int) -> None:
        """Cancelling a queued execution finishes it at once (the caller's
        request_cancel), failing its open rounds; a finished one stays as it is."""
        m = self.pick(index)
        assert m is not None
        state = self.execution_store.request_cancel(m.execution_id)
        assert state.lifecycle is ExecutionStatus.FINISHED
        if m.execution_id in self.finished_executions:
            self.expect_events(0)
            return
        self.finished_executions[m.execution_id] = ExecutionOutcome.CANCELLED
        closed = self.close_rounds(
            m.execution_id,
            EXECUTION_FINISHED_FAILURE_CODE,
            "the execution finished (cancelled) before the round",
        )
        self.expect_events(closed, execution_events=1)

    @precondition(lambda self: any(not m.status.terminal for m in self.rounds.values()))
    @rule(index=ROUND_INDEXES)
    def owner_disappears(self, index: int) -> None:
        """An open round's owner stops renewing: time passes its lease, and recovery
        fails the round (short clock steps alone rarely outlast a lease)."""
        open_rounds = [m for m in self.rounds.values() if not m.status.terminal]
        m = open_rounds[index % len(open_rounds)]
        self.clock.advance(max(0.0, (m.lease_expires_at - self.now()).total_seconds()))
        self.fail_recovery(self.order.index(m.round_id))

    @rule(seconds=st.sampled_from(ADVANCE_SECONDS))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    # -- invariants --------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        records = {r.round_id: r for r in self.store.list_rounds()}
        assert set(records) == set(self.rounds)
        for round_id, m in self.rounds.items():
            r = records[round_id]
            assert r.status is m.status
            assert r.lease == m.lease(), "only the owner's renew/claim may change the lease"
            assert r.responses == m.responses
            assert r.idempotency_key == m.idempotency_key
            assert r.delivery_attempts == m.delivery_attempts
            assert (r.round_index, r.round_limit) == (m.round_index, m.round_limit)
            assert r.pending.created_at == m.created_at
            assert r.updated_at == m.updated_at
            assert r.response_validated_at == m.response_validated_at
            assert r.delivery_started_at == m.delivery_started_at
            assert r.delivered_at == m.delivered_at
            assert r.resolved_at == m.resolved_at
            assert r.failed_at == m.failed_at
            assert r.failure_code == m.failure_code
            assert (r.harness_resume_token is not None) is m.resumable
            if m.failure_code is not None:
                assert r.failure_message
            if m.failure_message is not None:
                assert r.failure_message == m.failure_message

    @invariant()
    def accepted_response_never_changes(self) -> None:
        for record in self.store.list_rounds():
            if record.responses is None:
                assert record.round_id not in self.accepted
                continue
            assert record.idempotency_key is not None
            accepted = (record.idempotency_key, dict(record.responses))
            assert self.accepted.setdefault(record.round_id, accepted) == accepted

    @invariant()
    def terminal_round_never_changes(self) -> None:
        for record in self.store.list_rounds():
            if record.status.terminal:
                frozen = self.terminal_records.setdefault(record.round_id, record)
                assert record == frozen
            else:
                assert record.round_id not in self.terminal_records

    @invariant()
    def event_log_matches_status_history(self) -> None:
        events = self.execution_store.read_events(after_seq=0, limit=100_000)
        assert len(events) == self.execution_store.last_event_seq()
        by_round: dict[str, list[tuple[EventKind, str]]] = {}
        finished: list[str] = []
        for stored in events:
            if stored.round_id is None:
                assert stored.kind is EventKind.EXECUTION_FINISHED
                finished.append(stored.execution_id)
            else:
                assert stored.status is not None
                assert stored.execution_id == self.rounds[stored.round_id].execution_id
                by_round.setdefault(stored.round_id, []).append((stored.kind, stored.status))
        assert by_round == {round_id: m.history for round_id, m in self.rounds.items()}
        assert sorted(finished) == sorted(self.finished_executions)

    @invariant()
    def finished_executions_keep_their_outcome(self) -> None:
        """Recovered executions finish failed `recovery_unavailable`, cancelled ones
        `cancelled`; the rest stay queued (no worker runs them)."""
        for execution_id in {m.execution_id for m in self.rounds.values()}:
            state = self.execution_store.get_state(execution_id)
            outcome = self.finished_executions.get(execution_id)
            if outcome is None:
                assert state.lifecycle is ExecutionStatus.QUEUED
                continue
            assert state.lifecycle is ExecutionStatus.FINISHED
            assert state.outcome is outcome
            assert state.failure_code == (
                RECOVERY_FAILURE_CODE if outcome is ExecutionOutcome.FAILED else "cancelled"
            )


RoundStateMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRoundStateMachine = RoundStateMachine.TestCase
