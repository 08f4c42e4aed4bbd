"""initial schema: runs, candidates, builds, edges, trials, evaluations, checks, timings, insights

Revision ID: 0001
Revises:
Create Date: 2025-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def _shape_columns() -> list[sa.Column]:
    return [
        sa.Column("case", sa.String(32), nullable=False),
        sa.Column("B", sa.Integer(), nullable=False),
        sa.Column("H", sa.Integer(), nullable=False),
        sa.Column("L", sa.Integer(), nullable=False),
        sa.Column("D", sa.Integer(), nullable=False),
        sa.Column("causal", sa.Boolean(), nullable=False),
        sa.Column("dtype", sa.String(8), nullable=False),
    ]


def _index(table: str, *columns: str) -> None:
    op.create_index(f"ix_{table}_{'_'.join(columns)}", table, list(columns))


def upgrade() -> None:
    op.create_table(
        "evo_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study", sa.String(200), nullable=True),
        sa.Column("started", TS, nullable=False),
        sa.Column("finished", TS, nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("git_sha", sa.String(40), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("device", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_evo_runs"),
    )
    _index("evo_runs", "study")

    op.create_table(
        "evo_candidates",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("family", sa.String(100), nullable=False),
        sa.Column("family_version", sa.Integer(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=True),
        sa.Column("arch", sa.String(16), nullable=True),
        sa.Column("flags", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.Column("first_run_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["first_run_id"], ["evo_runs.id"], name="fk_evo_candidates_first_run_id_evo_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_candidates"),
    )
    _index("evo_candidates", "family")
    _index("evo_candidates", "status")
    _index("evo_candidates", "first_run_id")

    op.create_table(
        "evo_builds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("cached", sa.Boolean(), nullable=False),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("cubin_path", sa.Text(), nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["evo_candidates.id"],
                                name="fk_evo_builds_candidate_id_evo_candidates"),
        sa.ForeignKeyConstraint(["run_id"], ["evo_runs.id"], name="fk_evo_builds_run_id_evo_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_builds"),
    )
    _index("evo_builds", "candidate_id")

    op.create_table(
        "evo_edges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.String(64), nullable=False),
        sa.Column("child_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("mutation", sa.JSON(), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["evo_candidates.id"], name="fk_evo_edges_parent_id_evo_candidates"),
        sa.ForeignKeyConstraint(["child_id"], ["evo_candidates.id"], name="fk_evo_edges_child_id_evo_candidates"),
        sa.ForeignKeyConstraint(["run_id"], ["evo_runs.id"], name="fk_evo_edges_run_id_evo_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_edges"),
        sa.UniqueConstraint("parent_id", "child_id", "kind", name="uq_evo_edges_parent_id_child_id_kind"),
    )
    _index("evo_edges", "parent_id")
    _index("evo_edges", "child_id")

    op.create_table(
        "evo_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study", sa.String(200), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.String(64), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["evo_candidates.id"],
                                name="fk_evo_trials_candidate_id_evo_candidates"),
        sa.ForeignKeyConstraint(["run_id"], ["evo_runs.id"], name="fk_evo_trials_run_id_evo_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_trials"),
        sa.UniqueConstraint("study", "trial_number", name="uq_evo_trials_study_trial_number"),
    )
    _index("evo_trials", "candidate_id")

    op.create_table(
        "evo_evaluations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("device_info", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("green_seconds", sa.Float(), nullable=False),
        sa.Column("fast_seconds", sa.Float(), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["evo_candidates.id"],
                                name="fk_evo_evaluations_candidate_id_evo_candidates"),
        sa.ForeignKeyConstraint(["run_id"], ["evo_runs.id"], name="fk_evo_evaluations_run_id_evo_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_evaluations"),
    )
    _index("evo_evaluations", "candidate_id")
    _index("evo_evaluations", "device")

    op.create_table(
        "evo_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("evaluation_id", sa.Integer(), nullable=False),
        *_shape_columns(),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("max_abs_err", sa.Float(), nullable=True),
        sa.Column("ref_err", sa.Float(), nullable=True),
        sa.Column("tolerance", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["evaluation_id"], ["evo_evaluations.id"], ondelete="CASCADE",
                                name="fk_evo_checks_evaluation_id_evo_evaluations"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_checks"),
    )
    _index("evo_checks", "evaluation_id")

    op.create_table(
        "evo_timings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("evaluation_id", sa.Integer(), nullable=False),
        *_shape_columns(),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=False),
        sa.Column("p20_us", sa.Float(), nullable=False),
        sa.Column("p80_us", sa.Float(), nullable=False),
        sa.Column("samples_us", sa.JSON(), nullable=False),
        sa.Column("tflops", sa.Float(), nullable=False),
        sa.Column("flagged", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["evaluation_id"], ["evo_evaluations.id"], ondelete="CASCADE",
                                name="fk_evo_timings_evaluation_id_evo_evaluations"),
        sa.PrimaryKeyConstraint("id", name="pk_evo_timings"),
    )
    _index("evo_timings", "evaluation_id")

    op.create_table(
        "evo_insights",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study", sa.String(200), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("support", sa.Integer(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_evo_insights"),
    )
    _index("evo_insights", "study")


def downgrade() -> None:
    for table in ("evo_insights", "evo_timings", "evo_checks", "evo_evaluations", "evo_trials",
                  "evo_edges", "evo_builds", "evo_candidates", "evo_runs"):
        op.drop_table(table)
