"""cache layouts of decode problems (issue 34): per-sequence lengths and paged caches per check and timing

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("evo_checks", "evo_timings")
COLUMNS = ("layout", "lens_min", "lens_seed", "page_size")


def upgrade() -> None:
    # NULL: a contiguous cache (every row written before cache layouts existed)
    for table in TABLES:
        op.add_column(table, sa.Column("layout", sa.String(16), nullable=True))
        op.add_column(table, sa.Column("lens_min", sa.Integer(), nullable=True))
        op.add_column(table, sa.Column("lens_seed", sa.Integer(), nullable=True))
        op.add_column(table, sa.Column("page_size", sa.Integer(), nullable=True))


def downgrade() -> None:
    # plain ALTER TABLE drops (SQLite 3.35+), as 0004
    for table in TABLES:
        for column in reversed(COLUMNS):
            op.drop_column(table, column)
