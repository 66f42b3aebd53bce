"""The managed-input store: durable rounds and their compare-and-set state machine.

Every transition is one transaction that checks the move against the rules of
`m3grpc.storage.transitions` (the round's state and, for worker transitions,
the owner_id + lease_token compare-and-set) before it writes, and appends an
event in the same transaction. The rules, in short:

    (new) -> pending                      create_round      worker, becomes lease owner
    pending -> response_validated         submit_responses  caller; owner's lease live
    response_validated -> delivery_started start_delivery   worker CAS (retry: attempts += 1)
    delivery_started -> delivered         mark_delivered    worker CAS
    delivered -> resolved                 resolve           worker CAS
    non-terminal -> failed                fail              worker CAS
    non-terminal -> failed                fail_recovery     recovery, owner's lease expired
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import Connection, Engine, Row

from m3grpc.clipping import clip
from m3grpc.errors import (
    ConflictKind,
    FieldViolation,
    ManagedInputConflict,
    ManagedInputStateError,
    ManagedInputValidationError,
    OperationTimeout,
    RoundNotFoundError,
)
from m3grpc.storage import overdue, statements
from m3grpc.storage.changes import EXECUTION_QUEUED, Change, announce
from m3grpc.storage.clock import Clock, checked_clock, read_clock, utc_now
from m3grpc.storage.encryption import ResponseCipher, open_responses
from m3grpc.storage.engine import (
    SQLiteSynchronous,
    read_transaction,
    write_transaction,
)
from m3grpc.storage.events import EventKind, append_event
from m3grpc.storage.identifiers import require_identifier
from m3grpc.storage.operations import record_operation
from m3grpc.storage.response_validation import (
    coerce_responses,
    document_digest,
    responses_digest,
    responses_document,
    validate_responses,
)
from m3grpc.storage.schema import executions, from_micros, rounds, to_micros
from m3grpc.storage.statements import RowLike, StoredRow
from m3grpc.storage.store_engine import create_store_engine
from m3grpc.storage.tokens import new_lease_token
from m3grpc.storage.transitions import (
    EXECUTION_RULE,
    RECOVERY_FAILURE_CODE,
    ROUND_RULE,
    RoundMove,
    Rule,
    advance_round,
    check_round,
    finish_recovered,
    keep_execution_in_step,
    moved_row,
    require_not_recovered,
    state_error,
    write_round,
    write_rounds,
)
from m3grpc.types import (
    ElicitationRequest,
    ElicitationResponse,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputRecord,
    ManagedInputStatus,
    OperationResult,
    PendingElicitationRound,
    RedactedResponses,
)

__all__ = [
    "RECOVERY_FAILURE_CODE",
    "Clock",
    "ManagedInputStore",
    "ResponseSubmission",
    "SQLiteManagedInputStore",
    "SqlManagedInputStore",
    "redact_responses",
]

_REQUESTS = TypeAdapter(dict[str, ElicitationRequest])
_RESPONSES = TypeAdapter(dict[str, ElicitationResponse])
# The state create_round inserts a round in.
_CREATED = ROUND_RULE["create_round"].creates()
# A new round's times, and its JSON values that are not built from a model's JSON
# form (which reading back gives unchanged), e.g. a tuple that reads back as a list.
_TIME_COLUMNS = ("deadline", "lease_expires_at", "created_at", "updated_at")
_FREE_JSON_COLUMNS = ("turn_metadata", "operation_parameters")
# Whether a round's execution has a cancel requested (submit_responses), built once.
_CANCEL_REQUESTED = statements.Prepared(
    sa.select(executions.c.cancel_requested).where(
        executions.c.execution_id == sa.bindparam("execution_id")
    )
)
# Recovery's work list (expired_round_ids), built once.
_EXPIRED_ROUNDS = (
    sa.select(rounds.c.round_id)
    .where(rounds.c.status.in_(ROUND_RULE["fail_recovery"].open_states()))
    .where(rounds.c.lease_expires_at <= sa.bindparam("now", type_=rounds.c.lease_expires_at.type))
    .order_by(rounds.c.created_at)
)


@dataclass(frozen=True)
class _Step:
    """One worker move of a transition: the round rule's method, the time column
    it stamps, and any other values it writes."""

    method: str
    stamp: str
    values: Mapping[str, Any] = field(default_factory=dict)


# start_delivery also counts the attempt (a retry from delivery_started: += 1).
_START_DELIVERY = _Step("start_delivery", "delivery_started_at")
_MARK_DELIVERED = _Step("mark_delivered", "delivered_at")
_RESOLVE = _Step("resolve", "resolved_at")


@dataclass(frozen=True)
class RoundSettle:
    """A round `resolve` would settle with its operation's result (`operation`;
    `last`: the execution's final one), carried into the execution's finish so
    both commit in one transaction (SqlExecutionStore.finish)."""

    execution_id: str
    round_id: str
    operation: OperationResult
    last: bool = True
    mark_delivered: bool = False


@dataclass(frozen=True)
class ResponseSubmission:
    """What submit_responses did: the round's status after it, and whether it was an
    idempotent replay. `record` builds the whole round record when first read."""

    round_id: str
    status: ManagedInputStatus
    replayed: bool
    row: Mapping[Any, Any] = field(repr=False, compare=False)
    # The round as asked, when already built (the store's cache of them).
    pending: PendingElicitationRound | None = field(default=None, repr=False, compare=False)
    # The round's row after the delivery its worker asked for started in the same
    # transaction (submit_responses_detailed's `start_delivery`); None: not started.
    started_row: Mapping[Any, Any] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def record(self) -> ManagedInputRecord:
        return _record(self.row, self.pending)

    @cached_property
    def started_record(self) -> ManagedInputRecord | None:
        """The round's record once its delivery started (None: it did not)."""
        if self.started_row is None:
            return None
        return _record(self.started_row, self.pending)


@runtime_checkable
class ManagedInputStore(Protocol):
    """Durable rounds and worker coordination; resolved by persistent execution stores."""

    def create_round(
        self,
        pending: PendingElicitationRound,
        *,
        lease: ManagedInputLease,
        round_index: int = 0,
        round_limit: int = 1,
        operation_parameters: Mapping[str, Any] | None = None,
        harness_session_id: str | None = None,
        harness_resume_token: str | None = None,
        turn_metadata: Mapping[str, Any] | None = None,
    ) -> ManagedInputRecord: ...

    def get_round(self, round_id: str) -> ManagedInputRecord: ...

    def list_rounds(
        self,
        *,
        execution_id: str | None = None,
        statuses: Collection[ManagedInputStatus] | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int | None = None,
        principal: str | None = None,
    ) -> list[ManagedInputRecord]: ...

    def claim_round(
        self, round_id: str, *, owner_id: str, lease_duration: timedelta
    ) -> ManagedInputRecord: ...

    def renew(
        self, round_id: str, lease: ManagedInputLease, *, lease_duration: timedelta
    ) -> ManagedInputRecord: ...

    def submit_responses(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> ManagedInputRecord: ...

    def start_delivery(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord: ...

    def mark_delivered(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord: ...

    def resolve(
        self,
        round_id: str,
        lease: ManagedInputLease,
        *,
        operation: OperationResult | None = None,
        last: bool = False,
        mark_delivered: bool = False,
    ) -> ManagedInputRecord: ...

    def fail(
        self,
        round_id: str,
        lease: ManagedInputLease,
        *,
        failure_code: str,
        failure_message: str,
        expected_statuses: Collection[ManagedInputStatus] | None = None,
        operation: OperationResult | None = None,
        last: bool = False,
    ) -> ManagedInputRecord: ...

    def fail_recovery(self, round_id: str) -> ManagedInputRecord: ...

    def redacted_responses(self, round_id: str) -> RedactedResponses: ...


class SqlManagedInputStore:
    """ManagedInputStore over SQLAlchemy Core: SQLite or PostgreSQL, chosen by the URL."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock | None = None,
        cipher: ResponseCipher | None = None,
    ) -> None:
        self._engine = engine
        self._clock: Clock = clock or utc_now
        # With a cipher, responses are stored sealed (m3grpc.storage.encryption).
        self._cipher = cipher
        self._pendings = _PendingCache()

    @property
    def engine(self) -> Engine:
        return self._engine

    def now(self) -> datetime:
        """The store clock's current time; a naive time is a configuration error."""
        return read_clock(self._clock)

    # -- creation and reads -------------------------------------------------

    def create_round(
        self,
        pending: PendingElicitationRound,
        *,
        lease: ManagedInputLease,
        round_index: int = 0,
        round_limit: int = 1,
        operation_parameters: Mapping[str, Any] | None = None,
        harness_session_id: str | None = None,
        harness_resume_token: str | None = None,
        turn_metadata: Mapping[str, Any] | None = None,
    ) -> ManagedInputRecord:
        if not isinstance(pending, PendingElicitationRound):
            raise ManagedInputValidationError(
                "pending must be a PendingElicitationRound",
                field_violations=[FieldViolation("pending", "must be a PendingElicitationRound")],
            )
        violations = []
        if round_limit < 1:
            violations.append(FieldViolation("round_limit", "must be at least 1"))
        if round_index < 0 or round_index >= round_limit:
            violations.append(
                FieldViolation("round_index", f"must be in [0, round_limit={round_limit})")
            )
        if violations:
            raise ManagedInputValidationError("invalid round position", field_violations=violations)
        now = self.now()
        if lease.expires_at <= now:
            raise ManagedInputConflict(
                "cannot create a round under an expired lease",
                conflict_kind=ConflictKind.STALE_LEASE,
                metadata={"round_id": pending.round_id},
            )
        row = {
            "round_id": pending.round_id,
            "execution_id": pending.execution_id,
            "logical_operation_id": pending.logical_operation_id,
            "server": pending.server,
            "operation_kind": pending.operation_kind,
            "operation_name": pending.operation_name,
            "requests": _REQUESTS.dump_python(dict(pending.requests), mode="json"),
            "request_state": pending.request_state,
            "deadline": pending.deadline,
            "round_index": round_index,
            "round_limit": round_limit,
            "status": _CREATED.value,
            "owner_id": lease.owner_id,
            "lease_token": lease.lease_token,
            "lease_expires_at": lease.expires_at,
            "harness_session_id": harness_session_id,
            "harness_resume_token": harness_resume_token,
            "turn_metadata": dict(turn_metadata) if turn_metadata is not None else None,
            "operation_parameters": dict(operation_parameters or {}),
            "delivery_attempts": 0,
            "created_at": pending.created_at,
            "updated_at": now,
        }
        with write_transaction(self._engine) as conn:
            found = statements.SELECT_ROUND_PRECONDITIONS.first(
                conn,
                {
                    "round_id": pending.round_id,
                    "execution_id": pending.execution_id,
                    "logical_operation_id": pending.logical_operation_id,
                    "round_index": round_index,
                },
            )
            if found is None:
                raise ManagedInputValidationError(
                    "the round's execution does not exist",
                    field_violations=[FieldViolation("pending.execution_id", "unknown execution")],
                    metadata={"execution_id": pending.execution_id},
                )
            if found.lifecycle == ExecutionStatus.FINISHED.value:
                raise ManagedInputStateError(
                    "the round's execution has finished",
                    metadata={"execution_id": pending.execution_id},
                )
            if found.clash is not None:
                raise ManagedInputConflict(
                    "a round with that ID, or that operation and round_index, exists",
                    conflict_kind=ConflictKind.CONCURRENT_UPDATE,
                    metadata={"round_id": found.clash},
                )
            statements.INSERT_ROUND.execute(conn, row)
            keep_execution_in_step(conn, EXECUTION_RULE["create_round"], pending.execution_id, now)
            append_event(
                conn,
                EventKind.ROUND_PENDING,
                execution_id=pending.execution_id,
                round_id=pending.round_id,
                status=_CREATED.value,
                created_at=now,
            )
        # The row as stored, without reading it back.
        record = _record(_as_read(row))
        self._pendings.put(record.pending)
        return record

    def get_round(self, round_id: str, *, as_read: bool = False) -> ManagedInputRecord:
        """The round as stored; `as_read`: an overdue round as the failure it is due
        (m3grpc.storage.overdue), as every face reports it."""
        require_identifier(round_id, "round_id")
        with read_transaction(self._engine) as conn:
            row = self._load(conn, round_id)
        return self._record(overdue.as_read(row._mapping, self.now()) if as_read else row)

    def list_rounds(
        self,
        *,
        execution_id: str | None = None,
        statuses: Collection[ManagedInputStatus] | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int | None = None,
        principal: str | None = None,
        as_read: bool = False,
    ) -> list[ManagedInputRecord]:
        """Rounds ordered by (created_at, round_id); `after` is a keyset cursor;
        `principal`: only rounds of that principal's executions. `as_read`: each
        overdue round as the failure it is due, `statuses` matched against that
        (m3grpc.storage.overdue), as every face reports them."""
        query = _list_query(
            principal is not None,
            execution_id is not None,
            None if statuses is None else tuple(sorted(s.value for s in statuses)),
            after is not None,
            limit is not None,
            as_read,
        )
        now = self.now()
        params: dict[str, Any] = {
            "principal": principal,
            "execution_id": execution_id,
            "limit": limit,
            "now": now,
        }
        if after is not None:
            params["after_created_at"], params["after_round_id"] = after
        with read_transaction(self._engine) as conn:
            rows = query.all(conn, params)
        if as_read:
            return [self._record(overdue.as_read(row._mapping, now)) for row in rows]
        return [self._record(row) for row in rows]

    def redacted_responses(self, round_id: str) -> RedactedResponses:
        return redact_responses(self.get_round(round_id))

    # -- the caller's transition ---------------------------------------------

    def submit_responses(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
    ) -> ManagedInputRecord:
        return self.submit_responses_detailed(
            round_id, responses, idempotency_key=idempotency_key
        ).record

    def submit_responses_detailed(
        self,
        round_id: str,
        responses: Mapping[str, ElicitationResponse],
        *,
        idempotency_key: str,
        execution_id: str | None = None,
        start_delivery: tuple[ManagedInputLease, bool] | None = None,
    ) -> ResponseSubmission:
        """submit_responses, also telling whether the call was an idempotent replay.

        With `execution_id`, the round must belong to that execution.

        `start_delivery` (the waiting worker's lease, and `mark_delivered` as for
        `start_delivery`): that worker is in this process and free to deliver at
        once, so the answer's delivery starts in the same transaction, after the
        answer is stored (the worker's own move and checks; a refusal leaves the
        answer stored and the delivery to the worker): one commit, durable before
        the caller's acknowledgement and before the answer leaves. The
        submission's status stays the answer's (response_validated);
        `started_record` is the round after the delivery started."""
        require_identifier(round_id, "round_id")
        require_identifier(idempotency_key, "idempotency_key")
        answer = coerce_responses(responses)
        document = responses_document(answer)
        digest = document_digest(document)
        with write_transaction(self._engine) as conn:
            row = self._load(conn, round_id, for_update=True)
            if execution_id is not None and row.execution_id != execution_id:
                # Bounded: a direct caller's value may be any length (the runtime
                # checks it as an ID first).
                raise ManagedInputValidationError(
                    "the round belongs to another execution",
                    field_violations=[
                        FieldViolation("round_id", f"not a round of execution {clip(execution_id)}")
                    ],
                    metadata={"round_id": round_id, "execution_id": clip(execution_id)},
                )
            now = self.now()
            if row.idempotency_key is not None:
                # An answered round whose worker is gone reads as recovery will leave
                # it (m3grpc.storage.overdue): a replay reports that, a late answer
                # is refused as it is once recovery ran.
                seen = overdue.as_read(row._mapping, now)
                if row.idempotency_key == idempotency_key:
                    if row.response_digest == digest:
                        return _submission(
                            self._opened(seen),
                            replayed=True,
                            pending=self._pendings.get(row),
                        )
                    raise ManagedInputConflict(
                        "this idempotency key was used with a different response",
                        conflict_kind=ConflictKind.IDEMPOTENCY_KEY_REUSED,
                        metadata={"round_id": round_id},
                    )
                require_not_recovered(StoredRow(seen))
                raise state_error(row, "the round already has a response")
            move = check_round(ROUND_RULE["submit_responses"], row, now=now)
            # Cancel flags an execution a worker holds, and its worker fails the open
            # round when it acts on it: an answer taken meanwhile would be acknowledged
            # and then never delivered.
            cancel = _CANCEL_REQUESTED.first(conn, {"execution_id": row.execution_id})
            if cancel is not None and cancel.cancel_requested:
                raise state_error(row, "its execution is being cancelled: it takes no answer")
            if row.deadline is not None and row.deadline <= now:
                raise OperationTimeout(
                    "the round's deadline has passed",
                    metadata={"round_id": round_id, "execution_id": row.execution_id},
                )
            pending = self._pendings.get(row)
            validate_responses(
                _REQUESTS.validate_python(row.requests) if pending is None else pending.requests,
                document,
            )
            written = write_round(
                conn,
                move,
                responses=(
                    self._cipher.seal(document, round_id) if self._cipher is not None else document
                ),
                idempotency_key=idempotency_key,
                response_digest=digest,
                response_validated_at=now,
            )
            if row.owner_id is None:
                # Released (m3grpc.storage.handover): its execution is claimable now.
                announce(conn, Change(EXECUTION_QUEUED, row.execution_id))
            answered = {**written, "responses": document}
            submission = _submission(answered, replayed=False, pending=pending)
            if start_delivery is None:
                return submission
            lease, mark_delivered = start_delivery
            steps = (_START_DELIVERY, *((_MARK_DELIVERED,) if mark_delivered else ()))
            try:
                # Every check runs before the first write: a refusal leaves nothing behind.
                started = self._move(conn, round_id, lease, steps)
            except (ManagedInputStateError, ManagedInputConflict):
                return submission
            return replace(submission, started_row={**started, "responses": document})

    # -- worker transitions (compare-and-set on owner_id + lease_token) -------

    def claim_round(
        self, round_id: str, *, owner_id: str, lease_duration: timedelta
    ) -> ManagedInputRecord:
        """Re-issue the lease token to the round's live owner (e.g. after a lost reply).

        A round whose owner's lease expired cannot be reclaimed: its native
        harness action is gone, so recovery fails it instead.
        """
        require_identifier(owner_id, "owner_id")
        with write_transaction(self._engine) as conn:
            row = self._load(conn, round_id, for_update=True)
            now = self.now()
            written = write_round(
                conn,
                check_round(ROUND_RULE["claim_round"], row, now=now, owner_id=owner_id),
                lease_token=new_lease_token(),
                lease_expires_at=now + lease_duration,
            )
            return self._record(written)

    def renew(
        self, round_id: str, lease: ManagedInputLease, *, lease_duration: timedelta
    ) -> ManagedInputRecord:
        with write_transaction(self._engine) as conn:
            move = self._guard(conn, ROUND_RULE["renew"], round_id, lease)
            written = write_round(conn, move, lease_expires_at=move.now + lease_duration)
            return self._record(written)

    def start_delivery(
        self, round_id: str, lease: ManagedInputLease, *, mark_delivered: bool = False
    ) -> ManagedInputRecord:
        """`mark_delivered`: nothing can stop the answer once delivery starts (the
        harness sends it on at once, unacknowledged: a legacy elicitation reply);
        the round moves on to DELIVERED in the same transaction (both steps
        recorded), which commits before the answer leaves."""
        # delivery_started -> delivery_started is a retry by the same live owner.
        return self._transition(
            round_id, lease, _START_DELIVERY, *((_MARK_DELIVERED,) if mark_delivered else ())
        )

    def mark_delivered(self, round_id: str, lease: ManagedInputLease) -> ManagedInputRecord:
        return self._transition(round_id, lease, _MARK_DELIVERED)

    def resolve(
        self,
        round_id: str,
        lease: ManagedInputLease,
        *,
        operation: OperationResult | None = None,
        last: bool = False,
        mark_delivered: bool = False,
    ) -> ManagedInputRecord:
        """The operation finished or asked again. `operation` (the finished
        operation's result; `last`: the execution's final one) is stored in the
        same transaction, so it is durable as soon as the round is resolved.
        `mark_delivered`: the round is DELIVERY_STARTED and the server's reply is
        both the answer's receipt and the operation's end; the round moves to
        DELIVERED and on to RESOLVED in one transaction (both steps recorded)."""
        return self._transition(
            round_id,
            lease,
            *((_MARK_DELIVERED,) if mark_delivered else ()),
            _RESOLVE,
            operation=(operation, last) if operation is not None else None,
        )

    def resolve_within(
        self, conn: Connection, settle: RoundSettle, lease: ManagedInputLease
    ) -> bool:
        """`resolve` of `settle` (always with its operation) inside the caller's write
        transaction: True once written; False, with nothing written, when the round
        may not be resolved from where it is (ManagedInputStateError from `resolve`),
        and then the operation's result is stored alone. A stale lease raises."""
        steps = (*((_MARK_DELIVERED,) if settle.mark_delivered else ()), _RESOLVE)
        operation = (settle.operation, settle.last)
        try:
            # Every check runs before the first write: a refusal leaves nothing behind.
            self._move(conn, settle.round_id, lease, steps, operation=operation)
        except ManagedInputStateError:
            record_operation(
                conn, settle.execution_id, settle.operation, last=settle.last, now=self.now()
            )
            return False
        return True

    def fail(
        self,
        round_id: str,
        lease: ManagedInputLease,
        *,
        failure_code: str,
        failure_message: str,
        expected_statuses: Collection[ManagedInputStatus] | None = None,
        operation: OperationResult | None = None,
        last: bool = False,
    ) -> ManagedInputRecord:
        """Fail a non-terminal round; `expected_statuses` narrows where it may fail from.
        `operation` and `last` are stored as with `resolve`."""
        require_identifier(failure_code, "failure_code")
        return self._transition(
            round_id,
            lease,
            _Step(
                "fail",
                "failed_at",
                {"failure_code": failure_code, "failure_message": failure_message},
            ),
            within=expected_statuses,
            operation=(operation, last) if operation is not None else None,
        )

    # -- recovery --------------------------------------------------------------

    def fail_recovery(self, round_id: str) -> ManagedInputRecord:
        """Fail a round whose owner's lease expired, and finish its execution failed."""
        with write_transaction(self._engine) as conn:
            row = self._load(conn, round_id, for_update=True)
            now = self.now()
            move = check_round(ROUND_RULE["fail_recovery"], row, now=now)
            message = "the worker that owned this round disappeared; it cannot be resumed"
            written = write_round(
                conn,
                move,
                failed_at=now,
                failure_code=RECOVERY_FAILURE_CODE,
                failure_message=message,
            )
            finish_recovered(conn, row.execution_id, now=now, failure_message=message)
            return self._record(written)

    def expired_round_ids(self) -> list[str]:
        """Non-terminal rounds whose owner's lease has expired: recovery's work list."""
        now = self.now()
        with read_transaction(self._engine) as conn:
            return list(conn.execute(_EXPIRED_ROUNDS, {"now": now}).scalars())

    # -- internals ---------------------------------------------------------------

    def _transition(
        self,
        round_id: str,
        lease: ManagedInputLease,
        *steps: _Step,
        within: Collection[ManagedInputStatus] | None = None,
        operation: tuple[OperationResult, bool] | None = None,
    ) -> ManagedInputRecord:
        """A worker's moves (`steps`, in order) under its lease, in one transaction."""
        with write_transaction(self._engine) as conn:
            written = self._move(conn, round_id, lease, steps, within=within, operation=operation)
        return self._record(written)

    def _move(
        self,
        conn: Connection,
        round_id: str,
        lease: ManagedInputLease,
        steps: Sequence[_Step],
        *,
        within: Collection[ManagedInputStatus] | None = None,
        operation: tuple[OperationResult, bool] | None = None,
    ) -> dict[str, Any]:
        """A worker's moves by the round rules of `steps` inside the caller's
        transaction, all written with one compare-and-set UPDATE, each status
        change recorded: in the usual case (`advance_round`) checked by that
        UPDATE alone; otherwise the round read (locked) once and each move checked
        against the row the one before leaves (state, ownership, lease liveness).
        Returns the round's new row."""
        require_identifier(round_id, "round_id")
        now = self.now()
        written = None
        if within is None and not any(step.values for step in steps):
            # The usual case in one UPDATE; a refusal or a retry reads the round.
            written = advance_round(
                conn,
                [ROUND_RULE[step.method] for step in steps],
                [step.stamp for step in steps],
                round_id=round_id,
                lease=lease,
                now=now,
            )
        if written is None:
            written = self._checked_move(conn, round_id, lease, steps, now=now, within=within)
        execution_id = written["execution_id"]
        if operation is not None:
            result, last = operation
            record_operation(conn, execution_id, result, last=last, now=now)
        for step in steps:
            execution_rule = EXECUTION_RULE.get(step.method)
            if execution_rule is not None:
                keep_execution_in_step(conn, execution_rule, execution_id, now)
        return written

    def _checked_move(
        self,
        conn: Connection,
        round_id: str,
        lease: ManagedInputLease,
        steps: Sequence[_Step],
        *,
        now: datetime,
        within: Collection[ManagedInputStatus] | None,
    ) -> dict[str, Any]:
        """`steps` with the round read (locked) first and each move checked against
        the row the one before leaves, written by `write_rounds`."""
        row: RowLike = self._load(conn, round_id, for_update=True)
        moves: list[tuple[RoundMove, dict[str, Any]]] = []
        for step in steps:
            if moves:
                row = moved_row(*moves[-1])
            move = check_round(ROUND_RULE[step.method], row, now=now, lease=lease, within=within)
            values: dict[str, Any] = {step.stamp: now, **step.values}
            if step.method == "start_delivery":
                values["delivery_attempts"] = row.delivery_attempts + 1
            moves.append((move, values))
        return write_rounds(conn, moves)

    def _guard(
        self,
        conn: Connection,
        rule: Rule[ManagedInputStatus],
        round_id: str,
        lease: ManagedInputLease,
        *,
        within: Collection[ManagedInputStatus] | None = None,
    ) -> RoundMove:
        """Load the round (locked) and check the worker's move: state, ownership,
        lease liveness."""
        require_identifier(round_id, "round_id")
        row = self._load(conn, round_id, for_update=True)
        return check_round(rule, row, now=self.now(), lease=lease, within=within)

    def _opened(self, row: Mapping[Any, Any]) -> dict[Any, Any]:
        """The row with its responses decrypted (EncryptionKeyError if they cannot be)."""
        return {
            **row,
            "responses": open_responses(row["responses"], row["round_id"], self._cipher),
        }

    def _record(self, source: Row[Any] | Mapping[str, Any]) -> ManagedInputRecord:
        row = self._opened(source._mapping if isinstance(source, Row) else source)
        pending = self._pendings.get(row)
        record = _record(row, pending)
        if pending is None:
            self._pendings.put(record.pending)
        return record

    @staticmethod
    def _load(conn: Connection, round_id: str, *, for_update: bool = False) -> RowLike:
        query = statements.SELECT_ROUND_FOR_UPDATE if for_update else statements.SELECT_ROUND
        row = query.first(conn, {"round_id": round_id})
        if row is None:
            raise RoundNotFoundError(f"no round {round_id!r}", metadata={"round_id": round_id})
        return row


class SQLiteManagedInputStore(SqlManagedInputStore):
    """The provided SQLite ManagedInputStore: one (pooled) connection per operation, no close()."""

    def __init__(
        self,
        database: str | os.PathLike[str] | Engine,
        *,
        busy_timeout_ms: int = 5000,
        clock: Clock | None = None,
        sqlite_synchronous: SQLiteSynchronous = "FULL",
        cipher: ResponseCipher | None = None,
    ) -> None:
        if clock is not None:
            checked_clock(clock)
        engine = (
            database
            if isinstance(database, Engine)
            else create_store_engine(
                database, busy_timeout_ms=busy_timeout_ms, sqlite_synchronous=sqlite_synchronous
            )
        )
        super().__init__(engine, clock=clock, cipher=cipher)


@functools.cache
def _list_query(
    by_principal: bool,
    by_execution: bool,
    statuses: tuple[str, ...] | None,
    after: bool,
    limited: bool,
    as_read: bool = False,
) -> statements.Prepared:
    """list_rounds' statement for one combination of filters, built once (see
    m3grpc.storage.statements), with bind parameters for the filters' values;
    `as_read`: `statuses` are matched as read at the bound `now`."""
    query = sa.select(rounds).order_by(rounds.c.created_at, rounds.c.round_id)
    if by_principal:
        query = query.where(
            rounds.c.execution_id.in_(
                sa.select(executions.c.execution_id).where(
                    executions.c.principal == sa.bindparam("principal")
                )
            )
        )
    if by_execution:
        query = query.where(rounds.c.execution_id == sa.bindparam("execution_id"))
    if statuses is not None:
        query = query.where(
            overdue.status_in(statuses) if as_read else statements.one_of(rounds.c.status, statuses)
        )
    if after:
        created_at = sa.bindparam("after_created_at", type_=rounds.c.created_at.type)
        round_id = sa.bindparam("after_round_id", type_=rounds.c.round_id.type)
        query = query.where(
            sa.or_(
                rounds.c.created_at > created_at,
                sa.and_(rounds.c.created_at == created_at, rounds.c.round_id > round_id),
            )
        )
    if limited:
        query = query.limit(sa.bindparam("limit", type_=sa.Integer))
    return statements.Prepared(query)


def redact_responses(record: ManagedInputRecord) -> RedactedResponses:
    """The diagnostic projection of a round's responses: actions, content keys, the
    idempotency key and a digest; never the content values."""
    responses = record.responses or {}
    return RedactedResponses(
        round_id=record.round_id,
        status=record.status,
        idempotency_key=record.idempotency_key,
        actions={key: value.action for key, value in responses.items()},
        content_keys={key: tuple(sorted(value.content or {})) for key, value in responses.items()},
        digest=responses_digest(responses) if record.responses is not None else None,
    )


def _as_read(written: Mapping[str, Any]) -> dict[str, Any]:
    """A new round's row as reading it back would give it: every column (NULL
    where not written), times in UTC to the microsecond, JSON values decoded
    from their stored text."""
    row: dict[str, Any] = dict.fromkeys(rounds.c.keys())
    row.update(written)
    for name in _TIME_COLUMNS:
        if row[name] is not None:
            row[name] = from_micros(to_micros(row[name]))
    for name in _FREE_JSON_COLUMNS:
        if row[name]:
            row[name] = json.loads(json.dumps(row[name]))
    return row


def _submission(
    row: Mapping[Any, Any], *, replayed: bool, pending: PendingElicitationRound | None
) -> ResponseSubmission:
    return ResponseSubmission(
        round_id=row["round_id"],
        status=ManagedInputStatus(row["status"]),
        replayed=replayed,
        row=row,
        pending=pending,
    )


class _PendingCache:
    """The rounds as asked (`PendingElicitationRound`) of the rounds this store
    built records of lately, by round ID. What a round asked never changes once
    it is stored (no write touches those columns), and validating its requests
    again was most of the cost of each transition's record; a round is matched
    by its ID, execution and creation time. Bounded: the oldest goes first."""

    SIZE = 256

    def __init__(self) -> None:
        self._items: dict[str, PendingElicitationRound] = {}
        self._lock = threading.Lock()

    def get(self, row: Mapping[str, Any] | RowLike) -> PendingElicitationRound | None:
        mapping = row._mapping if isinstance(row, Row) else row
        pending = self._items.get(mapping["round_id"])
        if (
            pending is None
            or pending.execution_id != mapping["execution_id"]
            or pending.created_at != mapping["created_at"]
        ):
            return None
        return pending

    def put(self, pending: PendingElicitationRound) -> None:
        with self._lock:
            if len(self._items) >= self.SIZE:
                del self._items[next(iter(self._items))]
            self._items[pending.round_id] = pending


# The record's fields read straight from the row's columns of the same name.
_RECORD_COLUMNS = tuple(
    name
    for name in ManagedInputRecord.model_fields
    if name not in ("pending", "lease", "operation_parameters")
)
_PENDING_COLUMNS = tuple(PendingElicitationRound.model_fields)


def _record(
    source: Row[Any] | Mapping[str, Any], pending: PendingElicitationRound | None = None
) -> ManagedInputRecord:
    """The record of a round's row (responses opened); `pending`: the round as
    asked, already built from the same row's columns. One validation of the
    whole document."""
    row = source._mapping if isinstance(source, Row) else source
    fields: dict[str, Any] = {name: row[name] for name in _RECORD_COLUMNS}
    fields["pending"] = (
        pending if pending is not None else {name: row[name] for name in _PENDING_COLUMNS}
    )
    owner_id, lease_token = row["owner_id"], row["lease_token"]
    fields["lease"] = (
        {"owner_id": owner_id, "lease_token": lease_token, "expires_at": row["lease_expires_at"]}
        if owner_id is not None and lease_token is not None
        else None
    )
    fields["operation_parameters"] = row["operation_parameters"] or {}
    return ManagedInputRecord.model_validate(fields)
