"""Prebuilt statements of the hot path (round transitions and their events).

Building a SQLAlchemy statement costs ~100 us per call, several times the cost
of executing it on SQLite; these are built once with bind parameters and reused.
"""

from __future__ import annotations

import functools

import sqlalchemy as sa

from m3grpc.storage.schema import events, rounds

SELECT_ROUND = sa.select(rounds).where(rounds.c.round_id == sa.bindparam("round_id"))
SELECT_ROUND_FOR_UPDATE = SELECT_ROUND.with_for_update()

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
