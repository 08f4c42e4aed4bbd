"""evo's pruner: a screened trial goes on to the full protocol only if it could lead a bucket.

A search reports each candidate's screen (:mod:`evo.search.screen`) through Optuna's pruning
interface: the screened values in the trial's user attr ``screen`` (the screened score under
``all`` and one value per bucket, head dim x causal), the screened score as the intermediate
value of step 0 (:data:`SCREEN_STEP`) where the study has one objective, and then
``trial.should_prune()`` (:mod:`evo.search.rungs`). The study's pruner decides; any Optuna
pruner can take this one's place (``evo.run(pruner=...)``).

:class:`EvoPruner` keeps a trial when its screened score (``all``) is at least ``1 - margin``
times the ``top``-th best screened score of the study's other trials, or when in some bucket its
screened value beats the ``top``-th best screened value there by ``lead`` too (screens are compared
with screens only: a screen times the candidate alone against a cached baseline, the full rung
beside it, so the two are not on one scale), or when fewer than ``top`` other trials were screened
there. With the defaults (``top`` 1, ``margin`` 0, ``lead`` 0.01) a candidate goes on to the full
protocol when its screened score beats every screen before it, or its screen leads some bucket by
at least 1 %: the first ones always, then fewer and fewer. It prunes the rest, which are stored
``pruned`` and never ranked.

Why ``lead``: the screen is off its candidate's full score by a median 1 % (dev/perf-notes.md), and
on an H100 at git 30cb384, 8 of the 13 candidates a 290 s run kept led one bucket only, most by
0.2-0.9 %: each cost a full rung (15-16 s of GPU, against 2 s for a screen) to settle what the
screen cannot tell apart. A candidate that leads the objective itself needs no such lead.

``bar`` (:data:`~evo.vocab.PRUNE_BARS`) says which screens set the overall key's bar. ``screens`` (the default):
the study's screens, so the highest one ever seen, whatever its candidate scored in full.
``incumbent``: the screen of the trial with the ``top``-th best full score (the geometric mean of its
per-case speedups; the screens as before until ``top`` screened trials have one). A lucky screen then
stops barring the candidates after it once its full score is known: at git dc9cd54 on an H200 a
candidate 0.7 % better in full than any the run reported was pruned under a screen that read 0.8 %
over its own candidate's full score, and this bar would have kept it (dev/perf-notes.md,
2026-11-28 k). The buckets' bars stay the screens'.
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from evo.scoring import geomean
from evo.search.params import SPEEDUPS
from evo.search.screen import OVERALL
from evo.vocab import INCUMBENT, PRUNE_BARS, SCREENS

SCREEN_ATTR = "screen"   # the trial's user attr holding its screened values
SCREEN_STEP = 0          # the step its screened score is reported at (single-objective studies)


class EvoPruner(BasePruner):
    """Prunes a screened trial that leads no bucket (module docstring). ``why(number)``: the
    reason of the last verdict on trial ``number``, for the trial's and the store's records."""

    def __init__(self, top: int = 1, margin: float = 0.0, lead: float = 0.01, bar: str = SCREENS) -> None:
        if top < 1 or not 0.0 <= margin < 1.0 or not 0.0 <= lead < 1.0:
            raise ValueError("EvoPruner needs top >= 1, 0 <= margin < 1 and 0 <= lead < 1")
        if bar not in PRUNE_BARS:
            raise ValueError(f"EvoPruner's bar is one of {', '.join(PRUNE_BARS)}; got {bar!r}")
        self.top, self.margin, self.lead, self.bar = top, margin, lead, bar
        self._why: dict[int, str] = {}

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        mine: dict[str, float] = trial.user_attrs.get(SCREEN_ATTR) or {}
        if not mine:
            return False                     # not screened: nothing to judge it by
        screened = [t for t in study.get_trials(deepcopy=False, states=_SCREENED)
                    if t.number != trial.number and t.user_attrs.get(SCREEN_ATTR)]
        others = [t.user_attrs[SCREEN_ATTR] for t in screened]
        incumbents = self._incumbents(screened) if self.bar == INCUMBENT else []
        behind = []
        for key, value in mine.items():
            if key == OVERALL and len(incumbents) >= self.top:
                best = incumbents
            else:
                best = sorted((o[key] for o in others if key in o), reverse=True)
            if len(best) < self.top:
                self._why[trial.number] = f"kept: the first {'screen' if self.top == 1 else 'screens'} of {key}"
                return False
            bar = best[self.top - 1] * (1.0 - self.margin) * (1.0 if key == OVERALL else 1.0 + self.lead)
            if value >= bar:
                self._why[trial.number] = f"kept: leads {key} (screened x{value:.3f} >= x{bar:.3f})"
                return False
            behind.append(f"{key} x{value:.3f} < x{bar:.3f}")
        self._why[trial.number] = "pruned after its screen: leads no bucket (" + ", ".join(behind) + ")"
        return True

    def why(self, number: int) -> str:
        return self._why.pop(number, "")

    def _incumbents(self, screened: list[FrozenTrial]) -> list[float]:
        """The overall screens of the trials timed in full, best full score first (``bar`` incumbent)."""
        full = [t for t in screened if t.state == TrialState.COMPLETE and t.user_attrs.get(SPEEDUPS)
                and OVERALL in t.user_attrs[SCREEN_ATTR]]
        full.sort(key=lambda t: geomean(t.user_attrs[SPEEDUPS].values()), reverse=True)
        return [float(t.user_attrs[SCREEN_ATTR][OVERALL]) for t in full]


_SCREENED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


class ScreenOnlyPruner(BasePruner):
    """Prunes every screened trial: a run that records screens only (``evo run --screen-only``,
    the screen-fidelity recording of a sub-space for ``evo bench-samplers``), where a full rung
    would cost 9 s of GPU a kept candidate and add nothing the recording keeps."""

    WHY = "pruned after its screen: a screen-only run (--screen-only) times no candidate in full"

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return bool(trial.user_attrs.get(SCREEN_ATTR))

    def why(self, number: int) -> str:
        return self.WHY
