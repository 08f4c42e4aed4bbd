"""attention shapes of kernel ABI v2: key/value heads, key length and causal alignment per check and timing

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("evo_checks", "evo_timings")


def upgrade() -> None:
    # NULL: as H, as L, top left (every row written before grouped heads and Lq != Lk existed)
    for table in TABLES:
        op.add_column(table, sa.Column("Hkv", sa.Integer(), nullable=True))
        op.add_column(table, sa.Column("Lk", sa.Integer(), nullable=True))
        op.add_column(table, sa.Column("align", sa.String(16), nullable=True))


def downgrade() -> None:
    # plain ALTER TABLE drops (SQLite 3.35+), as 0003: no copy of the tables
    for table in TABLES:
        for column in ("align", "Lk", "Hkv"):
            op.drop_column(table, column)
