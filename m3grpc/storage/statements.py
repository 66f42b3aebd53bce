"""Prebuilt statements of the hot path (round transitions, claims, finishes, events).

Building a SQLAlchemy statement costs ~100 us per call, several times the cost
of executing it on SQLite (most of it the cache key SQLAlchemy derives from a new
statement; a statement built once keeps its key): these are built once with
bind parameters and reused.

Executing even a built statement through SQLAlchemy costs ~50 us on SQLite,
about ten times the sqlite3 call itself, and a round transition runs four of
them: the round transitions' statements are `Prepared`, which on SQLite compiles
them once and runs them straight on the driver connection (the same SQL, and
the same conversion of each value to and from its column's type, as SQLAlchemy
would apply). On other databases they run through SQLAlchemy as any statement.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import ReferenceType, WeakKeyDictionary, ref

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Dialect, Row
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler

from m3grpc.storage.schema import events, executions, operation_results, rounds


class StoredRow(dict[str, Any]):
    """A row `Prepared` read straight from the driver: its columns as a dict,
    also readable as attributes and through `_mapping`, as SQLAlchemy's Row is."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def _mapping(self) -> StoredRow:
        return self


# A row of a prebuilt statement: SQLAlchemy's (PostgreSQL) or the driver's (SQLite).
RowLike = Row[Any] | StoredRow
Statement = sa.Select[Any] | sa.Insert | sa.Update | sqlite.Insert

_NO_DEFAULT = object()


@dataclass(frozen=True)
class _Compiled:
    """A statement compiled once for one SQLite dialect: the SQL, where each
    positional parameter comes from (a name in the caller's parameters, else
    the statement's own value) and how its value is bound, and how each result
    column's value is read."""

    sql: str
    binds: tuple[tuple[str, Any, Any], ...]  # (name, own value, bind processor)
    columns: tuple[str, ...]
    readers: tuple[tuple[int, Any], ...]  # (column index, result processor)

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, own, process in self.binds:
            value = params[name] if own is _NO_DEFAULT or name in params else own
            values.append(value if process is None else process(value))
        return values

    def row(self, values: Sequence[Any]) -> StoredRow:
        if self.readers:
            values = list(values)
            for index, read in self.readers:
                values[index] = read(values[index])
        return StoredRow(zip(self.columns, values, strict=True))


class Prepared:
    """A hot-path statement: on SQLite compiled once per dialect and executed on
    the driver connection of the caller's transaction, with driver errors raised
    as SQLAlchemy raises them (`DBAPIError` and its kinds), so the transaction
    helpers (m3grpc.storage.engine) type them the same way; elsewhere executed
    by SQLAlchemy. Rows come as `StoredRow` (SQLite) or `Row`."""

    __slots__ = ("_compiled", "_last", "statement")

    def __init__(self, statement: Statement) -> None:
        self.statement = statement
        self._compiled: WeakKeyDictionary[Dialect, _Compiled] = WeakKeyDictionary()
        # The dialect last run on and its compiled form: one process has one
        # store engine as a rule, and this check is cheaper than the dictionary's.
        self._last: tuple[ReferenceType[Dialect], _Compiled] | None = None

    def first(self, conn: Connection, params: Mapping[str, Any]) -> RowLike | None:
        """The first row, or None."""
        if conn.dialect.driver != "pysqlite":
            return conn.execute(self.statement, params).first()
        compiled, cursor = self._run(conn, params)
        try:
            found = cursor.fetchone()
        finally:
            cursor.close()
        return None if found is None else compiled.row(found)

    def all(self, conn: Connection, params: Mapping[str, Any]) -> list[RowLike]:
        """Every row."""
        if conn.dialect.driver != "pysqlite":
            return list(conn.execute(self.statement, params).all())
        compiled, cursor = self._run(conn, params)
        try:
            found = cursor.fetchall()
        finally:
            cursor.close()
        return [compiled.row(values) for values in found]

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run a statement that returns no rows; the number of rows it changed."""
        if conn.dialect.driver != "pysqlite":
            return int(conn.execute(self.statement, params).rowcount)
        _, cursor = self._run(conn, params)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def insert_rowid(self, conn: Connection, params: Mapping[str, Any]) -> int | None:
        """Run an INSERT of one row; its row ID on SQLite (None elsewhere)."""
        if conn.dialect.driver != "pysqlite":
            conn.execute(self.statement, params)
            return None
        _, cursor = self._run(conn, params)
        try:
            return int(cursor.lastrowid)
        finally:
            cursor.close()

    def _run(self, conn: Connection, params: Mapping[str, Any]) -> tuple[_Compiled, Any]:
        dialect = conn.dialect
        last = self._last
        if last is not None and last[0]() is dialect:
            compiled = last[1]
        else:
            known = self._compiled.get(dialect)
            compiled = known if known is not None else _compile(self.statement, dialect)
            self._compiled[dialect] = compiled
            self._last = (ref(dialect), compiled)
        arguments = compiled.arguments(params)
        try:
            return compiled, conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                compiled.sql, arguments
            )
        except sqlite3.Error as exc:
            # Wrapped as SQLAlchemy wraps driver errors (busy: OperationalError).
            raise DBAPIError.instance(compiled.sql, arguments, exc, sqlite3.Error) from exc


def _compile(statement: Statement, dialect: Dialect) -> _Compiled:
    compiled = statement.compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    if compiled.positiontup is None or "POSTCOMPILE" in compiled.string:
        # Expanding parameters (`in_` of a list) are filled in per execution:
        # a prebuilt statement lists its values as elements (`sa.literal`).
        raise ValueError(f"not a prebuilt statement for {dialect.name}: {compiled.string}")
    binds = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        if bind.callable is not None:
            raise ValueError(f"parameter {name!r} has a callable value")
        # As SQLAlchemy binds it: the caller's value, else the statement's own.
        own = _NO_DEFAULT if bind.required else bind.value
        binds.append((name, own, bind.type.dialect_impl(dialect).bind_processor(dialect)))
    columns: list[str] = []
    readers: list[tuple[int, Any]] = []
    for index, column in enumerate(getattr(statement, "exported_columns", ())):
        columns.append(column.key)
        read = column.type.dialect_impl(dialect).result_processor(dialect, None)
        if read is not None:
            readers.append((index, read))
    return _Compiled(compiled.string, tuple(binds), tuple(columns), tuple(readers))


def one_of(column: sa.ColumnElement[Any], values: Iterable[str]) -> sa.ColumnElement[bool]:
    """`column IN (values)` for a `Prepared` statement: the values listed as elements
    (one bound parameter each), not as one expanding parameter, which `Prepared`
    cannot run since it compiles the SQL once. No values: false."""
    listed = [sa.literal(value) for value in values]
    return column.in_(listed) if listed else sa.false()


def _values(table: sa.Table, columns: tuple[str, ...], prefix: str = "") -> dict[str, Any]:
    """`columns` of `table` set from the parameters `<prefix><column>`, each bound
    as its column's type."""
    return {name: sa.bindparam(prefix + name, type_=table.c[name].type) for name in columns}


_SELECT_ROUND = sa.select(rounds).where(rounds.c.round_id == sa.bindparam("round_id"))
SELECT_ROUND = Prepared(_SELECT_ROUND)
SELECT_ROUND_FOR_UPDATE = Prepared(_SELECT_ROUND.with_for_update())

# What create_round checks before it inserts: the execution's lifecycle (no row:
# no such execution) and a round it would clash with (`clash`): the same ID, or
# the same operation and round_index of the execution.
SELECT_ROUND_PRECONDITIONS = Prepared(
    sa.select(
        executions.c.lifecycle,
        sa.select(rounds.c.round_id)
        .where(
            sa.or_(
                rounds.c.round_id == sa.bindparam("round_id"),
                sa.and_(
                    rounds.c.execution_id == sa.bindparam("execution_id"),
                    rounds.c.logical_operation_id == sa.bindparam("logical_operation_id"),
                    rounds.c.round_index == sa.bindparam("round_index"),
                ),
            )
        )
        .limit(1)
        .scalar_subquery()
        .label("clash"),
    ).where(executions.c.execution_id == sa.bindparam("execution_id"))
)
# The columns create_round sets; the others start NULL.
ROUND_CREATED_COLUMNS = (
    "round_id",
    "execution_id",
    "logical_operation_id",
    "server",
    "operation_kind",
    "operation_name",
    "requests",
    "request_state",
    "deadline",
    "round_index",
    "round_limit",
    "status",
    "owner_id",
    "lease_token",
    "lease_expires_at",
    "harness_session_id",
    "harness_resume_token",
    "turn_metadata",
    "operation_parameters",
    "delivery_attempts",
    "created_at",
    "updated_at",
)
INSERT_ROUND = Prepared(rounds.insert().values(_values(rounds, ROUND_CREATED_COLUMNS)))

_SELECT_EXECUTION = sa.select(executions).where(
    executions.c.execution_id == sa.bindparam("execution_id")
)
SELECT_EXECUTION = Prepared(_SELECT_EXECUTION)
SELECT_EXECUTION_FOR_UPDATE = Prepared(_SELECT_EXECUTION.with_for_update())
# What an ExecutionState shows of an execution: not its spec nor its result,
# documents a state read would decode for nothing.
EXECUTION_STATE_COLUMNS = (
    "execution_id",
    "lifecycle",
    "outcome",
    "human_input",
    "created_at",
    "updated_at",
    "finished_at",
    "failure_code",
    "failure_message",
)
SELECT_EXECUTION_STATE = Prepared(
    sa.select(*(executions.c[name] for name in EXECUTION_STATE_COLUMNS)).where(
        executions.c.execution_id == sa.bindparam("execution_id")
    )
)
# What a worker's lease check reads (SqlExecutionStore._guard), locked: not the
# spec nor the result, documents decoded for nothing on every finish and renewal.
SELECT_EXECUTION_LEASE_FOR_UPDATE = Prepared(
    sa.select(
        executions.c.execution_id,
        executions.c.worker_owner_id,
        executions.c.worker_lease_token,
        executions.c.worker_lease_expires_at,
        executions.c.cancel_requested,
    )
    .where(executions.c.execution_id == sa.bindparam("execution_id"))
    .with_for_update()
)
SELECT_EXECUTION_BY_REQUEST_ID = Prepared(
    sa.select(executions).where(executions.c.request_id == sa.bindparam("request_id"))
)
# The columns create_execution sets; the others start NULL.
INSERT_EXECUTION = Prepared(
    executions.insert().values(
        _values(
            executions,
            (
                "execution_id",
                "request_id",
                "request_digest",
                "principal",
                "spec",
                "human_input",
                "lifecycle",
                "cancel_requested",
                "created_at",
                "updated_at",
            ),
        )
    )
)

SELECT_OPERATION_STORED = Prepared(
    sa.select(operation_results.c.seq)
    .where(operation_results.c.execution_id == sa.bindparam("execution_id"))
    .where(operation_results.c.logical_operation_id == sa.bindparam("logical_operation_id"))
)
_OPERATION_RESULT_VALUES = _values(
    operation_results, ("execution_id", "logical_operation_id", "result", "last", "recorded_at")
)
INSERT_OPERATION_RESULT = Prepared(operation_results.insert().values(_OPERATION_RESULT_VALUES))
# SQLite: the insert that stores an operation's result once (its unique key,
# uq_operation_result), in one statement instead of a SELECT and an INSERT.
INSERT_OPERATION_RESULT_ONCE = Prepared(
    sqlite.insert(operation_results)
    .values(_OPERATION_RESULT_VALUES)
    .on_conflict_do_nothing(index_elements=["execution_id", "logical_operation_id"])
)

INSERT_EVENT = Prepared(
    events.insert().values(
        _values(events, ("kind", "execution_id", "round_id", "status", "created_at"))
    )
)


@functools.cache
def update_round(columns: tuple[str, ...]) -> Prepared:
    """A compare-and-set UPDATE of a round, guarded by the round's ID, status and
    lease token as read (`b_round_id`, `b_status`, `b_lease_token`), setting
    `columns` from the parameters `v_<column>`."""
    return Prepared(
        rounds.update()
        .where(rounds.c.round_id == sa.bindparam("b_round_id"))
        .where(rounds.c.status == sa.bindparam("b_status"))
        # NULL-safe: a released round has no lease token until a worker adopts it.
        .where(rounds.c.lease_token.is_not_distinct_from(sa.bindparam("b_lease_token")))
        .values(_values(rounds, columns, "v_"))
    )


@functools.cache
def advance_round(stamps: tuple[str, ...], count_attempt: bool) -> Prepared:
    """A worker's compare-and-set UPDATE of a round (`b_round_id`) that is in
    `b_status` and held under the live lease `b_owner_id` + `b_lease_token`
    (expiring after `b_now`): sets `v_status`, and `updated_at` and each of
    `stamps` to `v_now`; `count_attempt`: one more delivery attempt. Returns the
    round's new row; no row when any of it does not hold."""
    now = {
        name: sa.bindparam(f"v_now_{name}", type_=rounds.c[name].type)
        for name in (*stamps, "updated_at")
    }
    attempts = {"delivery_attempts": rounds.c.delivery_attempts + 1} if count_attempt else {}
    return Prepared(
        rounds.update()
        .where(rounds.c.round_id == sa.bindparam("b_round_id"))
        .where(rounds.c.status == sa.bindparam("b_status"))
        .where(rounds.c.owner_id == sa.bindparam("b_owner_id"))
        .where(rounds.c.lease_token == sa.bindparam("b_lease_token"))
        .where(
            rounds.c.lease_expires_at > sa.bindparam("b_now", type_=rounds.c.lease_expires_at.type)
        )
        .values(status=sa.bindparam("v_status", type_=rounds.c.status.type), **now, **attempts)
        .returning(*rounds.c)
    )


@functools.cache
def update_execution(states: tuple[str, ...], columns: tuple[str, ...]) -> sa.Update:
    """An UPDATE of one execution (`b_execution_id`) that is in one of `states`,
    setting `columns` from the parameters `v_<column>`."""
    return (
        executions.update()
        .where(executions.c.execution_id == sa.bindparam("b_execution_id"))
        .where(one_of(executions.c.lifecycle, states))
        .values(
            {name: sa.bindparam(f"v_{name}", type_=executions.c[name].type) for name in columns}
        )
    )


@functools.cache
def prepared_update_execution(states: tuple[str, ...], columns: tuple[str, ...]) -> Prepared:
    """`update_execution`, run as a `Prepared` statement."""
    return Prepared(update_execution(states, columns))
