"""Prebuilt statements of the hot path (round transitions, claims, finishes, events).

Building a SQLAlchemy statement costs ~100 us per call, several times the cost
of executing it on SQLite (most of it the cache key SQLAlchemy derives from a new
statement; a statement built once keeps its key): these are built once with
bind parameters and reused.
"""

from __future__ import annotations

import functools

import sqlalchemy as sa

from m3grpc.storage.schema import events, executions, operation_results, rounds

SELECT_ROUND = sa.select(rounds).where(rounds.c.round_id == sa.bindparam("round_id"))
SELECT_ROUND_FOR_UPDATE = SELECT_ROUND.with_for_update()
# A round that create_round would clash with: the same ID, or the same
# operation and round_index of the execution.
SELECT_ROUND_CLASH = sa.select(rounds.c.round_id).where(
    sa.or_(
        rounds.c.round_id == sa.bindparam("round_id"),
        sa.and_(
            rounds.c.execution_id == sa.bindparam("execution_id"),
            rounds.c.logical_operation_id == sa.bindparam("logical_operation_id"),
            rounds.c.round_index == sa.bindparam("round_index"),
        ),
    )
)
# Executed with every column's value as parameters (no .values() to build).
INSERT_ROUND = rounds.insert()

SELECT_EXECUTION = sa.select(executions).where(
    executions.c.execution_id == sa.bindparam("execution_id")
)
SELECT_EXECUTION_FOR_UPDATE = SELECT_EXECUTION.with_for_update()
SELECT_EXECUTION_LIFECYCLE = sa.select(executions.c.lifecycle).where(
    executions.c.execution_id == sa.bindparam("execution_id")
)
SELECT_EXECUTION_BY_REQUEST_ID = sa.select(executions).where(
    executions.c.request_id == sa.bindparam("request_id")
)
INSERT_EXECUTION = executions.insert()

SELECT_OPERATION_STORED = (
    sa.select(operation_results.c.seq)
    .where(operation_results.c.execution_id == sa.bindparam("execution_id"))
    .where(operation_results.c.logical_operation_id == sa.bindparam("logical_operation_id"))
)
INSERT_OPERATION_RESULT = operation_results.insert()

INSERT_EVENT = events.insert()


@functools.cache
def update_round(columns: tuple[str, ...]) -> sa.Update:
    """A compare-and-set UPDATE of a round, guarded by the round's ID, status and
    lease token as read (`b_round_id`, `b_status`, `b_lease_token`), setting
    `columns` from the parameters `v_<column>`."""
    return (
        rounds.update()
        .where(rounds.c.round_id == sa.bindparam("b_round_id"))
        .where(rounds.c.status == sa.bindparam("b_status"))
        # NULL-safe: a released round has no lease token until a worker adopts it.
        .where(rounds.c.lease_token.is_not_distinct_from(sa.bindparam("b_lease_token")))
        .values({name: sa.bindparam(f"v_{name}", type_=rounds.c[name].type) for name in columns})
    )


@functools.cache
def update_execution(states: tuple[str, ...], columns: tuple[str, ...]) -> sa.Update:
    """An UPDATE of one execution (`b_execution_id`) that is in one of `states`,
    setting `columns` from the parameters `v_<column>`."""
    return (
        executions.update()
        .where(executions.c.execution_id == sa.bindparam("b_execution_id"))
        .where(executions.c.lifecycle.in_(states))
        .values(
            {name: sa.bindparam(f"v_{name}", type_=executions.c[name].type) for name in columns}
        )
    )
