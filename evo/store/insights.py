"""Insights: what the insights stage learned about a study (moves, resources, importances).

They are derived data: each computation replaces the study's insights of its kind in one
transaction, so a reader never sees half of one computation and half of another.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select

from evo.store.base import StoreBase
from evo.store.models import Insight
from evo.store.views import InsightView


@dataclass(frozen=True)
class NewInsight:
    """An insight to store (the insights stage computes these)."""

    kind: str
    key: str
    text: str
    stats: dict[str, Any] = field(default_factory=dict)
    support: int = 0
    evidence: list[Any] = field(default_factory=list)


class InsightStore(StoreBase):
    """The insights part of :class:`evo.store.Store`."""

    def replace_insights(self, study: str | None, items: Iterable[NewInsight], kind: str | None = None) -> None:
        """Replace the study's insights (of ``kind``, or all) with ``items`` in one transaction."""
        with self._tx() as s:
            q = delete(Insight).where(Insight.study.is_(None) if study is None else Insight.study == study)
            if kind is not None:
                q = q.where(Insight.kind == kind)
            s.execute(q)
            s.add_all(Insight(study=study, kind=i.kind, key=i.key, text=i.text, stats=dict(i.stats),
                              support=i.support, evidence=list(i.evidence)) for i in items)

    def insights(self, study: str | None = None, kind: str | None = None) -> list[InsightView]:
        q = select(Insight).order_by(Insight.support.desc(), Insight.id)
        if study is not None:
            q = q.where(Insight.study == study)
        if kind is not None:
            q = q.where(Insight.kind == kind)
        with self._read() as s:
            return [InsightView(i.id, i.study, i.kind, i.key, i.text, dict(i.stats), i.support,
                                list(i.evidence), i.created) for i in s.scalars(q)]
