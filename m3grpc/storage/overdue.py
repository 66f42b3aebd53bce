"""Overdue rounds: read as the failure that is due, until someone writes it.

Two clocks run out on an open round without anyone writing to it:

- its owner's lease (the worker is gone, unless the round is resumable and may
  pass to another worker: m3grpc.storage.handover): recovery will fail it
  `recovery_unavailable`, and Respond refuses it at once
  (MANAGED_INPUT_RECOVERY_UNAVAILABLE);
- a pending round's deadline: its worker, or the sweeper when no worker holds
  it, will fail it `operation_timeout`, and Respond refuses it at once
  (OPERATION_TIMEOUT).

Between that instant and the write, the row still says what it said. Every
face (GetRound, GetPending, ListRounds, WatchPending, the inbox, the embedded
handle) reads rounds through `as_read` and `status_in`, which report an overdue
round as the failure it is due, checked in Respond's order (`check_round` for a
caller, then the deadline), so a read agrees with what Respond would do at that
instant. The worker reads its own rounds as stored. The write itself is the
runtime's sweeper's (m3grpc/runtime/sweeper.py), which uses `NEXT_DEADLINE`,
`NEXT_LEASE_EXPIRY` and `RELEASED_PAST_DEADLINE` to know when and what.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from m3grpc.storage import statements
from m3grpc.storage.schema import executions, rounds
from m3grpc.storage.transitions import (
    DEADLINE_FAILURE_CODE,
    OPEN_ROUND_STATES,
    RECOVERY_FAILURE_CODE,
    RESUMABLE_ROUND_STATES,
)
from m3grpc.types import ExecutionStatus, ManagedInputStatus

# What the failures say (as their writers say it: recovery finishing the
# execution, the worker at the deadline).
RECOVERY_MESSAGE = "the worker running this execution disappeared; it cannot be resumed"
DEADLINE_MESSAGE = "the round's deadline passed without a response"


def expired_at_deadline(round_id: str, deadline: datetime | None) -> str:
    """The OperationTimeout message of a round that expired: the failure message of
    its operation and execution, whoever failed it (its worker or the sweeper)."""
    return f"round {round_id} expired at its deadline {deadline}"


_OPEN = frozenset(s.value for s in OPEN_ROUND_STATES)
_RESUMABLE = frozenset(s.value for s in RESUMABLE_ROUND_STATES)
_PENDING = ManagedInputStatus.PENDING.value
_FAILED = ManagedInputStatus.FAILED.value


def overdue(row: Mapping[Any, Any], now: datetime) -> tuple[str, str, datetime] | None:
    """(failure code, message, since when) of the failure that is due on the round
    as stored in `row`, or None when nothing is due."""
    status = row["status"]
    if status not in _OPEN:
        return None
    expires = row["lease_expires_at"]
    if (
        expires is not None
        and expires <= now
        and (row["harness_resume_token"] is None or status not in _RESUMABLE)
    ):
        return RECOVERY_FAILURE_CODE, RECOVERY_MESSAGE, expires
    deadline = row["deadline"]
    if status == _PENDING and deadline is not None and deadline <= now:
        return DEADLINE_FAILURE_CODE, DEADLINE_MESSAGE, deadline
    return None


def as_read(row: Mapping[Any, Any], now: datetime) -> Mapping[Any, Any]:
    """The round's row as every face reports it at `now`: an overdue one failed
    (since the instant it became due; its write may stamp a later time)."""
    due = overdue(row, now)
    if due is None:
        return row
    code, message, since = due
    return {
        **row,
        "status": _FAILED,
        "failure_code": code,
        "failure_message": message,
        "failed_at": since,
    }


def _now() -> sa.BindParameter[Any]:
    return sa.bindparam("now", type_=rounds.c.deadline.type)


def _due(status: str) -> sa.ColumnElement[bool]:
    """SQL: a round stored in the open `status` is overdue at the bound `now`
    (`overdue(...) is not None`), written for that status alone; never NULL."""
    now = _now()
    lapsed = sa.and_(rounds.c.lease_expires_at.is_not(None), rounds.c.lease_expires_at <= now)
    if status in _RESUMABLE:
        lapsed = sa.and_(lapsed, rounds.c.harness_resume_token.is_(None))
    if status != _PENDING:
        return lapsed
    return sa.or_(lapsed, sa.and_(rounds.c.deadline.is_not(None), rounds.c.deadline <= now))


def _on_time(status: str) -> sa.ColumnElement[bool]:
    """SQL: the negation of `_due(status)`, spelt out (NULLs included) so that it
    stays a few cheap comparisons per row."""
    now = _now()
    on_time = sa.or_(rounds.c.lease_expires_at.is_(None), rounds.c.lease_expires_at > now)
    if status in _RESUMABLE:
        on_time = sa.or_(on_time, rounds.c.harness_resume_token.is_not(None))
    if status != _PENDING:
        return on_time
    return sa.and_(on_time, sa.or_(rounds.c.deadline.is_(None), rounds.c.deadline > now))


def status_in(statuses: Collection[str]) -> sa.ColumnElement[bool]:
    """SQL: the round's status as read (`as_read`, at the bound `now`) is one of
    `statuses`: a terminal status as stored, an open one only while nothing is due,
    and failed also every open round that is overdue."""
    wanted = set(statuses)
    parts: list[sa.ColumnElement[bool]] = []
    if terminal := sorted(wanted - _OPEN):
        parts.append(statements.one_of(rounds.c.status, terminal))
    for status in sorted(wanted & _OPEN):
        parts.append(sa.and_(rounds.c.status == status, _on_time(status)))
    if _FAILED in wanted:
        for status in sorted(_OPEN):
            parts.append(sa.and_(rounds.c.status == status, _due(status)))
    return sa.or_(*parts) if parts else sa.false()


# -- the sweeper's reads ------------------------------------------------------------

# The earliest deadline of a pending round after `after` (held or not: a held
# round's worker fails it at its deadline, but if that worker is gone its lease
# runs out soon after, and the sweep then is due anyway).
NEXT_DEADLINE = statements.Prepared(
    sa.select(sa.func.min(rounds.c.deadline).label("due")).where(
        rounds.c.status == _PENDING,
        rounds.c.deadline > sa.bindparam("after", type_=rounds.c.deadline.type),
    )
)
# The earliest worker lease expiry after `after` (only held executions have one;
# their rounds' leases are renewed with them).
NEXT_LEASE_EXPIRY = statements.Prepared(
    sa.select(sa.func.min(executions.c.worker_lease_expires_at).label("due")).where(
        executions.c.worker_lease_expires_at
        > sa.bindparam("after", type_=executions.c.worker_lease_expires_at.type)
    )
)
# Released executions (no worker) whose round is still pending past its deadline:
# no worker will fail it, so the sweeper does.
RELEASED_PAST_DEADLINE = statements.Prepared(
    sa.select(rounds.c.execution_id)
    .where(
        rounds.c.status == _PENDING,
        rounds.c.owner_id.is_(None),
        rounds.c.deadline <= _now(),
    )
    .order_by(rounds.c.deadline)
)
# A released execution, as the sweeper locks it before it expires its round.
RELEASED_EXECUTION = statements.Prepared(
    sa.select(executions.c.execution_id)
    .where(
        executions.c.execution_id == sa.bindparam("execution_id"),
        executions.c.lifecycle == ExecutionStatus.WAITING_FOR_INPUT.value,
        executions.c.worker_owner_id.is_(None),
    )
    .with_for_update()
)
