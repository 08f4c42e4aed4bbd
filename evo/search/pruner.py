"""evo's pruner: a screened trial goes on to the full protocol only if it could lead a bucket.

A search reports each candidate's screen (:mod:`evo.search.screen`) through Optuna's pruning
interface: the screened values in the trial's user attr ``screen`` (the screened score under
``all`` and one value per bucket, head dim x causal), the screened score as the intermediate
value of step 0 (:data:`SCREEN_STEP`) where the study has one objective, and then
``trial.should_prune()`` (:mod:`evo.search.rungs`). The study's pruner decides; any Optuna
pruner can take this one's place (``evo.run(pruner=...)``).

:class:`EvoPruner` keeps a trial when, in some bucket or overall, its screened value is at
least ``1 - margin`` times the ``top``-th best screened value of the study's other trials
(screens are compared with screens only: a screen times the candidate alone against a cached
baseline, the full rung beside it, so the two are not on one scale), or when fewer than ``top``
other trials were screened there. With the defaults (``top`` 1, ``margin`` 0) a candidate goes on
to the full protocol when its screen beats every screen before it somewhere: the first ones
always, then fewer and fewer (on the stored H100 studies, a fifth of the candidates of a search
near its optimum led some bucket when they came). It prunes the rest, which are stored
``pruned`` and never ranked.
"""

from __future__ import annotations

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

SCREEN_ATTR = "screen"   # the trial's user attr holding its screened values
SCREEN_STEP = 0          # the step its screened score is reported at (single-objective studies)


class EvoPruner(BasePruner):
    """Prunes a screened trial that leads no bucket (module docstring). ``why(number)``: the
    reason of the last verdict on trial ``number``, for the trial's and the store's records."""

    def __init__(self, top: int = 1, margin: float = 0.0) -> None:
        if top < 1 or not 0.0 <= margin < 1.0:
            raise ValueError("EvoPruner needs top >= 1 and 0 <= margin < 1")
        self.top, self.margin = top, margin
        self._why: dict[int, str] = {}

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        mine: dict[str, float] = trial.user_attrs.get(SCREEN_ATTR) or {}
        if not mine:
            return False                     # not screened: nothing to judge it by
        others = [t.user_attrs[SCREEN_ATTR] for t in study.get_trials(deepcopy=False, states=_SCREENED)
                  if t.number != trial.number and t.user_attrs.get(SCREEN_ATTR)]
        behind = []
        for key, value in mine.items():
            best = sorted((o[key] for o in others if key in o), reverse=True)
            if len(best) < self.top:
                self._why[trial.number] = f"kept: the first {'screen' if self.top == 1 else 'screens'} of {key}"
                return False
            bar = best[self.top - 1] * (1.0 - self.margin)
            if value >= bar:
                self._why[trial.number] = f"kept: leads {key} (screened x{value:.3f} >= x{bar:.3f})"
                return False
            behind.append(f"{key} x{value:.3f} < x{bar:.3f}")
        self._why[trial.number] = "pruned after its screen: leads no bucket (" + ", ".join(behind) + ")"
        return True

    def why(self, number: int) -> str:
        return self._why.pop(number, "")


_SCREENED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
