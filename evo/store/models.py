"""The lineage database schema: SQLAlchemy 2 typed ORM models (migrated by Alembic, db/).

Every table is prefixed ``evo_`` and Alembic's version table is ``evo_alembic_version``,
because Optuna keeps its own tables (``studies``, ``trials``, ...) and its own
``alembic_version`` in the same database (docs/design.md, Storage). A candidate row is keyed by
its build id (rendered source + flags + arch); everything measured about it hangs off it.
"""

from __future__ import annotations

from datetime import datetime, UTC
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, MetaData, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

VERSION_TABLE = "evo_alembic_version"
PREFIX = "evo_"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """The declarative base of evo's tables (``evo_*``), with constraint names fixed for Alembic."""

    metadata = MetaData(naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    })
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, float: Float(),
                           datetime: DateTime(timezone=True)}


class Run(Base):
    """One invocation of a command that writes (``evo build``, ``evo run``, ...).

    ``alive_until``: a worker's lease (``evo run`` only; NULL for commands that do not beat).
    Its heartbeat pushes it one grace period past the database server's clock; a run still
    ``running`` past it lost its worker and is failed by whoever sees that first
    (:meth:`evo.store.Store.fail_expired_runs`)."""

    __tablename__ = "evo_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str | None] = mapped_column(String(200), index=True)
    started: Mapped[datetime] = mapped_column(default=utcnow)
    finished: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(20), default="running")  # running|done|failed|interrupted
    command: Mapped[str] = mapped_column(Text, default="")
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    git_sha: Mapped[str | None] = mapped_column(String(40))
    host: Mapped[str] = mapped_column(String(255), default="")
    device: Mapped[dict[str, Any]] = mapped_column(default=dict)
    alive_until: Mapped[datetime | None]


class Candidate(Base):
    """A built (or invalid) kernel: family + params rendered, compiled for one arch."""

    __tablename__ = "evo_candidates"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    family: Mapped[str] = mapped_column(String(100), index=True)
    family_version: Mapped[int | None]
    params: Mapped[dict[str, Any]]
    label: Mapped[str] = mapped_column(Text)
    source_hash: Mapped[str | None] = mapped_column(String(64))
    arch: Mapped[str | None] = mapped_column(String(16))
    flags: Mapped[list[Any] | None]
    kernels: Mapped[list[Any] | None]   # [head dim, dtype, causal] of each kernel exported; NULL: all of its family's
    status: Mapped[str] = mapped_column(String(20), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[datetime] = mapped_column(default=utcnow)
    first_run_id: Mapped[int | None] = mapped_column(ForeignKey("evo_runs.id"), index=True)

    builds: Mapped[list[Build]] = relationship(back_populates="candidate", order_by="Build.id")
    evaluations: Mapped[list[EvaluationRow]] = relationship(back_populates="candidate",
                                                            order_by="EvaluationRow.id")


class Build(Base):
    """One build (or cache hit) of a candidate, with its ptxas report per kernel entry."""

    __tablename__ = "evo_builds"

    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[str] = mapped_column(ForeignKey("evo_candidates.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("evo_runs.id"))
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    log: Mapped[str] = mapped_column(Text, default="")
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    cubin_path: Mapped[str | None] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(default=utcnow)

    candidate: Mapped[Candidate] = relationship(back_populates="builds")


class Edge(Base):
    """Lineage: ``child`` came from ``parent`` by a mutation, a crossover, or (model-based
    samplers) is nearest to it; ``mutation`` is ``{param: [old, new]}``."""

    __tablename__ = "evo_edges"
    __table_args__ = (UniqueConstraint("parent_id", "child_id", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    parent_id: Mapped[str] = mapped_column(ForeignKey("evo_candidates.id"), index=True)
    child_id: Mapped[str] = mapped_column(ForeignKey("evo_candidates.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("evo_runs.id"))
    kind: Mapped[str] = mapped_column(String(16))  # mutation|crossover|nearest
    mutation: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created: Mapped[datetime] = mapped_column(default=utcnow)


class Trial(Base):
    """The link between an Optuna trial and the candidate it evaluated."""

    __tablename__ = "evo_trials"
    __table_args__ = (UniqueConstraint("study", "trial_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str] = mapped_column(String(200))
    trial_number: Mapped[int]
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("evo_candidates.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("evo_runs.id"))
    state: Mapped[str] = mapped_column(String(16))
    value: Mapped[float | None]
    created: Mapped[datetime] = mapped_column(default=utcnow)


class Claim(Base):
    """Who builds and evaluates a candidate on one kind of device right now: the Optuna trial
    (``trials.trial_id``) holding the claim. A worker that wants the same build on the same
    device waits for the holder's result instead of measuring it again; a claim whose trial is
    no longer running (finished, or failed by Optuna's heartbeat check) is taken over. No
    foreign key: a claim is taken before the candidate's build is recorded."""

    __tablename__ = "evo_claims"

    build_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    device: Mapped[str] = mapped_column(String(200), primary_key=True)
    trial_id: Mapped[int]
    study: Mapped[str] = mapped_column(String(200))
    trial_number: Mapped[int]
    host: Mapped[str] = mapped_column(String(255), default="")
    claimed: Mapped[datetime] = mapped_column(default=utcnow)


class EvaluationRow(Base):
    """One GREEN and/or FAST pass of a candidate on one device."""

    __tablename__ = "evo_evaluations"

    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[str] = mapped_column(ForeignKey("evo_candidates.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("evo_runs.id"))
    device: Mapped[str] = mapped_column(String(200), default="", index=True)
    device_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    green_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    fast_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created: Mapped[datetime] = mapped_column(default=utcnow)

    candidate: Mapped[Candidate] = relationship(back_populates="evaluations")
    checks: Mapped[list[Check]] = relationship(order_by="Check.id", cascade="all, delete-orphan")
    timings: Mapped[list[TimingRow]] = relationship(order_by="TimingRow.id", cascade="all, delete-orphan")


class _ShapeColumns:
    case: Mapped[str] = mapped_column(String(32))
    B: Mapped[int]
    H: Mapped[int]
    L: Mapped[int]
    D: Mapped[int]
    causal: Mapped[bool]
    dtype: Mapped[str] = mapped_column(String(8))
    Hkv: Mapped[int | None]        # NULL: H (multi-head); see evo.results.Shape
    Lk: Mapped[int | None]         # NULL: L (self-attention)
    align: Mapped[str | None] = mapped_column(String(16))  # NULL: top left
    layout: Mapped[str | None] = mapped_column(String(16))  # NULL: contiguous (docs/kernel-abi.md)
    lens_min: Mapped[int | None]   # NULL: 0 (a lens or paged cache's shortest sequence)
    lens_seed: Mapped[int | None]  # NULL: 0 (the seed of its lengths)
    page_size: Mapped[int | None]  # NULL: no pages


class Check(_ShapeColumns, Base):
    """One GREEN check (shape x seed). Errors are NULL when NaN (SQLite stores NaN as NULL)."""

    __tablename__ = "evo_checks"

    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evo_evaluations.id", ondelete="CASCADE"), index=True)
    seed: Mapped[int]
    passed: Mapped[bool]
    max_abs_err: Mapped[float | None]
    ref_err: Mapped[float | None]
    tolerance: Mapped[float | None]
    reason: Mapped[str] = mapped_column(Text, default="")


class TimingRow(_ShapeColumns, Base):
    """Device-time statistics of one backend on one shape, with the raw samples."""

    __tablename__ = "evo_timings"

    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evo_evaluations.id", ondelete="CASCADE"), index=True)
    backend: Mapped[str] = mapped_column(String(32))
    median_us: Mapped[float]
    p20_us: Mapped[float]
    p80_us: Mapped[float]
    samples_us: Mapped[list[Any]] = mapped_column(default=list)
    tflops: Mapped[float]
    flagged: Mapped[str] = mapped_column(Text, default="")


class Insight(Base):
    """A statistic over edges and trials (e.g. "STAGES 1->2 on D=64: median x1.08, n=14")."""

    __tablename__ = "evo_insights"

    id: Mapped[int] = mapped_column(primary_key=True)
    study: Mapped[str | None] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    stats: Mapped[dict[str, Any]] = mapped_column(default=dict)
    support: Mapped[int] = mapped_column(Integer, default=0)
    evidence: Mapped[list[Any]] = mapped_column(default=list)
    created: Mapped[datetime] = mapped_column(default=utcnow)
