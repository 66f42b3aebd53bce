"""Indexes for the sweep of overdue rounds (m3grpc/storage/overdue.py).

Revision ID: 0003
Revises: 0002
Create Date: 2027-01-15

Every replica's sweeper asks, on a timer, for the next deadline of a pending
round, the next worker lease to run out, and what is already past either: with
20,000 paused executions those reads must not scan every round.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("m3_executions") as batch:
        batch.create_index("ix_m3_executions_lease_expiry", ["worker_lease_expires_at"])
    with op.batch_alter_table("m3_managed_input_rounds") as batch:
        batch.create_index("ix_m3_rounds_status_deadline", ["status", "deadline"])
        batch.create_index("ix_m3_rounds_status_lease", ["status", "lease_expires_at"])


def downgrade() -> None:
    with op.batch_alter_table("m3_managed_input_rounds") as batch:
        batch.drop_index("ix_m3_rounds_status_lease")
        batch.drop_index("ix_m3_rounds_status_deadline")
    with op.batch_alter_table("m3_executions") as batch:
        batch.drop_index("ix_m3_executions_lease_expiry")
