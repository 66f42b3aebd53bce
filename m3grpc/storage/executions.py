"""The execution store: executions, their worker leases, results and the event log.

An execution is queued by Submit, claimed by one worker under a lease (which
the worker renews), and finished exactly once. The queue lives in the database,
so several service replicas on one PostgreSQL database share the work.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from m3grpc.errors import (
    ConflictKind,
    ExecutionNotFoundError,
    ManagedInputConflict,
    ManagedInputRecoveryError,
    RoundNotFoundError,
)
from m3grpc.storage import overdue, statements
from m3grpc.storage.changes import (
    CANCEL_REQUESTED,
    EXECUTION_QUEUED,
    Change,
    ChangeListener,
    announce,
)
from m3grpc.storage.clock import Clock, checked_clock, read_clock
from m3grpc.storage.commit_listeners import CommitListeners, discard
from m3grpc.storage.encryption import ResponseCipher
from m3grpc.storage.engine import (
    SQLiteSynchronous,
    add_commit_hook,
    dispose_engine,
    read_transaction,
    remove_commit_hook,
    write_transaction,
)
from m3grpc.storage.events import (
    OwnedEvent,
    StoredEvent,
    last_seq,
    read_events,
    read_owned_events,
)
from m3grpc.storage.handover import adopt_rounds, open_rounds, release_execution
from m3grpc.storage.identifiers import require_identifier
from m3grpc.storage.managed_input import RoundSettle, SqlManagedInputStore
from m3grpc.storage.operations import earned_outcome, record_operation, stored_operations
from m3grpc.storage.schema import RELEASED_ANSWERED, RELEASED_PENDING, executions, rounds
from m3grpc.storage.sealed_rows import check_keys
from m3grpc.storage.statements import RowLike
from m3grpc.storage.store_engine import create_store_engine
from m3grpc.storage.tokens import new_lease_token
from m3grpc.storage.transitions import (
    DEADLINE_FAILURE_CODE,
    EXECUTION_FINISHED_FAILURE_CODE,
    EXECUTION_RULE,
    ROUND_RULE,
    Rule,
    check_round,
    finish_execution,
    finish_recovered,
    write_round,
)
from m3grpc.types import (
    ExecutionOutcome,
    ExecutionResult,
    ExecutionState,
    ExecutionStatus,
    HumanInput,
    ManagedInputLease,
    ManagedInputStatus,
    OperationResult,
)

# Rows per statement of a bulk renewal (well under every backend's bind limit).
_RENEW_CHUNK = 500
# The state create_execution inserts an execution in.
_CREATED = EXECUTION_RULE["create_execution"].creates()
# What claim_next may take: a queued execution, or a released one (waiting for
# input with no worker, see m3grpc.storage.handover) whose round a worker must now
# act on: answered, or past its deadline. A released round waiting for its answer (a
# parked execution) is not claimed: it costs only its rows until a Respond, or its
# deadline. Each kind is found through an index of its own.
_QUEUED = statements.one_of(executions.c.lifecycle, EXECUTION_RULE["claim_next"].open_states())
_ORDER = (executions.c.created_at, executions.c.execution_id)


def _released(
    columns: Sequence[sa.ColumnClause[Any]], sqlite: bool, overdue: bool, tail: str
) -> Any:
    """The executions of released rounds answered (or, `overdue`, still pending past
    their deadline, `now`), from the rounds' index by (status, owner, deadline), in its
    order: `tail` orders by (owner, deadline), which the index gives with the status
    fixed, so a claim reads no further than the first row it can lock. On SQLite the
    index is named, and first in the join (CROSS JOIN keeps the order), as its planner,
    without statistics, would rather walk every waiting execution. One statement per
    kind: PostgreSQL sorted a UNION of the two kinds whole before taking one row (with
    8,600 answered rounds waiting for a worker, 530 ms a claim, bench/scale.py at
    N = 20,000 on two replicas)."""
    hint = " INDEXED BY ix_m3_rounds_released" if sqlite else ""
    states = ", ".join(f"'{state}'" for state in EXECUTION_RULE["claim_released"].open_states())
    names = ", ".join(f"{executions.name}.{column.name}" for column in columns)
    which = f"{RELEASED_PENDING} AND deadline <= :now" if overdue else RELEASED_ANSWERED
    statement = sa.text(
        f"SELECT {names} FROM {rounds.name}{hint}"
        f" {'CROSS JOIN' if sqlite else 'JOIN'} {executions.name}"
        f" ON {executions.name}.execution_id = {rounds.name}.execution_id"
        f" WHERE {which} AND {executions.name}.lifecycle IN ({states})"
        f" AND {executions.name}.worker_owner_id IS NULL {tail}"
    )
    if overdue:
        statement = statement.bindparams(sa.bindparam("now", type_=rounds.c.deadline.type))
    return statement.columns(*columns)


# The released round nearest its deadline first, in the index's order (see `_released`).
_BY_DEADLINE = f"ORDER BY {rounds.name}.owner_id, {rounds.name}.deadline LIMIT 1"
_LOCKED = "FOR UPDATE OF m3_executions SKIP LOCKED"

# claim_next's statements, built once (see m3grpc.storage.statements): the oldest
# queued execution, and of each kind of released one the one nearest its deadline;
# keyed (PostgreSQL, overdue): locked on PostgreSQL, not on SQLite, whose one writer
# needs no row locks.
_NEXT_QUEUED_SELECT = sa.select(executions).where(_QUEUED).order_by(*_ORDER).limit(1)
_NEXT_QUEUED = statements.Prepared(_NEXT_QUEUED_SELECT)
_NEXT_QUEUED_LOCKED = statements.Prepared(_NEXT_QUEUED_SELECT.with_for_update(skip_locked=True))
_NEXT_RELEASED = {
    (postgres, overdue): statements.Prepared(
        _released(
            list(executions.c),
            not postgres,
            overdue,
            f"{_BY_DEADLINE} {_LOCKED}" if postgres else _BY_DEADLINE,
        )
    )
    for postgres in (False, True)
    for overdue in (False, True)
}
# Unlocked: on PostgreSQL they may see a row another claim is taking (one extra
# claim then finds nothing), never miss one.
_ANY_QUEUED = statements.Prepared(sa.select(executions.c.execution_id).where(_QUEUED).limit(1))
_ANY_RELEASED = {
    (postgres, overdue): statements.Prepared(
        _released([executions.c.execution_id], not postgres, overdue, _BY_DEADLINE)
    )
    for postgres in (False, True)
    for overdue in (False, True)
}

# settled()'s reads, built once: a statement built per call cost more CPU than
# running it (SQLAlchemy derives a new statement's cache key); the IDs are one
# expanding parameter, which SQLAlchemy's compiled cache keeps by statement.
_ROUNDS_LEFT_PENDING = sa.select(rounds.c.round_id).where(
    rounds.c.round_id.in_(sa.bindparam("ids", expanding=True)),
    rounds.c.status != ManagedInputStatus.PENDING.value,
)
_EXECUTIONS_FINISHED = sa.select(executions.c.execution_id).where(
    executions.c.execution_id.in_(sa.bindparam("ids", expanding=True)),
    executions.c.lifecycle == ExecutionStatus.FINISHED.value,
)

# The heartbeat's statements (renew_leases), built once: the IDs of a chunk are
# one expanding parameter, which SQLAlchemy's compiled cache keeps by statement.
_RENEWED_EXECUTIONS = (
    sa.select(
        executions.c.execution_id,
        executions.c.worker_owner_id,
        executions.c.worker_lease_token,
        executions.c.lifecycle,
        executions.c.cancel_requested,
    )
    .where(executions.c.execution_id.in_(sa.bindparam("ids", expanding=True)))
    .with_for_update()
)
_RENEW_EXECUTIONS = (
    executions.update()
    .where(executions.c.execution_id.in_(sa.bindparam("b_ids", expanding=True)))
    .where(executions.c.worker_owner_id == sa.bindparam("b_owner_id"))
    .values(
        worker_lease_expires_at=sa.bindparam(
            "v_expires", type_=executions.c.worker_lease_expires_at.type
        )
    )
)
_RENEW_ROUNDS = (
    rounds.update()
    .where(rounds.c.execution_id.in_(sa.bindparam("b_ids", expanding=True)))
    .where(rounds.c.owner_id == sa.bindparam("b_owner_id"))
    .where(rounds.c.status.in_(ROUND_RULE["renew_leases"].open_states()))
    .values(lease_expires_at=sa.bindparam("v_expires", type_=rounds.c.lease_expires_at.type))
)
# Recovery's and the gauges' reads, built once too.
_EXPIRED_EXECUTIONS = (
    sa.select(executions.c.execution_id)
    .where(executions.c.lifecycle != ExecutionStatus.FINISHED.value)
    .where(
        executions.c.worker_lease_expires_at
        <= sa.bindparam("now", type_=executions.c.worker_lease_expires_at.type)
    )
)
_COUNT_QUEUED = (
    sa.select(sa.func.count())
    .select_from(executions)
    .where(executions.c.lifecycle == ExecutionStatus.QUEUED.value)
)
_COUNT_ROUNDS_BY_STATUS = sa.select(rounds.c.status, sa.func.count()).group_by(rounds.c.status)


@functools.cache
def _claim_update(rule: Rule[ExecutionStatus]) -> statements.Prepared:
    """claim_next's UPDATE by `rule`: only a still-claimable execution (no owner,
    in the rule's from-states), so two claimers can never both win."""
    return statements.Prepared(
        statements.update_execution(
            tuple(rule.open_states()),
            (
                "lifecycle",
                "worker_owner_id",
                "worker_lease_token",
                "worker_lease_expires_at",
                "updated_at",
            ),
        ).where(executions.c.worker_owner_id.is_(None))
    )


# Where an execution's trace context is kept in its stored spec document (a key
# no spec field can have); the worker takes it out before the spec is parsed.
TRACE_CONTEXT_KEY = "_m3_trace_context"


def _split_trace_context(stored: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The stored document as (spec, trace context)."""
    spec = dict(stored)
    carrier = spec.pop(TRACE_CONTEXT_KEY, None)
    if not isinstance(carrier, Mapping):
        return spec, {}
    return spec, {str(k): str(v) for k, v in carrier.items()}


@dataclass(frozen=True)
class ClaimedExecution:
    """An execution a worker has claimed: what to run and the lease it runs under."""

    execution_id: str
    spec: dict[str, Any]
    human_input: HumanInput
    lease: ManagedInputLease
    # A released execution claimed again: the resumable round its worker adopted
    # (see m3grpc.storage.handover); None for a queued execution.
    resumed_round_id: str | None = None
    # The W3C trace context Submit ran in (`traceparent`, `tracestate`), so the
    # worker's spans join the submitter's trace; empty when none was traced.
    trace_context: dict[str, str] = field(default_factory=dict)
    # Whether more claimable work was seen at the claim: False lets the worker
    # skip a claim that would find nothing (another write transaction).
    more_claimable: bool = True


@dataclass(frozen=True)
class CreatedExecution:
    state: ExecutionState
    created: bool  # False: an AIP-155 replay of an earlier request_id
    # Claimed in the same transaction (create_execution's `claim_for`).
    claimed: ClaimedExecution | None = None


def _claim(
    conn: Connection,
    execution_id: str,
    lifecycle: ExecutionStatus,
    owner_id: str,
    lease_duration: timedelta,
    now: datetime,
) -> ManagedInputLease | None:
    """Claim the execution, read as `lifecycle` (queued, or released), for `owner_id`:
    its new lease, or None if another worker claimed it first."""
    rule = EXECUTION_RULE["claim_next" if lifecycle is ExecutionStatus.QUEUED else "claim_released"]
    lease = ManagedInputLease(
        owner_id=owner_id, lease_token=new_lease_token(), expires_at=now + lease_duration
    )
    claimed = _claim_update(rule).execute(
        conn,
        {
            "b_execution_id": execution_id,
            "v_lifecycle": rule.target(lifecycle).value,
            "v_worker_owner_id": lease.owner_id,
            "v_worker_lease_token": lease.lease_token,
            "v_worker_lease_expires_at": lease.expires_at,
            "v_updated_at": now,
        },
    )
    return lease if claimed == 1 else None


class SqlExecutionStore:
    """Executions, rounds and events in one database chosen by a URL or SQLite path."""

    persistent = True

    def __init__(
        self,
        database: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = 5000,
        clock: Clock | None = None,
        sqlite_synchronous: SQLiteSynchronous = "FULL",
        cipher: ResponseCipher | None = None,
    ) -> None:
        """`cipher`: encrypt stored responses (m3grpc.storage.encryption); the
        store refuses to open (EncryptionKeyError) when responses are stored
        sealed with a key it is not given."""
        self._clock: Clock = checked_clock(clock)
        self._engine = create_store_engine(
            database, busy_timeout_ms=busy_timeout_ms, sqlite_synchronous=sqlite_synchronous
        )
        self._cipher = cipher
        try:
            check_keys(self._engine, cipher)
        except BaseException:
            dispose_engine(self._engine)
            raise
        self._managed_input_store: SqlManagedInputStore | None = None
        # Every write on the engine, through this store or its managed-input store.
        self._listeners = CommitListeners()
        add_commit_hook(self._engine, self._listeners)

    @property
    def managed_input_store(self) -> SqlManagedInputStore:
        """The ManagedInputStore on the same database, created on first use."""
        if self._managed_input_store is None:
            self._managed_input_store = SqlManagedInputStore(
                self._engine, clock=self._clock, cipher=self._cipher
            )
        return self._managed_input_store

    def add_commit_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every write this process commits to the store."""
        self._listeners.commits.append(listener)

    def remove_commit_listener(self, listener: Callable[[], None]) -> None:
        discard(self._listeners.commits, listener)

    def add_events_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every write this process commits that appended to
        the event log (not after claims, lease renewals and other silent writes)."""
        self._listeners.events.append(listener)

    def remove_events_listener(self, listener: Callable[[], None]) -> None:
        discard(self._listeners.events, listener)

    def add_appended_listener(self, listener: Callable[[list[StoredEvent]], None]) -> None:
        """Call `listener` with the events of every write this process commits that
        appended some, in `seq` order, on the committing thread, before the events
        listeners; SQLite only (elsewhere never: read the log)."""
        self._listeners.appended.append(listener)

    def remove_appended_listener(self, listener: Callable[[list[StoredEvent]], None]) -> None:
        discard(self._listeners.appended, listener)

    def add_change_listener(self, listener: Callable[[list[Change]], None]) -> None:
        """Call `listener` after every write this process commits that announced
        changes (SQLite; on PostgreSQL see `change_listener`), with them, on the
        committing thread: it must be quick and must not raise."""
        self._listeners.changes.append(listener)

    def remove_change_listener(self, listener: Callable[[list[Change]], None]) -> None:
        discard(self._listeners.changes, listener)

    def change_listener(
        self, on_change: Callable[[Change], None], on_live: Callable[[bool], None]
    ) -> ChangeListener | None:
        """A listener for the changes every process commits (not started), or None
        where the database cannot notify other processes (SQLite)."""
        if self.dialect != "postgresql":
            return None
        return ChangeListener(self._engine, on_change, on_live)

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    def now(self) -> datetime:
        return read_clock(self._clock)

    def close(self) -> None:
        remove_commit_hook(self._engine, self._listeners)
        dispose_engine(self._engine)

    # -- submission and reads ---------------------------------------------------

    def has_request_id(self, request_id: str, principal: str | None = None) -> bool:
        """Whether `principal` already submitted an execution with `request_id` (its
        retry is answered by `create_execution`, whatever the queue holds)."""
        with read_transaction(self._engine) as conn:
            found = statements.SELECT_EXECUTION_BY_REQUEST_ID.first(
                conn, {"request_id": _scoped_request_id(request_id, principal)}
            )
            return found is not None

    def create_execution(
        self,
        spec: Mapping[str, Any],
        *,
        human_input: HumanInput,
        request_id: str | None = None,
        trace_context: Mapping[str, str] | None = None,
        principal: str | None = None,
        claim_for: tuple[str, timedelta] | None = None,
        server_name: str | None = None,
    ) -> CreatedExecution:
        """Queue an execution owned by `principal` (None: no authentication). The same
        request_id with the same spec returns the first one; request IDs are scoped
        to the principal, so one principal's ID never finds another's execution.

        `server_name`: the caller named its server binding and the spec holds this
        process's configuration of it (the gRPC service), so the request digest
        covers the name, not the configuration: a retry after the binding's
        configuration changed (a rotated token, another replica's config) is the
        same request. A request stored with a digest of the configuration (before
        this was so) is still found by it.

        `trace_context` (a W3C carrier) is kept beside the spec in its JSON
        document, outside the request digest: a retry from another trace is
        the same submission.

        `claim_for` (owner_id, lease duration): a worker of the submitting process
        has a free slot, so the new execution is also claimed for it (`claim_next`,
        the same move) in the same transaction: one commit instead of two, and no
        claim that looks for it. `CreatedExecution.claimed` is the claim (None for
        a replayed request_id: that execution is left as it is)."""
        if claim_for is not None:
            require_identifier(claim_for[0], "owner_id")
        document = json.loads(json.dumps(dict(spec), sort_keys=True, default=str))
        digested = document if server_name is None else {**document, "server": server_name}
        digest = _request_digest(digested, human_input)
        if trace_context:
            document[TRACE_CONTEXT_KEY] = {str(k): str(v) for k, v in trace_context.items()}
        stored_request_id = _scoped_request_id(request_id, principal) if request_id else None
        with write_transaction(self._engine) as conn:
            if stored_request_id:
                existing = statements.SELECT_EXECUTION_BY_REQUEST_ID.first(
                    conn, {"request_id": stored_request_id}
                )
                if existing is not None:
                    if existing.request_digest != digest and (
                        # Stored before names were digested: its configuration's digest.
                        server_name is None
                        or existing.request_digest != _configuration_digest(document, human_input)
                    ):
                        raise ManagedInputConflict(
                            "this request_id was used for a different submission",
                            conflict_kind=ConflictKind.REQUEST_ID_REUSED,
                            metadata={
                                "request_id": request_id or "",
                                "execution_id": existing.execution_id,
                            },
                        )
                    return CreatedExecution(_state(existing), created=False)
            now = self.now()
            execution_id = f"exe_{uuid.uuid4().hex}"
            statements.INSERT_EXECUTION.execute(
                conn,
                {
                    "execution_id": execution_id,
                    "request_id": stored_request_id,
                    "request_digest": digest,
                    "principal": principal,
                    "spec": document,
                    "human_input": human_input,
                    "lifecycle": _CREATED.value,
                    "cancel_requested": False,
                    "created_at": now,
                    "updated_at": now,
                },
            )
            if claim_for is None:
                # Idle workers of other replicas claim it now rather than at their next poll.
                announce(conn, Change(EXECUTION_QUEUED, execution_id))
                return CreatedExecution(
                    _state(self._load(conn, execution_id, state_only=True)), created=True
                )
            owner_id, lease_duration = claim_for
            lease = _claim(conn, execution_id, _CREATED, owner_id, lease_duration, now)
            # Inserted by this transaction, which holds the write lock: nobody else saw it.
            assert lease is not None
            state = _state(self._load(conn, execution_id, state_only=True))
            spec, carrier = _split_trace_context(document)
            claimed = ClaimedExecution(
                execution_id=execution_id,
                spec=spec,
                human_input=human_input,
                lease=lease,
                trace_context=carrier,
                more_claimable=False,
            )
            return CreatedExecution(state, created=True, claimed=claimed)

    def trace_context(self, execution_id: str) -> dict[str, str]:
        """The W3C trace context the execution was submitted in; empty when none."""
        with read_transaction(self._engine) as conn:
            spec = conn.execute(
                sa.select(executions.c.spec).where(executions.c.execution_id == execution_id)
            ).scalar_one_or_none()
        return _split_trace_context(spec or {})[1]

    def count_queued(self) -> int:
        with read_transaction(self._engine) as conn:
            return int(conn.execute(_COUNT_QUEUED).scalar_one())

    def count_rounds_by_status(self) -> dict[str, int]:
        """How many rounds are in each status (every replica's), for metrics."""
        with read_transaction(self._engine) as conn:
            rows = conn.execute(_COUNT_ROUNDS_BY_STATUS).all()
        return {str(status): int(count) for status, count in rows}

    def settled(
        self, round_ids: Collection[str], execution_ids: Collection[str]
    ) -> tuple[set[str], set[str]]:
        """Of `round_ids`, those no longer pending; of `execution_ids`, those finished.
        One read for every waiter of a process (m3grpc/runtime/shared_poll.py)."""
        left: set[str] = set()
        finished: set[str] = set()
        with read_transaction(self._engine) as conn:
            for chunk in _chunks(round_ids):
                left.update(conn.execute(_ROUNDS_LEFT_PENDING, {"ids": chunk}).scalars())
            for chunk in _chunks(execution_ids):
                finished.update(conn.execute(_EXECUTIONS_FINISHED, {"ids": chunk}).scalars())
        return left, finished

    def ping(self) -> None:
        """One trivial query: raises if the database cannot be reached. For SQLite,
        also that the file is still at its path: pooled connections keep working
        on a file that was moved or deleted, writing to data nobody will read."""
        url = self._engine.url
        if url.get_backend_name() == "sqlite" and url.database:
            os.stat(url.database)  # FileNotFoundError if it is gone
        with read_transaction(self._engine) as conn:
            conn.execute(sa.select(1)).scalar_one()

    def get_state(self, execution_id: str) -> ExecutionState:
        with read_transaction(self._engine) as conn:
            return _state(self._load(conn, execution_id, state_only=True))

    def get_result(self, execution_id: str) -> ExecutionResult | None:
        """The terminal result, or None while the execution is unfinished."""
        with read_transaction(self._engine) as conn:
            row = self._load(conn, execution_id)
        if row.result is None:
            return None
        return ExecutionResult.model_validate(row.result)

    # -- the worker's side --------------------------------------------------------

    def claim_next(self, *, owner_id: str, lease_duration: timedelta) -> ClaimedExecution | None:
        """Claim for `owner_id` the oldest of: the oldest queued execution, the
        released one whose answered round is nearest its deadline, and the released
        one whose round is furthest past its deadline; None when there is none. A
        released execution's round is adopted in the same transaction (see
        m3grpc.storage.handover); one parked while its round waits for an answer is
        not claimed until the answer comes."""
        require_identifier(owner_id, "owner_id")
        with write_transaction(self._engine) as conn:
            locked = conn.dialect.name == "postgresql"
            now = self.now()
            queued = (_NEXT_QUEUED_LOCKED if locked else _NEXT_QUEUED).first(conn, {})
            answered = _NEXT_RELEASED[locked, False].first(conn, {})
            overdue = _NEXT_RELEASED[locked, True].first(conn, {"now": now})
            candidates = [found for found in (queued, answered, overdue) if found is not None]
            if not candidates:
                return None
            row = min(candidates, key=lambda found: (found.created_at, found.execution_id))
            lifecycle = ExecutionStatus(row.lifecycle)
            released = lifecycle is not ExecutionStatus.QUEUED
            lease = _claim(conn, row.execution_id, lifecycle, owner_id, lease_duration, now)
            if lease is None:
                return None  # another worker claimed it first; the caller polls again
            resumed = adopt_rounds(conn, row.execution_id, lease, now=now) if released else None
            more = (
                _ANY_QUEUED.first(conn, {}) is not None
                or _ANY_RELEASED[locked, False].first(conn, {}) is not None
                or _ANY_RELEASED[locked, True].first(conn, {"now": now}) is not None
            )
            spec, trace_context = _split_trace_context(row.spec)
            return ClaimedExecution(
                execution_id=row.execution_id,
                spec=spec,
                human_input=row.human_input,
                lease=lease,
                resumed_round_id=resumed,
                trace_context=trace_context,
                more_claimable=more,
            )

    def release(self, execution_id: str, lease: ManagedInputLease) -> bool:
        """Hand the execution on at a graceful shutdown: if its one open round is
        resumable (m3grpc.storage.handover), the round stays as it is without an
        owner and the execution waits for the next worker's claim. False, and
        nothing changed, otherwise (the worker then finishes it as before)."""
        with write_transaction(self._engine) as conn:
            _row, now = self._guard(conn, execution_id, lease)
            return self._release(conn, execution_id, now=now, lease=lease)

    def park(self, execution_id: str, lease: ManagedInputLease) -> bool:
        """Let go of a running execution whose one open round is resumable and still
        pending: it waits for the answer with no worker (m3grpc.storage.handover),
        and `claim_next` takes it once a Respond answered it. False, and nothing
        changed, otherwise (answered meanwhile: the worker delivers it itself; a
        cancel asked meanwhile: the worker acts on it)."""
        with write_transaction(self._engine) as conn:
            row, now = self._guard(conn, execution_id, lease)
            if row.cancel_requested:
                return False
            return release_execution(conn, execution_id, now=now, lease=lease, pending_only=True)

    def release_expired(self, execution_id: str) -> bool:
        """Recovery's first choice for an execution whose worker's lease expired:
        release it if its round is resumable (True). False: recovery fails it
        closed (`fail_recovery`). ManagedInputRecoveryError if it is held live
        (or was released or claimed meanwhile)."""
        with write_transaction(self._engine) as conn:
            row = self._load(conn, execution_id, for_update=True)
            now = self.now()
            if row.lifecycle == ExecutionStatus.FINISHED.value:
                return False
            if row.worker_lease_expires_at is None or row.worker_lease_expires_at > now:
                raise ManagedInputRecoveryError(
                    "the execution's worker still holds a live lease",
                    metadata={"execution_id": execution_id},
                )
            return self._release(conn, execution_id, now=now, lease=None)

    @staticmethod
    def _release(
        conn: Connection, execution_id: str, *, now: datetime, lease: ManagedInputLease | None
    ) -> bool:
        released = release_execution(conn, execution_id, now=now, lease=lease)
        if released:  # claimable again: wake the other replicas' workers
            announce(conn, Change(EXECUTION_QUEUED, execution_id))
        return released

    def renew_execution(
        self, execution_id: str, lease: ManagedInputLease, *, lease_duration: timedelta
    ) -> tuple[ManagedInputLease, bool]:
        """Extend the worker's lease; returns the new lease and whether cancel was asked."""
        with write_transaction(self._engine) as conn:
            row, now = self._guard(conn, execution_id, lease)
            renewed = lease.model_copy(update={"expires_at": now + lease_duration})
            conn.execute(
                executions.update()
                .where(executions.c.execution_id == execution_id)
                .values(worker_lease_expires_at=renewed.expires_at, updated_at=now)
            )
            return renewed, bool(row.cancel_requested)

    def renew_leases(
        self, owner_id: str, tokens: Mapping[str, str], *, lease_duration: timedelta
    ) -> dict[str, tuple[datetime, bool]]:
        """Extend the leases of the owner's executions (execution_id -> lease token),
        then those of their open rounds.

        A lease that has lapsed is renewed too, as long as nothing fenced it: a
        stalled but live owner keeps its work. Recovery finishing an execution
        clears its owner and token (and fails its rounds), so a matching token
        proves no one has taken over. Returns, per execution still held, the new
        expiry and whether cancel was requested; an execution left out is lost.

        Two transactions, executions then rounds, each locking rows of one table
        only: a round transition locks its round before its execution (start_delivery,
        another replica's fail_recovery), so one transaction holding executions
        while it waits for their rounds deadlocked with it on PostgreSQL. A round
        fenced between the two is not renewed (the update matches owner and status).
        """
        require_identifier(owner_id, "owner_id")
        held: dict[str, tuple[datetime, bool]] = {}
        if not tokens:
            return held
        ids = sorted(tokens)
        now = self.now()
        expires = now + lease_duration
        with write_transaction(self._engine) as conn:
            for start in range(0, len(ids), _RENEW_CHUNK):
                chunk = ids[start : start + _RENEW_CHUNK]
                renewed = [
                    row
                    for row in conn.execute(_RENEWED_EXECUTIONS, {"ids": chunk})
                    if row.worker_owner_id == owner_id
                    and row.worker_lease_token == tokens[row.execution_id]
                    and row.lifecycle != ExecutionStatus.FINISHED.value
                ]
                if not renewed:
                    continue
                conn.execute(
                    _RENEW_EXECUTIONS,
                    {
                        "b_ids": [row.execution_id for row in renewed],
                        "b_owner_id": owner_id,
                        "v_expires": expires,
                    },
                )
                for row in renewed:
                    held[row.execution_id] = (expires, bool(row.cancel_requested))
        if not held:
            return held
        # The rounds an execution opened carry its lease: renew them with it.
        renewed_ids = sorted(held)
        with write_transaction(self._engine) as conn:
            for start in range(0, len(renewed_ids), _RENEW_CHUNK):
                conn.execute(
                    _RENEW_ROUNDS,
                    {
                        "b_ids": renewed_ids[start : start + _RENEW_CHUNK],
                        "b_owner_id": owner_id,
                        "v_expires": expires,
                    },
                )
        return held

    def record_operation(
        self,
        execution_id: str,
        lease: ManagedInputLease,
        result: OperationResult,
        *,
        last: bool = False,
    ) -> None:
        """Store a finished operation's result durably (once per operation); `last`:
        the harness runs no further operation. An operation with a round stores its
        result with the round's resolve/fail instead. Recovery keeps these results."""
        with write_transaction(self._engine) as conn:
            _row, now = self._guard(conn, execution_id, lease)
            record_operation(conn, execution_id, result, last=last, now=now)

    def operation_results(self, execution_id: str) -> list[OperationResult]:
        """The execution's stored operation results, in the order they finished."""
        with read_transaction(self._engine) as conn:
            return stored_operations(conn, execution_id)[0]

    def finish_settling(
        self,
        execution_id: str,
        lease: ManagedInputLease,
        result: ExecutionResult,
        settle: RoundSettle,
    ) -> tuple[ExecutionState, bool]:
        """`finish` by the lease holder, with `settle`'s round resolved with its
        operation's result first, in the same transaction (`resolve`'s move and
        checks): the execution's last round and its finish in one commit. Returns
        (state, whether the round was resolved: False if it could not be from where
        it is; the operation's result is stored all the same)."""
        if settle.execution_id != execution_id:
            raise ValueError("the round to settle is another execution's")
        with write_transaction(self._engine) as conn:
            self._guard(conn, execution_id, lease)
            resolved = self.managed_input_store.resolve_within(conn, settle, lease)
            self._finish(conn, EXECUTION_RULE["finish"], execution_id, result)
            return _state(self._load(conn, execution_id, state_only=True)), resolved

    def finish(
        self, execution_id: str, lease: ManagedInputLease | None, result: ExecutionResult
    ) -> ExecutionState:
        """Finish the execution once. The lease holder finishes a running execution;
        None finishes one that no worker holds (a queued execution being cancelled)."""
        with write_transaction(self._engine) as conn:
            if lease is None:
                row = self._load(conn, execution_id, for_update=True)
                if row.worker_owner_id is not None or row.lifecycle == "finished":
                    raise ManagedInputConflict(
                        "the execution is held by a worker or already finished",
                        conflict_kind=ConflictKind.CONCURRENT_UPDATE,
                        metadata={"execution_id": execution_id},
                    )
                rule = EXECUTION_RULE["request_cancel"]
            else:
                self._guard(conn, execution_id, lease)
                rule = EXECUTION_RULE["finish"]
            self._finish(conn, rule, execution_id, result)
            return _state(self._load(conn, execution_id, state_only=True))

    @staticmethod
    def _finish(
        conn: Connection, rule: Rule[ExecutionStatus], execution_id: str, result: ExecutionResult
    ) -> None:
        """Finish by `rule` after the caller's checks; its open rounds fail
        `execution_finished`."""
        finished = finish_execution(
            conn,
            rule,
            execution_id,
            result,
            round_failure=(
                EXECUTION_FINISHED_FAILURE_CODE,
                f"the execution finished ({result.outcome.value}) before the round",
            ),
        )
        if not finished:
            raise ManagedInputConflict(
                f"the execution cannot finish from where it is ({rule.method})",
                conflict_kind=ConflictKind.CONCURRENT_UPDATE,
                metadata={"execution_id": execution_id},
            )

    def request_cancel(self, execution_id: str) -> ExecutionState:
        """Ask for cancellation. A queued execution finishes cancelled at once; a
        running one is cancelled by its worker, which sees the flag on renewal."""
        with write_transaction(self._engine) as conn:
            row = self._load(conn, execution_id, for_update=True)
            now = self.now()
            cancel = EXECUTION_RULE["request_cancel"]
            if row.worker_owner_id is None and EXECUTION_RULE["cancel_released"].allows(
                row.lifecycle
            ):
                # Released (m3grpc.storage.handover): no worker would see the flag.
                cancel = EXECUTION_RULE["cancel_released"]
            if cancel.allows(row.lifecycle):
                self._finish(
                    conn,
                    cancel,
                    execution_id,
                    ExecutionResult(
                        execution_id=execution_id,
                        outcome=ExecutionOutcome.CANCELLED,
                        failure_code="cancelled",
                        failure_message=(
                            "cancelled before a worker started it"
                            if cancel.method == "request_cancel"
                            else "cancelled while it waited for a worker to resume it"
                        ),
                        finished_at=now,
                    ),
                )
            elif row.lifecycle != ExecutionStatus.FINISHED.value:
                conn.execute(
                    executions.update()
                    .where(executions.c.execution_id == execution_id)
                    .values(cancel_requested=True, updated_at=now)
                )
                # The replica running it cancels at once, not at its next renewal.
                announce(conn, Change(CANCEL_REQUESTED, execution_id))
            return _state(self._load(conn, execution_id))

    # -- recovery ---------------------------------------------------------------

    def expired_execution_ids(self) -> list[str]:
        """Unfinished executions whose worker's lease has expired."""
        now = self.now()
        with read_transaction(self._engine) as conn:
            return list(conn.execute(_EXPIRED_EXECUTIONS, {"now": now}).scalars())

    def fail_recovery(self, execution_id: str) -> ExecutionState:
        """Finish an execution whose worker disappeared: its open rounds fail closed;
        it keeps its stored operation results (see `finish_recovered`)."""
        return self._fail_recovery(execution_id)[0]

    def recover_expired(self, execution_id: str) -> bool:
        """`fail_recovery`, telling whether this call finished the execution (False:
        it had finished already, e.g. another replica's sweep came first)."""
        return self._fail_recovery(execution_id)[1]

    def _fail_recovery(self, execution_id: str) -> tuple[ExecutionState, bool]:
        with write_transaction(self._engine) as conn:
            row = self._load(conn, execution_id, for_update=True)
            now = self.now()
            if row.lifecycle == ExecutionStatus.FINISHED.value:
                return _state(row), False
            if row.worker_lease_expires_at is None or row.worker_lease_expires_at > now:
                raise ManagedInputRecoveryError(
                    "the execution's worker still holds a live lease",
                    metadata={"execution_id": execution_id},
                )
            finish_recovered(conn, execution_id, now=now, failure_message=overdue.RECOVERY_MESSAGE)
            return _state(self._load(conn, execution_id)), True

    # -- the sweep of overdue rounds (m3grpc.storage.overdue) ------------------------

    def next_due(self, after: datetime) -> datetime | None:
        """The earliest instant after `after` at which a pending round's deadline
        passes or a worker's lease runs out; None: nothing is due."""
        with read_transaction(self._engine) as conn:
            found = [
                query.first(conn, {"after": after})
                for query in (overdue.NEXT_DEADLINE, overdue.NEXT_LEASE_EXPIRY)
            ]
        times = [row.due for row in found if row is not None and row.due is not None]
        return min(times, default=None)

    def released_past_deadline(self) -> list[str]:
        """Released executions (no worker) whose round is pending past its deadline."""
        now = self.now()
        with read_transaction(self._engine) as conn:
            rows = overdue.RELEASED_PAST_DEADLINE.all(conn, {"now": now})
        return list(dict.fromkeys(row.execution_id for row in rows))

    def expire_released(
        self, execution_id: str, *, owner_id: str, lease_duration: timedelta
    ) -> tuple[str, ExecutionResult] | None:
        """A released execution whose round's deadline passed while no worker held
        it: what a worker claiming it would do, in one transaction and by the same
        rules: claim it for `owner_id` (`claim_released`, the round `adopt_round`),
        fail the round `operation_timeout` (`fail`) with its operation's failed
        result, and finish the execution (`finish`) with the results stored before
        and the outcome they earn. Returns (round_id, result); None, with nothing
        written, unless it is still released with its round pending past its
        deadline (a worker claimed it, a cancel finished it, another replica's
        sweep came first)."""
        with write_transaction(self._engine) as conn:
            if overdue.RELEASED_EXECUTION.first(conn, {"execution_id": execution_id}) is None:
                return None
            now = self.now()
            found = open_rounds(conn, execution_id)
            if len(found) != 1 or not _past_deadline(found[0], now):
                return None
            released = found[0]
            lease = _claim(
                conn, execution_id, ExecutionStatus.WAITING_FOR_INPUT, owner_id, lease_duration, now
            )
            if lease is None:
                return None
            round_id = adopt_rounds(conn, execution_id, lease, now=now)
            adopted = statements.SELECT_ROUND_FOR_UPDATE.first(conn, {"round_id": round_id})
            assert adopted is not None
            move = check_round(
                ROUND_RULE["fail"],
                adopted,
                now=now,
                lease=lease,
                within=[ManagedInputStatus.PENDING],
            )
            write_round(
                conn,
                move,
                failed_at=now,
                failure_code=DEADLINE_FAILURE_CODE,
                failure_message=overdue.DEADLINE_MESSAGE,
            )
            message = overdue.expired_at_deadline(released.round_id, released.deadline)
            timed_out = OperationResult(
                logical_operation_id=released.logical_operation_id,
                server=released.server,
                operation_kind=released.operation_kind,
                operation_name=released.operation_name,
                ok=False,
                failure_code=DEADLINE_FAILURE_CODE,
                failure_message=message,
            )
            # The script stops at a timed-out round: this was the last operation.
            record_operation(conn, execution_id, timed_out, last=True, now=now)
            operations, _ = stored_operations(conn, execution_id)
            outcome, failure_code, failure_message = earned_outcome(operations)
            result = ExecutionResult(
                execution_id=execution_id,
                outcome=outcome,
                operations=tuple(operations),
                failure_code=failure_code,
                failure_message=failure_message,
                finished_at=now,
            )
            self._guard(conn, execution_id, lease)
            self._finish(conn, EXECUTION_RULE["finish"], execution_id, result)
            return released.round_id, result

    # -- events -------------------------------------------------------------------

    def read_events(
        self,
        *,
        after_seq: int,
        execution_id: str | None = None,
        principal: str | None = None,
        limit: int = 500,
    ) -> list[StoredEvent]:
        with read_transaction(self._engine) as conn:
            return read_events(
                conn,
                after_seq=after_seq,
                execution_id=execution_id,
                principal=principal,
                limit=limit,
            )

    def read_owned_events(self, *, after_seq: int, limit: int = 500) -> list[OwnedEvent]:
        """Every execution's events after `after_seq`, with their executions' principals."""
        with read_transaction(self._engine) as conn:
            return read_owned_events(conn, after_seq=after_seq, limit=limit)

    # -- tenant isolation ----------------------------------------------------------

    def require_visible_execution(self, execution_id: str, principal: str | None) -> None:
        """ExecutionNotFoundError unless the execution exists and, when `principal` is
        given, belongs to it: another principal's execution is indistinguishable
        from one that does not exist."""
        with read_transaction(self._engine) as conn:
            owner = conn.execute(
                sa.select(executions.c.principal).where(executions.c.execution_id == execution_id)
            ).first()
        if owner is None or (principal is not None and owner.principal != principal):
            raise ExecutionNotFoundError(
                f"no execution {execution_id!r}", metadata={"execution_id": execution_id}
            )

    def require_visible_round(self, round_id: str, principal: str | None) -> None:
        """RoundNotFoundError unless the round exists and, when `principal` is given,
        its execution belongs to it."""
        with read_transaction(self._engine) as conn:
            owner = conn.execute(
                sa.select(executions.c.principal)
                .select_from(
                    rounds.join(executions, rounds.c.execution_id == executions.c.execution_id)
                )
                .where(rounds.c.round_id == round_id)
            ).first()
        if owner is None or (principal is not None and owner.principal != principal):
            raise RoundNotFoundError(f"no round {round_id!r}", metadata={"round_id": round_id})

    def last_event_seq(self) -> int:
        with read_transaction(self._engine) as conn:
            return last_seq(conn)

    # -- internals -----------------------------------------------------------------

    def _guard(
        self, conn: Connection, execution_id: str, lease: ManagedInputLease
    ) -> tuple[RowLike, datetime]:
        """The execution's lease columns (locked) if `lease` is its live lease, and now."""
        row = self._load(conn, execution_id, lease_only=True)
        now = self.now()
        if (
            row.worker_owner_id != lease.owner_id
            or row.worker_lease_token != lease.lease_token
            or row.worker_lease_expires_at is None
            or row.worker_lease_expires_at <= now
        ):
            raise ManagedInputConflict(
                "stale execution lease",
                conflict_kind=ConflictKind.STALE_LEASE,
                metadata={"execution_id": execution_id},
            )
        return row, now

    @staticmethod
    def _load(
        conn: Connection,
        execution_id: str,
        *,
        for_update: bool = False,
        state_only: bool = False,
        lease_only: bool = False,
    ) -> RowLike:
        """The execution's row; `state_only`: only what `_state` reads; `lease_only`:
        only the lease columns, locked."""
        query = statements.SELECT_EXECUTION
        if lease_only:
            query = statements.SELECT_EXECUTION_LEASE_FOR_UPDATE
        elif for_update:
            query = statements.SELECT_EXECUTION_FOR_UPDATE
        elif state_only:
            query = statements.SELECT_EXECUTION_STATE
        row = query.first(conn, {"execution_id": execution_id})
        if row is None:
            raise ExecutionNotFoundError(
                f"no execution {execution_id!r}", metadata={"execution_id": execution_id}
            )
        return row


def _past_deadline(row: RowLike, now: datetime) -> bool:
    """A released round still pending past its deadline (what `expire_released` expires)."""
    return (
        row.status == ManagedInputStatus.PENDING.value
        and row.owner_id is None
        and row.deadline is not None
        and row.deadline <= now
    )


def _configuration_digest(document: Mapping[str, Any], human_input: str) -> str:
    """The digest of a request as stored before named bindings were digested by name:
    of the whole spec document, the binding's configuration included (without the
    trace context, which no digest covers)."""
    spec = {key: value for key, value in document.items() if key != TRACE_CONTEXT_KEY}
    return _request_digest(spec, human_input)


def _request_digest(document: Mapping[str, Any], human_input: str) -> str:
    return hashlib.sha256(json.dumps([document, human_input], sort_keys=True).encode()).hexdigest()


def _scoped_request_id(request_id: str, principal: str | None) -> str:
    """The stored form of a request ID: as sent without authentication, else a
    digest of (principal, request_id), which fits the 200-character column."""
    if principal is None:
        return request_id
    digest = hashlib.sha256(f"{principal}\0{request_id}".encode()).hexdigest()
    return f"principal-sha256:{digest}"


class SQLiteExecutionStore(SqlExecutionStore):
    """The persistent SQLite execution store of the seed: `SQLiteExecutionStore(path)`."""


class EphemeralExecutionStore(SqlExecutionStore):
    """The in-memory (non-persistent) store: data lives in a private temporary
    SQLite file that close() deletes. It cannot hold managed input."""

    persistent = False

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._directory = tempfile.mkdtemp(prefix="m3-ephemeral-")
        super().__init__(
            os.path.join(self._directory, "executions.sqlite"),
            clock=clock,
            sqlite_synchronous="OFF",
        )

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._directory, ignore_errors=True)


def _chunks(ids: Collection[str], size: int = 500) -> Iterator[list[str]]:
    """`ids` in lists of at most `size` (bound parameters per statement stay few)."""
    listed = list(ids)
    for start in range(0, len(listed), size):
        yield listed[start : start + size]


def _state(row: RowLike) -> ExecutionState:
    return ExecutionState(
        execution_id=row.execution_id,
        lifecycle=ExecutionStatus(row.lifecycle),
        outcome=ExecutionOutcome(row.outcome) if row.outcome else None,
        human_input=row.human_input,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
        failure_code=row.failure_code,
        failure_message=row.failure_message,
    )
