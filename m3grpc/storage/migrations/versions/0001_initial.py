"""The schema as it was when migrations began (m3grpc/storage/schema.py then).

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Self-contained on purpose: a revision must keep producing the same tables when
schema.py moves on, so it names plain types (times are UTC microseconds in a
BIGINT, documents JSON or, on PostgreSQL, JSONB) instead of importing them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _micros() -> sa.types.TypeEngine[int]:
    return sa.BigInteger()


def _seq() -> sa.types.TypeEngine[int]:
    # SQLite's AUTOINCREMENT needs INTEGER PRIMARY KEY.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "m3_executions",
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(200), nullable=True),
        sa.Column("request_digest", sa.String(64), nullable=True),
        sa.Column("spec", _json(), nullable=False),
        sa.Column("human_input", sa.String(16), nullable=False),
        sa.Column("lifecycle", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("result", _json(), nullable=True),
        sa.Column("failure_code", sa.String(100), nullable=True),
        sa.Column("failure_message", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("worker_owner_id", sa.String(100), nullable=True),
        sa.Column("worker_lease_token", sa.String(100), nullable=True),
        sa.Column("worker_lease_expires_at", _micros(), nullable=True),
        sa.Column("created_at", _micros(), nullable=False),
        sa.Column("updated_at", _micros(), nullable=False),
        sa.Column("finished_at", _micros(), nullable=True),
        sa.PrimaryKeyConstraint("execution_id"),
        sa.UniqueConstraint("request_id"),
    )
    op.create_index("ix_m3_executions_lifecycle", "m3_executions", ["lifecycle"])

    op.create_table(
        "m3_managed_input_rounds",
        sa.Column("round_id", sa.String(64), nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("logical_operation_id", sa.String(200), nullable=False),
        sa.Column("server", sa.String(200), nullable=False),
        sa.Column("operation_kind", sa.String(16), nullable=False),
        sa.Column("operation_name", sa.Text(), nullable=False),
        sa.Column("requests", _json(), nullable=False),
        sa.Column("request_state", sa.Text(), nullable=True),
        sa.Column("deadline", _micros(), nullable=True),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("round_limit", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("owner_id", sa.String(100), nullable=True),
        sa.Column("lease_token", sa.String(100), nullable=True),
        sa.Column("lease_expires_at", _micros(), nullable=True),
        sa.Column("responses", _json(), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("response_digest", sa.String(64), nullable=True),
        sa.Column("harness_session_id", sa.String(200), nullable=True),
        sa.Column("harness_resume_token", sa.Text(), nullable=True),
        sa.Column("turn_metadata", _json(), nullable=True),
        sa.Column("operation_parameters", _json(), nullable=False),
        sa.Column("delivery_attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", _micros(), nullable=False),
        sa.Column("updated_at", _micros(), nullable=False),
        sa.Column("response_validated_at", _micros(), nullable=True),
        sa.Column("delivery_started_at", _micros(), nullable=True),
        sa.Column("delivered_at", _micros(), nullable=True),
        sa.Column("resolved_at", _micros(), nullable=True),
        sa.Column("failed_at", _micros(), nullable=True),
        sa.Column("failure_code", sa.String(100), nullable=True),
        sa.Column("failure_message", sa.Text(), nullable=True),
        sa.CheckConstraint("round_index >= 0 AND round_index < round_limit", name="ck_round_index"),
        sa.ForeignKeyConstraint(
            ["execution_id"], ["m3_executions.execution_id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("round_id"),
        sa.UniqueConstraint(
            "execution_id", "logical_operation_id", "round_index", name="uq_round_per_operation"
        ),
    )
    op.create_index(
        "ix_m3_rounds_execution_status", "m3_managed_input_rounds", ["execution_id", "status"]
    )
    op.create_index("ix_m3_rounds_status", "m3_managed_input_rounds", ["status"])

    op.create_table(
        "m3_events",
        sa.Column("seq", _seq(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("round_id", sa.String(64), nullable=True),
        sa.Column("status", sa.String(32), nullable=True),
        sa.Column("created_at", _micros(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_m3_events_execution_seq", "m3_events", ["execution_id", "seq"])

    op.create_table(
        "m3_operation_results",
        sa.Column("seq", _seq(), autoincrement=True, nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("logical_operation_id", sa.String(200), nullable=False),
        sa.Column("result", _json(), nullable=False),
        sa.Column("last", sa.Boolean(), nullable=False),
        sa.Column("recorded_at", _micros(), nullable=False),
        sa.ForeignKeyConstraint(
            ["execution_id"], ["m3_executions.execution_id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("execution_id", "logical_operation_id", name="uq_operation_result"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("m3_operation_results")
    op.drop_table("m3_events")
    op.drop_table("m3_managed_input_rounds")
    op.drop_table("m3_executions")
