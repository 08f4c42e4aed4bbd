"""kernel subsets: the (head dim, dtype, causal) kernels a candidate exports, where a search built fewer than all

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL: every kernel of its family (every candidate written before subsets existed)
    op.add_column("evo_candidates", sa.Column("kernels", sa.JSON(), nullable=True))


def downgrade() -> None:
    # a plain ALTER TABLE drop (SQLite 3.35+), as 0005
    op.drop_column("evo_candidates", "kernels")
