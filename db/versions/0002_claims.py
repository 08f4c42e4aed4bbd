"""claims: which trial builds and evaluates a candidate on a kind of device right now

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "evo_claims",
        sa.Column("build_id", sa.String(64), nullable=False),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("study", sa.String(200), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("claimed", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("build_id", "device", name="pk_evo_claims"),
    )


def downgrade() -> None:
    op.drop_table("evo_claims")
