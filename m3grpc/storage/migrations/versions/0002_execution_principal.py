"""Each execution records the principal that submitted it (tenant isolation).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

NULL for executions submitted without authentication (and all earlier ones),
which only callers of a service without authentication, or admins, see.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("m3_executions") as batch:
        batch.add_column(sa.Column("principal", sa.String(200), nullable=True))
        batch.create_index("ix_m3_executions_principal", ["principal"])


def downgrade() -> None:
    with op.batch_alter_table("m3_executions") as batch:
        batch.drop_index("ix_m3_executions_principal")
        batch.drop_column("principal")
