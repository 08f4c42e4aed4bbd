"""Genes as numbers, for the surrogate models of :mod:`evo.search.sampler_gp` and
:mod:`evo.search.sampler_evo`'s pre-screening.

A candidate becomes one row of floats: a family indicator per family (when there are several),
then each family's parameters, in manifest order. A numeric parameter (tile sizes, warps,
stages) keeps its order: log2 of the value scaled to [0, 1] when every value is positive, else
the value scaled to [0, 1]; a two-valued parameter (a flag) is 0 or 1 (its index in the
domain); any other parameter is one-hot over its values. The columns of the other families are
0. Nothing here comes from measurements: the layout is the manifests'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from evo.family.manifest import Family, Value
from evo.family.space import Candidate


def _numeric(values: Sequence[Value]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class Encoder:
    """The column layout of a set of families (see module docstring)."""

    def __init__(self, families: Sequence[Family]) -> None:
        self.families = list(families)
        self._index = {f.name: i for i, f in enumerate(self.families)}
        self.columns: list[str] = [f"family={f.name}" for f in self.families] if len(self.families) > 1 else []
        self._cols: dict[tuple[str, str], list[int]] = {}
        self._scale: dict[tuple[str, str], dict[Value, list[float]]] = {}
        for fam in self.families:
            for name, spec in fam.params.items():
                vals = list(spec.values)
                start = len(self.columns)
                table: dict[Value, list[float]]
                if len(vals) < 2:
                    table = {v: [] for v in vals}
                elif _numeric(vals):
                    nums = [float(v) for v in vals]
                    xs = [math.log2(x) for x in nums] if min(nums) > 0 else nums
                    lo, hi = min(xs), max(xs)
                    table = {v: [(x - lo) / (hi - lo)] for v, x in zip(vals, xs, strict=True)}
                    self.columns.append(f"{fam.name}.{name}")
                elif len(vals) == 2:
                    table = {v: [float(i)] for i, v in enumerate(vals)}
                    self.columns.append(f"{fam.name}.{name}")
                else:
                    table = {v: [1.0 if i == j else 0.0 for j in range(len(vals))] for i, v in enumerate(vals)}
                    self.columns += [f"{fam.name}.{name}={v}" for v in vals]
                self._cols[(fam.name, name)] = list(range(start, len(self.columns)))
                self._scale[(fam.name, name)] = table
        self._rows: dict[Candidate, np.ndarray] = {}  # matrix's rows, each candidate's encoded once

    @property
    def width(self) -> int:
        return len(self.columns)

    def row(self, cand: Candidate) -> np.ndarray:
        """``cand`` as one row of floats (see module docstring)."""
        x = np.zeros(self.width)
        if len(self.families) > 1:
            x[self._index[cand.family]] = 1.0
        for name, v in cand.params:
            cols = self._cols[(cand.family, name)]
            if cols:
                x[cols] = self._scale[(cand.family, name)][v]
        return x

    def matrix(self, cands: Sequence[Candidate]) -> np.ndarray:
        """The rows of ``cands``, one per candidate. Each candidate is encoded once per encoder
        and its row kept (a copy lands in the matrix): the evolutionary sampler encodes the
        study's measured points, its running candidates and the children it screens for every
        proposal, the same candidates again and again (issue 35)."""
        return np.array([self._kept(c) for c in cands]).reshape(len(cands), self.width)

    def _kept(self, cand: Candidate) -> np.ndarray:
        """:meth:`row` of ``cand``, computed on its first use only."""
        got = self._rows.get(cand)
        if got is None:
            got = self._rows[cand] = self.row(cand)
        return got
