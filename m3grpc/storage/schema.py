"""The one SQL schema of M3, shared by every backend (SQLite, PostgreSQL).

Times are stored as integer microseconds since the Unix epoch (UTC) so that
lease expiry is compared in SQL identically on every backend.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Built once: every stored time converts through it (several per transition).
_MICROSECOND = timedelta(microseconds=1)


class UtcMicros(sa.types.TypeDecorator[datetime]):
    """A tz-aware datetime stored as UTC microseconds since the epoch."""

    impl = sa.BigInteger
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> int | None:
        if value is None:
            return None
        return to_micros(value)

    def process_result_value(self, value: int | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return from_micros(value)


def to_micros(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: times must be timezone-aware")
    return (value - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


class PostgresJsonb(sa.types.TypeDecorator[Any]):
    """PostgreSQL's JSONB, with SQLAlchemy's PostgreSQL dialect imported only when a
    PostgreSQL engine uses it: a store on SQLite never loads it (~2 MB a process).
    Used only as JsonDocument's PostgreSQL variant, so a column's own type stays
    `sa.JSON` on every backend (which decides how Python None is stored: JSON null)."""

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        from sqlalchemy.dialects.postgresql import JSONB

        return dialect.type_descriptor(JSONB())


JsonDocument: sa.types.TypeEngine[Any] = sa.JSON().with_variant(PostgresJsonb(), "postgresql")

metadata = sa.MetaData()

# Released rounds (no owner, see m3grpc.storage.handover): answered ones, whose
# executions a worker must claim now, and pending ones by deadline, whose executions
# a worker claims when the deadline passes (a parked execution waits for its answer
# with no worker). The claim finds both through `ix_m3_rounds_released` (status,
# owner, deadline), written with unqualified names, which are the rounds table's
# alone where the claim joins it to the executions table.
RELEASED_ANSWERED = "status = 'response_validated' AND owner_id IS NULL"
RELEASED_PENDING = "status = 'pending' AND owner_id IS NULL"

executions = sa.Table(
    "m3_executions",
    metadata,
    sa.Column("execution_id", sa.String(64), primary_key=True),
    # AIP-155: the same request_id returns the same execution.
    sa.Column("request_id", sa.String(200), nullable=True, unique=True),
    sa.Column("request_digest", sa.String(64), nullable=True),
    sa.Column("spec", JsonDocument, nullable=False),
    sa.Column("human_input", sa.String(16), nullable=False),
    sa.Column("lifecycle", sa.String(32), nullable=False),
    sa.Column("outcome", sa.String(32), nullable=True),
    sa.Column("result", JsonDocument, nullable=True),
    sa.Column("failure_code", sa.String(100), nullable=True),
    sa.Column("failure_message", sa.Text, nullable=True),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, default=False),
    sa.Column("worker_owner_id", sa.String(100), nullable=True),
    sa.Column("worker_lease_token", sa.String(100), nullable=True),
    sa.Column("worker_lease_expires_at", UtcMicros, nullable=True),
    sa.Column("created_at", UtcMicros, nullable=False),
    sa.Column("updated_at", UtcMicros, nullable=False),
    sa.Column("finished_at", UtcMicros, nullable=True),
    # Who submitted it (tenant isolation); NULL when the service has no authentication.
    sa.Column("principal", sa.String(200), nullable=True),
    sa.Index("ix_m3_executions_lifecycle", "lifecycle"),
    sa.Index("ix_m3_executions_principal", "principal"),
    # The sweep's (m3grpc.storage.overdue): leases that run out (NULL once finished).
    sa.Index("ix_m3_executions_lease_expiry", "worker_lease_expires_at"),
)

rounds = sa.Table(
    "m3_managed_input_rounds",
    metadata,
    sa.Column("round_id", sa.String(64), primary_key=True),
    sa.Column(
        "execution_id",
        sa.String(64),
        sa.ForeignKey("m3_executions.execution_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("logical_operation_id", sa.String(200), nullable=False),
    sa.Column("server", sa.String(200), nullable=False),
    sa.Column("operation_kind", sa.String(16), nullable=False),
    sa.Column("operation_name", sa.Text, nullable=False),
    sa.Column("requests", JsonDocument, nullable=False),
    sa.Column("request_state", sa.Text, nullable=True),
    sa.Column("deadline", UtcMicros, nullable=True),
    sa.Column("round_index", sa.Integer, nullable=False),
    sa.Column("round_limit", sa.Integer, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("owner_id", sa.String(100), nullable=True),
    sa.Column("lease_token", sa.String(100), nullable=True),
    sa.Column("lease_expires_at", UtcMicros, nullable=True),
    sa.Column("responses", JsonDocument, nullable=True),
    sa.Column("idempotency_key", sa.String(200), nullable=True),
    sa.Column("response_digest", sa.String(64), nullable=True),
    sa.Column("harness_session_id", sa.String(200), nullable=True),
    sa.Column("harness_resume_token", sa.Text, nullable=True),
    sa.Column("turn_metadata", JsonDocument, nullable=True),
    sa.Column("operation_parameters", JsonDocument, nullable=False),
    sa.Column("delivery_attempts", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", UtcMicros, nullable=False),
    sa.Column("updated_at", UtcMicros, nullable=False),
    sa.Column("response_validated_at", UtcMicros, nullable=True),
    sa.Column("delivery_started_at", UtcMicros, nullable=True),
    sa.Column("delivered_at", UtcMicros, nullable=True),
    sa.Column("resolved_at", UtcMicros, nullable=True),
    sa.Column("failed_at", UtcMicros, nullable=True),
    sa.Column("failure_code", sa.String(100), nullable=True),
    sa.Column("failure_message", sa.Text, nullable=True),
    sa.CheckConstraint("round_index >= 0 AND round_index < round_limit", name="ck_round_index"),
    sa.UniqueConstraint(
        "execution_id", "logical_operation_id", "round_index", name="uq_round_per_operation"
    ),
    sa.Index("ix_m3_rounds_execution_status", "execution_id", "status"),
    sa.Index("ix_m3_rounds_status", "status"),
    # The sweep's (m3grpc.storage.overdue): deadlines and leases that run out.
    sa.Index("ix_m3_rounds_status_deadline", "status", "deadline"),
    sa.Index("ix_m3_rounds_status_lease", "status", "lease_expires_at"),
    sa.Index("ix_m3_rounds_released", "status", "owner_id", "deadline"),
)

# Append-only: every round transition and execution finish appends one row in
# the same transaction. WatchPending resumes from `seq`.
events = sa.Table(
    "m3_events",
    metadata,
    sa.Column(
        "seq",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("execution_id", sa.String(64), nullable=False),
    sa.Column("round_id", sa.String(64), nullable=True),
    sa.Column("status", sa.String(32), nullable=True),
    sa.Column("created_at", UtcMicros, nullable=False),
    sa.Index("ix_m3_events_execution_seq", "execution_id", "seq"),
    sqlite_autoincrement=True,
)

# Each finished operation's result, written when it finishes: in the same
# transaction that resolves (or fails) its round, or on its own for an operation
# without one. Recovery finishes an execution with these results; `last` marks
# the harness's final operation (every operation of the execution completed).
operation_results = sa.Table(
    "m3_operation_results",
    metadata,
    sa.Column(
        "seq",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column(
        "execution_id",
        sa.String(64),
        sa.ForeignKey("m3_executions.execution_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("logical_operation_id", sa.String(200), nullable=False),
    sa.Column("result", JsonDocument, nullable=False),
    sa.Column("last", sa.Boolean, nullable=False),
    sa.Column("recorded_at", UtcMicros, nullable=False),
    sa.UniqueConstraint("execution_id", "logical_operation_id", name="uq_operation_result"),
    sqlite_autoincrement=True,
)
