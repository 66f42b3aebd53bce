"""Where a round or an execution may move: declared once, checked on every write.

`ROUND_RULES` and `EXECUTION_RULES` are the state machines: each rule names the
store method, the states it may move from, the state it moves to and who may
make it (which decides what is checked first). Nothing else in the storage
package changes a round or finishes an execution:

- every write to a round (a status change or a lease write) is a `RoundMove`,
  which only `check_round` hands out after the actor's checks, and which
  `write_round` writes with a compare-and-set UPDATE (plus the event;
  `write_rounds`: consecutive moves of one transaction, e.g. delivered and
  resolved at once, in one UPDATE with an event each), or a worker's usual
  status change, which `advance_round` checks and writes in one compare-and-set
  UPDATE (the checks `check_round` makes for a worker, as its WHERE clause;
  anything else falls back to `check_round`); the one
  exception is the heartbeat's bulk lease renewal (`renew_leases`), a single
  UPDATE of lease expiries restricted to the states its rule allows, as one
  statement per row would not scale with the executions a process runs;
- every execution finishes in `finish_execution` (the worker's finish, a queued
  execution's cancel, recovery), which fails the execution's open rounds by the
  `finish_execution` round rule in the same transaction.

docs/how-it-works/state-machine.md shows the same tables; tests/storage/test_transitions.py
compares them row by row and walks every round rule from every state against a
real store.
"""

from __future__ import annotations

import enum
import functools
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from m3grpc.errors import (
    ConflictKind,
    ManagedInputConflict,
    ManagedInputRecoveryError,
    ManagedInputStateError,
)
from m3grpc.storage import statements
from m3grpc.storage.events import EventKind, append_event, round_event_kind
from m3grpc.storage.operations import earned_outcome, stored_operations
from m3grpc.storage.schema import executions, rounds
from m3grpc.storage.statements import RowLike, StoredRow
from m3grpc.types import (
    ExecutionOutcome,
    ExecutionResult,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
)

RECOVERY_FAILURE_CODE = "recovery_unavailable"
# A pending round whose deadline passed without a response (OperationTimeout).
DEADLINE_FAILURE_CODE = "operation_timeout"
EXECUTION_FINISHED_FAILURE_CODE = "execution_finished"

S = ManagedInputStatus
E = ExecutionStatus
StatusT = TypeVar("StatusT", ManagedInputStatus, ExecutionStatus)


class Actor(enum.StrEnum):
    """Who makes a move; it decides what is checked before the write."""

    # The lease holder: compare-and-set on owner_id + lease_token, and the lease is live.
    WORKER = "worker"
    # The round's live owner, named by owner_id alone (it lost its token, e.g. a lost reply).
    OWNER = "owner"
    # Whoever answers or cancels; for a round, its owner's lease must still be live.
    CALLER = "caller"
    # The owner's lease expired: the owner is gone, and its work fails closed.
    RECOVERY = "recovery"
    # The execution finishes (by its worker, a cancel or recovery): its open rounds
    # fail with it, whatever their own leases say, as nothing could deliver to them.
    EXECUTION = "execution finishing"
    # A worker claiming a released execution: its resumable round has no owner,
    # and takes the claimer's new execution lease.
    CLAIMER = "claimer"


@dataclass(frozen=True)
class Rule(Generic[StatusT]):
    """One allowed move. A from-state of None: the row does not exist yet (an
    INSERT). A to-state of None: the status stays (a write to the lease only)."""

    method: str
    from_states: frozenset[StatusT | None]
    to_state: StatusT | None
    actor: Actor
    # Only a resumable round (one with a harness resume token) may move by it.
    resumable_only: bool = False

    def allows(self, status: str | None) -> bool:
        # StatusT members are str enums: a row's plain string compares equal.
        return status in self.from_states

    def target(self, status: StatusT) -> StatusT:
        return status if self.to_state is None else self.to_state

    def creates(self) -> StatusT:
        """The state a creating rule (from NEW) inserts a row in."""
        if None not in self.from_states or self.to_state is None:
            raise ValueError(f"{self.method} does not create a row")
        return self.to_state

    def open_states(self) -> list[str]:
        """The existing states it moves from, as stored (for a WHERE ... IN)."""
        return sorted(s.value for s in self.from_states if s is not None)


def _rule(
    method: str,
    from_states: Iterable[StatusT | None],
    to_state: StatusT | None,
    actor: Actor,
    *,
    resumable_only: bool = False,
) -> Rule[StatusT]:
    return Rule(method, frozenset(from_states), to_state, actor, resumable_only)


OPEN_ROUND_STATES = frozenset(s for s in ManagedInputStatus if not s.terminal)
# Where a resumable round (a 2026-07-28 round of a pinned binding: the server holds
# nothing open, M3 holds its requestState and the answers) may pass to another
# worker: its retry has not been sent, so any worker can send it, exactly once.
# From delivery_started on, the retry may have reached the server: fail closed.
RESUMABLE_ROUND_STATES = frozenset({S.PENDING, S.RESPONSE_VALIDATED})
NEW = None  # as a from-state: the row does not exist yet
SAME = None  # as a to-state: the status stays

ROUND_RULES: tuple[Rule[ManagedInputStatus], ...] = (
    _rule("create_round", [NEW], S.PENDING, Actor.WORKER),
    _rule("submit_responses", [S.PENDING], S.RESPONSE_VALIDATED, Actor.CALLER),
    # From delivery_started again: a retry by the same live owner (attempts += 1).
    _rule(
        "start_delivery",
        [S.RESPONSE_VALIDATED, S.DELIVERY_STARTED],
        S.DELIVERY_STARTED,
        Actor.WORKER,
    ),
    _rule("mark_delivered", [S.DELIVERY_STARTED], S.DELIVERED, Actor.WORKER),
    _rule("resolve", [S.DELIVERED], S.RESOLVED, Actor.WORKER),
    _rule("fail", OPEN_ROUND_STATES, S.FAILED, Actor.WORKER),
    _rule("fail_recovery", OPEN_ROUND_STATES, S.FAILED, Actor.RECOVERY),
    _rule("finish_execution", OPEN_ROUND_STATES, S.FAILED, Actor.EXECUTION),
    _rule("renew", OPEN_ROUND_STATES, SAME, Actor.WORKER),
    # The heartbeat renews an execution's rounds with the execution's lease.
    _rule("renew_leases", OPEN_ROUND_STATES, SAME, Actor.WORKER),
    _rule("claim_round", OPEN_ROUND_STATES, SAME, Actor.OWNER),
    # A resumable round outlives its worker: handed on at a graceful shutdown, or
    # by recovery when its worker died, it keeps its status and loses its owner;
    # the worker that next claims the execution adopts it and sends the retry.
    _rule("release", RESUMABLE_ROUND_STATES, SAME, Actor.WORKER, resumable_only=True),
    _rule("release_recovery", RESUMABLE_ROUND_STATES, SAME, Actor.RECOVERY, resumable_only=True),
    _rule("adopt_round", RESUMABLE_ROUND_STATES, SAME, Actor.CLAIMER, resumable_only=True),
)

EXECUTION_RULES: tuple[Rule[ExecutionStatus], ...] = (
    _rule("create_execution", [NEW], E.QUEUED, Actor.CALLER),
    _rule("claim_next", [E.QUEUED], E.RUNNING, Actor.WORKER),
    # A round's worker keeps its execution's lifecycle in step with the round
    # (a queued execution, which no worker runs, is left as it is).
    _rule("create_round", [E.RUNNING, E.WAITING_FOR_INPUT], E.WAITING_FOR_INPUT, Actor.WORKER),
    _rule("start_delivery", [E.RUNNING, E.WAITING_FOR_INPUT], E.RUNNING, Actor.WORKER),
    _rule("finish", [E.RUNNING, E.WAITING_FOR_INPUT], E.FINISHED, Actor.WORKER),
    _rule("request_cancel", [E.QUEUED], E.FINISHED, Actor.CALLER),
    _rule(
        "fail_recovery",
        [E.QUEUED, E.RUNNING, E.WAITING_FOR_INPUT],
        E.FINISHED,
        Actor.RECOVERY,
    ),
    # A released execution (waiting for input, no worker: see the round rules
    # `release`, `release_recovery`) keeps waiting until a worker claims it again.
    _rule("release", [E.WAITING_FOR_INPUT], E.WAITING_FOR_INPUT, Actor.WORKER),
    _rule("release_recovery", [E.WAITING_FOR_INPUT], E.WAITING_FOR_INPUT, Actor.RECOVERY),
    _rule("claim_released", [E.WAITING_FOR_INPUT], E.WAITING_FOR_INPUT, Actor.WORKER),
    _rule("cancel_released", [E.WAITING_FOR_INPUT], E.FINISHED, Actor.CALLER),
)

ROUND_RULE: Mapping[str, Rule[ManagedInputStatus]] = {r.method: r for r in ROUND_RULES}
EXECUTION_RULE: Mapping[str, Rule[ExecutionStatus]] = {r.method: r for r in EXECUTION_RULES}


# -- rounds ---------------------------------------------------------------------


@dataclass(frozen=True)
class RoundMove:
    """A checked move of one round, as read in this transaction; `write_round`
    writes only these. Made by `check_round`, never directly."""

    rule: Rule[ManagedInputStatus]
    row: RowLike
    now: datetime

    @functools.cached_property
    def target(self) -> ManagedInputStatus:
        return self.rule.target(ManagedInputStatus(self.row.status))


def check_round(
    rule: Rule[ManagedInputStatus],
    row: RowLike,
    *,
    now: datetime,
    lease: ManagedInputLease | None = None,
    owner_id: str | None = None,
    within: Collection[ManagedInputStatus] | None = None,
) -> RoundMove:
    """May `rule` move the round as read in `row`? Raises the typed error the
    first failed check calls for (the order is part of the contract: e.g. a
    stale lease is reported before a wrong state); `within` narrows the rule's
    from-states (a worker failing a round only from where it expects it)."""
    allowed = rule.from_states if within is None else rule.from_states & frozenset(within)
    actor = rule.actor
    if actor is Actor.CALLER:
        require_not_recovered(row)
        if row.status not in allowed:
            raise state_error(row, f"the round is not {_either(allowed)}")
        # A resumable round waits for the next worker: its answer is kept for it.
        if row.harness_resume_token is None and (
            row.lease_expires_at is None or row.lease_expires_at <= now
        ):
            raise ManagedInputRecoveryError(
                "the worker that owns this round is gone (lease expired); "
                "recovery will fail the round",
                metadata={"round_id": row.round_id, "execution_id": row.execution_id},
            )
        return RoundMove(rule, row, now)
    if ManagedInputStatus(row.status).terminal:
        raise state_error(row, "the round is terminal")
    if actor is Actor.WORKER:
        if lease is None or row.owner_id != lease.owner_id or row.lease_token != lease.lease_token:
            raise ManagedInputConflict(
                "stale lease: another worker owns this round, or the token was replaced",
                conflict_kind=ConflictKind.STALE_LEASE,
                metadata={"round_id": row.round_id},
            )
        if row.lease_expires_at is None or row.lease_expires_at <= now:
            raise ManagedInputConflict(
                "stale lease: it expired",
                conflict_kind=ConflictKind.STALE_LEASE,
                metadata={"round_id": row.round_id},
            )
    elif actor is Actor.OWNER:
        if row.lease_expires_at is None or row.lease_expires_at <= now:
            raise ManagedInputRecoveryError(
                "the round's lease expired: it cannot be safely reclaimed",
                metadata={"round_id": row.round_id, "execution_id": row.execution_id},
            )
        if owner_id is None or row.owner_id != owner_id:
            raise ManagedInputConflict(
                "another worker owns this round",
                conflict_kind=ConflictKind.STALE_LEASE,
                metadata={"round_id": row.round_id},
            )
    elif (
        actor is Actor.RECOVERY and row.lease_expires_at is not None and row.lease_expires_at > now
    ):
        raise ManagedInputRecoveryError(
            "the round's owner still holds a live lease: recovery would race it",
            metadata={"round_id": row.round_id, "execution_id": row.execution_id},
        )
    elif actor is Actor.CLAIMER and row.owner_id is not None:
        raise ManagedInputConflict(
            "the round was not released: a worker owns it",
            conflict_kind=ConflictKind.STALE_LEASE,
            metadata={"round_id": row.round_id},
        )
    if rule.resumable_only and row.harness_resume_token is None:
        raise state_error(row, "the round cannot pass to another worker (not resumable)")
    # Actor.EXECUTION: the execution's own guard decided (its lease, its cancel,
    # its recovery); its rounds fail with it whatever their own leases say.
    if row.status not in allowed:
        raise state_error(row, f"expected status {_either(allowed)}")
    return RoundMove(rule, row, now)


def write_round(conn: Connection, move: RoundMove, **values: Any) -> dict[str, Any]:
    """Write a checked move; returns the round's new row (no re-read needed).

    The UPDATE is guarded with the status and lease token as read, so a
    concurrent writer cannot slip in between; a status change appends its
    event in the same transaction."""
    return write_rounds(conn, [(move, values)])


def moved_row(move: RoundMove, values: Mapping[str, Any]) -> StoredRow:
    """The round as `move`, writing `values`, leaves it: what the next move of the
    same transaction is checked against (`check_round`) before `write_rounds`
    writes both with one UPDATE."""
    return StoredRow(
        {**move.row._mapping, **values, "status": move.target.value, "updated_at": move.now}
    )


def write_rounds(
    conn: Connection, steps: Sequence[tuple[RoundMove, Mapping[str, Any]]]
) -> dict[str, Any]:
    """Write consecutive checked moves of one round, each with its values, in one
    compare-and-set UPDATE guarded by the round as first read; each move after
    the first was checked against `moved_row` of the one before. Every status
    change appends its own event, in order. Returns the round's new row."""
    first = steps[0][0].row
    values: dict[str, Any] = {}
    for index, (move, written) in enumerate(steps):
        if index and (move.row.round_id != first.round_id or move.row.status != values["status"]):
            raise ValueError("a move not checked against the row the previous one leaves")
        values.update(written, status=move.target.value, updated_at=move.now)
    changed = statements.update_round(tuple(sorted(values))).execute(
        conn,
        {
            "b_round_id": first.round_id,
            "b_status": first.status,
            "b_lease_token": first.lease_token,
            **{f"v_{name}": value for name, value in values.items()},
        },
    )
    if changed != 1:
        raise ManagedInputConflict(
            "the round changed concurrently",
            conflict_kind=ConflictKind.CONCURRENT_UPDATE,
            metadata={"round_id": first.round_id},
        )
    for move, _ in steps:
        status = move.target
        if status.value != move.row.status:
            append_event(
                conn,
                round_event_kind(move.row.status),
                execution_id=first.execution_id,
                round_id=first.round_id,
                status=status.value,
                created_at=move.now,
            )
    return {**first._mapping, **values}


@dataclass(frozen=True)
class _Advance:
    """How `advance_round` writes consecutive worker moves: its UPDATE, and the
    round's status before the first move and after each."""

    statement: statements.Prepared
    statuses: tuple[str, ...]


@functools.cache
def _advance(
    rules: tuple[Rule[ManagedInputStatus], ...], stamps: tuple[str, ...]
) -> _Advance | None:
    """The UPDATE of `rules` from the one state the first rule moves forward from
    (start_delivery: response_validated, not its retry from delivery_started);
    None when there is no such single state or a rule is not a worker's status
    change (those always read the round first)."""
    first = rules[0]
    forward = [s.value for s in first.from_states if s is not None and s is not first.to_state]
    if len(forward) != 1:
        return None
    statuses = forward
    for rule in rules:
        if (
            rule.actor is not Actor.WORKER
            or rule.resumable_only
            or rule.to_state is None
            or not rule.allows(statuses[-1])
        ):
            return None
        statuses.append(rule.to_state.value)
    counts_attempt = any(rule.method == "start_delivery" for rule in rules)
    return _Advance(statements.advance_round(stamps, counts_attempt), tuple(statuses))


def advance_round(
    conn: Connection,
    rules: Sequence[Rule[ManagedInputStatus]],
    stamps: Sequence[str],
    *,
    round_id: str,
    lease: ManagedInputLease,
    now: datetime,
) -> dict[str, Any] | None:
    """A worker's consecutive moves of a round (`rules`, each stamping its column
    of `stamps` with `now`) in the usual case, checked and written by one
    compare-and-set UPDATE ... RETURNING without reading the round first: the
    round is in the state the first rule moves forward from and the worker's
    lease (owner and token) is the round's and live at `now`, which is what
    `check_round` checks for a worker. Each status change appends its event.

    Returns the round's new row, or None when the UPDATE matched no row (nothing
    was written): the caller then reads the round (locked) and checks the moves
    with `check_round`, which refuses them with the typed error that explains why,
    or makes them from another allowed state (a delivery's retry)."""
    advance = _advance(tuple(rules), tuple(stamps))
    if advance is None:
        return None
    statuses = advance.statuses
    row = advance.statement.first(
        conn,
        {
            "b_round_id": round_id,
            "b_status": statuses[0],
            "b_owner_id": lease.owner_id,
            "b_lease_token": lease.lease_token,
            "b_now": now,
            "v_status": statuses[-1],
            **{f"v_now_{name}": now for name in (*stamps, "updated_at")},
        },
    )
    if row is None:
        return None
    for before, after in itertools.pairwise(statuses):
        append_event(
            conn,
            round_event_kind(before),
            execution_id=row.execution_id,
            round_id=round_id,
            status=after,
            created_at=now,
        )
    return dict(row._mapping)


# The open rounds of an execution (`execution_id`), oldest first, locked.
_OPEN_ROUNDS = statements.Prepared(
    sa.select(rounds)
    .where(rounds.c.execution_id == sa.bindparam("execution_id"))
    .where(statements.one_of(rounds.c.status, ROUND_RULE["finish_execution"].open_states()))
    .order_by(rounds.c.created_at, rounds.c.round_id)
    .with_for_update()
)


def fail_open_rounds(
    conn: Connection, execution_id: str, *, now: datetime, failure_code: str, failure_message: str
) -> list[str]:
    """Fail every open round of a finishing execution, inside its transaction:
    nothing could deliver to them any more."""
    rule = ROUND_RULE["finish_execution"]
    # Locked (PostgreSQL), so a round cannot move between this read and its write.
    open_rounds = _OPEN_ROUNDS.all(conn, {"execution_id": execution_id})
    for row in open_rounds:
        write_round(
            conn,
            check_round(rule, row, now=now),
            failed_at=now,
            failure_code=failure_code,
            failure_message=failure_message,
        )
    return [row.round_id for row in open_rounds]


def require_not_recovered(row: RowLike) -> None:
    """A round that recovery failed cannot be resumed: a late response gets
    ManagedInputRecoveryError, not a state error."""
    if row.status == S.FAILED.value and row.failure_code == RECOVERY_FAILURE_CODE:
        raise ManagedInputRecoveryError(
            "the worker that owned this round disappeared and recovery failed the round; "
            "a late response cannot resume it",
            metadata={"round_id": row.round_id, "execution_id": row.execution_id},
        )


def state_error(row: RowLike, message: str) -> ManagedInputStateError:
    return ManagedInputStateError(
        f"{message} (round {row.round_id} is {row.status})",
        metadata={"round_id": row.round_id, "status": row.status},
    )


def _either(states: Collection[ManagedInputStatus | None]) -> str:
    named = sorted(s.value for s in states if s is not None)
    return " or ".join(named) if named else "(no state allowed)"


# -- executions -------------------------------------------------------------------


@functools.cache
def _lifecycle_update(rule: Rule[ExecutionStatus]) -> statements.Prepared:
    """The prebuilt (hot path) UPDATE moving an execution by `rule`: only from its
    from-states, so a finished or queued execution is left as it is."""
    assert rule.to_state is not None
    return statements.Prepared(
        executions.update()
        .where(executions.c.execution_id == sa.bindparam("b_execution_id"))
        .where(statements.one_of(executions.c.lifecycle, rule.open_states()))
        .values(
            lifecycle=rule.to_state.value,
            updated_at=sa.bindparam("v_updated_at", type_=executions.c.updated_at.type),
        )
    )


def keep_execution_in_step(
    conn: Connection, rule: Rule[ExecutionStatus], execution_id: str, now: datetime
) -> bool:
    """Move the round's execution by `rule` in the round's transaction (a pending
    round means its execution waits for input); False when the rule does not apply."""
    changed = _lifecycle_update(rule).execute(
        conn, {"b_execution_id": execution_id, "v_updated_at": now}
    )
    return changed == 1


def finish_execution(
    conn: Connection,
    rule: Rule[ExecutionStatus],
    execution_id: str,
    result: ExecutionResult,
    *,
    round_failure: tuple[str, str],
) -> bool:
    """Finish an execution by `rule`, inside the caller's transaction, after the
    caller's own checks (the worker's lease, a queued cancel, an expired lease):
    its open rounds fail with `round_failure` (code, message), its result is
    stored, its lease cleared (fencing a stalled worker), and the event appended.
    False when the execution is not in one of the rule's from-states (e.g. it
    finished already): then nothing of the execution changes."""
    assert rule.to_state is ExecutionStatus.FINISHED
    now = result.finished_at
    failure_code, failure_message = round_failure
    fail_open_rounds(
        conn, execution_id, now=now, failure_code=failure_code, failure_message=failure_message
    )
    values = {
        "lifecycle": rule.to_state.value,
        "outcome": result.outcome.value,
        "result": result.model_dump(mode="json"),
        "failure_code": result.failure_code,
        "failure_message": result.failure_message,
        "worker_owner_id": None,
        "worker_lease_token": None,
        "worker_lease_expires_at": None,
        "updated_at": now,
        "finished_at": now,
    }
    finished = statements.prepared_update_execution(
        tuple(rule.open_states()), tuple(values)
    ).execute(conn, {"b_execution_id": execution_id, **{f"v_{k}": v for k, v in values.items()}})
    if finished != 1:
        return False
    append_event(
        conn,
        EventKind.EXECUTION_FINISHED,
        execution_id=execution_id,
        status=result.outcome.value,
        created_at=now,
    )
    return True


def finish_recovered(
    conn: Connection, execution_id: str, *, now: datetime, failure_message: str
) -> bool:
    """Finish an unfinished execution whose worker disappeared, inside the caller's
    transaction, keeping every operation result stored before it did.

    If the stored results include the execution's final operation, every
    operation completed: the execution finishes with the outcome they earned (as
    its worker would have). Otherwise it finishes failed, `recovery_unavailable`.
    Rounds still open fail `recovery_unavailable` either way."""
    operations, complete = stored_operations(conn, execution_id)
    if complete:
        outcome, failure_code, message = earned_outcome(operations)
    else:
        outcome, failure_code, message = (
            ExecutionOutcome.FAILED,
            RECOVERY_FAILURE_CODE,
            failure_message,
        )
    return finish_execution(
        conn,
        EXECUTION_RULE["fail_recovery"],
        execution_id,
        ExecutionResult(
            execution_id=execution_id,
            outcome=outcome,
            operations=tuple(operations),
            failure_code=failure_code,
            failure_message=message,
            finished_at=now,
        ),
        round_failure=(RECOVERY_FAILURE_CODE, failure_message),
    )
