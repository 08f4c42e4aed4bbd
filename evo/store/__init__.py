"""The lineage database: candidates, builds, edges, trials, evaluations, checks, timings, insights.

``open_store(url)`` opens any SQLAlchemy URL (default: ``evo.paths.default_db_url()``),
migrates it to the latest schema (Alembic, ``db/``) and returns a :class:`Store`; see
:mod:`evo.store.repo` for the API (one module per concern behind it) and :mod:`evo.store.views`
for what reads return.
"""

from __future__ import annotations

from evo import paths
from evo.store.engine import open_engine
from evo.store.candidates import invalid_id, short_id
from evo.store.insights import NewInsight
from evo.store.links import EDGE_KINDS
from evo.store.repo import Store
from evo.store.views import (BuildView, CandidateRecord, CandidateView, EdgeView, EvaluationView, InsightView,
                             RunView, TrialView)

__all__ = ["EDGE_KINDS", "BuildView", "CandidateRecord", "CandidateView", "EdgeView", "EvaluationView",
           "InsightView", "NewInsight", "RunView", "Store", "TrialView", "invalid_id", "open_store", "short_id"]


def open_store(url: str | None = None) -> Store:
    """Open (creating and migrating as needed) the database at ``url``; EvoError if it cannot."""
    url = url or paths.default_db_url()
    return Store(open_engine(url), url)
