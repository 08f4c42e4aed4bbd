"""run leases: how long a worker's run counts as alive without another heartbeat

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("evo_runs", sa.Column("alive_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # a plain ALTER TABLE (SQLite 3.35+): batch mode would copy evo_runs, and dropping the
    # original fails the foreign keys of every row that names a run
    op.drop_column("evo_runs", "alive_until")
