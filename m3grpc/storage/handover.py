"""Handing a resumable round's execution from one worker to the next.

A 2026-07-28 round of a binding pinned to that protocol holds nothing open on
the MCP server: the server handed back its `requestState`, M3 stores it with
the round's requests (and the harness's resume token), and any worker can send
the retry. So instead of failing closed, such an execution is *released* while
its round is still pending or answered (`RESUMABLE_ROUND_STATES`): by its worker
at a graceful shutdown (`release`), or while its round waits for an answer
(`park`: then the process holds nothing of it, not even a task), or by recovery
when its worker's lease expired (`release_recovery`). A released execution waits
for input with no worker (no owner, no lease); once its round is answered (or its
deadline passed) `claim_next` takes it like a queued one and adopts its round
(`adopt_round`), so that worker delivers the answer (or fails the round).

Everything else (a legacy `elicitation/create`, a native agent process, a round
whose retry may have been sent, an execution between rounds) is not resumable
and fails closed as before.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from m3grpc.storage.schema import executions, rounds
from m3grpc.storage.transitions import (
    EXECUTION_RULE,
    OPEN_ROUND_STATES,
    ROUND_RULE,
    check_round,
    write_round,
)
from m3grpc.types import ManagedInputLease, ManagedInputStatus


def open_rounds(conn: Connection, execution_id: str) -> list[Row[Any]]:
    """The execution's non-terminal rounds, locked (PostgreSQL)."""
    return list(
        conn.execute(
            sa.select(rounds)
            .where(rounds.c.execution_id == execution_id)
            .where(rounds.c.status.in_(sorted(s.value for s in OPEN_ROUND_STATES)))
            .order_by(rounds.c.created_at, rounds.c.round_id)
            .with_for_update()
        ).all()
    )


def resumable(row: Row[Any]) -> bool:
    """May this open round pass to another worker (see the module docstring)?"""
    rule = ROUND_RULE["release"]
    return row.harness_resume_token is not None and rule.allows(row.status)


def release_execution(
    conn: Connection,
    execution_id: str,
    *,
    now: datetime,
    lease: ManagedInputLease | None,
    pending_only: bool = False,
) -> bool:
    """Release the execution and its resumable round, inside the caller's
    transaction, after the caller's checks of the execution (its worker's live
    lease; or, `lease` None, recovery: the lease expired). False, and nothing
    written, when it has no single open round that may pass on (`pending_only`:
    that is still pending: one answered meanwhile its worker delivers itself)."""
    found = open_rounds(conn, execution_id)
    if len(found) != 1 or not resumable(found[0]):
        return False
    if pending_only and found[0].status != ManagedInputStatus.PENDING.value:
        return False
    method = "release" if lease is not None else "release_recovery"
    move = check_round(ROUND_RULE[method], found[0], now=now, lease=lease)
    execution_rule = EXECUTION_RULE[method]
    assert execution_rule.to_state is not None
    released = conn.execute(
        executions.update()
        .where(executions.c.execution_id == execution_id)
        .where(executions.c.lifecycle.in_(execution_rule.open_states()))
        .values(
            lifecycle=execution_rule.to_state.value,
            worker_owner_id=None,
            worker_lease_token=None,
            worker_lease_expires_at=None,
            updated_at=now,
        )
    )
    if released.rowcount != 1:
        return False
    write_round(conn, move, owner_id=None, lease_token=None, lease_expires_at=None)
    return True


def adopt_rounds(
    conn: Connection, execution_id: str, lease: ManagedInputLease, *, now: datetime
) -> str | None:
    """The claimer of a released execution adopts its released round (in the
    claim's transaction): the round takes the new execution lease. Returns its ID."""
    adopted: str | None = None
    for row in open_rounds(conn, execution_id):
        move = check_round(ROUND_RULE["adopt_round"], row, now=now)
        write_round(
            conn,
            move,
            owner_id=lease.owner_id,
            lease_token=lease.lease_token,
            lease_expires_at=lease.expires_at,
        )
        adopted = row.round_id
    return adopted
