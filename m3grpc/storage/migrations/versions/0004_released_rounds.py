"""An index of the released rounds, by which claims find their executions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07

A released round (no owner: handed over at a shutdown, or parked while it waits for
its answer) makes its execution claimable once it is answered, or once its deadline
passes. The claim finds those by (status, owner, deadline): a parked round waiting for
its answer costs the claims nothing, so they cost the same with 20,000 parked
executions as with none.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_m3_rounds_released", "m3_managed_input_rounds", ["status", "owner_id", "deadline"]
    )


def downgrade() -> None:
    op.drop_index("ix_m3_rounds_released", "m3_managed_input_rounds")
