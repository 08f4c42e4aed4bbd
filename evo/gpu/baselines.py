"""A GPU worker's baseline timings, kept per rung and re-measured on schedule.

A search compares its candidates with baselines (SDPA backends) that are not timed beside every
candidate: on the screen, the scoring baseline is measured once for the worker and taken from
here for each candidate (:mod:`evo.gpu.evaluate`); on the full rung, the backends reported but
not scored are. Each rung keeps its own :class:`BaselineCache`, because each samples its own
way (a screen's few samples against a screen's, never against the full protocol's).

An entry is stamped with the cache's use count when it was measured (or inherited); once it is
``every`` uses old it is measured again, so drift over a long search is caught. A cache with
``ramp`` (the screen's) measures an entry again sooner at first: 2, 4 and 8 uses after its first
three measurements, then every ``every``. A GPU's clocks at its power limit move as it warms up
over the first minutes of a run, and a screen compares the candidate with a baseline measured
earlier: on an H100 the scoring baseline measured once at the start put the next screens a
median 2.5 % under their full scores (12 of 13 under; git 30cb384, dev/perf-notes.md). A backend that
could not time a case is remembered as such and not asked again until the entry ages.
Measurements made here are kept aside (:meth:`BaselineCache.drain`) so that the evaluation that
made them names them (``baselines_measured``): the parent shares them through the store with
the host's other workers, whose caches :meth:`BaselineCache.inherit` them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from evo.results import Shape, Timing

Measure = Callable[[Shape, tuple[str, ...]], list[Timing]]
"""``measure(shape, backends)``: Timings of those backends on ``shape`` (fewer when one cannot time it)."""


class BaselineCache:
    """Baseline Timings of one rung, per (shape, backend), with their age in uses."""

    def __init__(self, ramp: bool = False) -> None:
        self.uses, self.ramp = 0, ramp
        # (use count when measured or inherited, the Timing or None, times measured or inherited)
        self._entries: dict[tuple[Shape, str], tuple[int, Timing | None, int]] = {}
        self._fresh: list[Timing] = []

    def _due(self, key: tuple[Shape, str], every: int) -> bool:
        """Whether the entry ``key`` is missing or old enough to be measured again (module docstring)."""
        hit = self._entries.get(key)
        if hit is None:
            return True
        stamp, _, n = hit
        return self.uses - stamp >= (min(every, 2 ** n) if self.ramp and n <= 3 else every)

    def get(self, shape: Shape, backends: Sequence[str], every: int, measure: Measure) -> list[Timing]:
        """Timings of ``backends`` on ``shape``: those cached and younger than ``every`` uses, the
        others measured now, together in one call of ``measure`` (in ``backends`` order; a
        backend that cannot time the shape is left out)."""
        due = tuple(b for b in backends if self._due((shape, b), every))
        if due:
            got = {t.backend: t for t in measure(shape, due)}
            for b in due:
                times = self._entries[(shape, b)][2] if (shape, b) in self._entries else 0
                self._entries[(shape, b)] = (self.uses, got.get(b), times + 1)
            self._fresh += got.values()
        return [t for b in backends if (t := self._entries[(shape, b)][1]) is not None]

    def inherit(self, timings: Iterable[Timing]) -> None:
        """Timings another worker measured on this GPU kind, for the (shape, backend) pairs this
        cache holds none of; they age from now like its own (a first measurement, on the ramp)."""
        for t in timings:
            self._entries.setdefault((t.shape, t.backend), (self.uses, t, 1))

    def drain(self) -> list[Timing]:
        """The Timings measured here since the last drain (and forget them)."""
        fresh, self._fresh = self._fresh, []
        return fresh
