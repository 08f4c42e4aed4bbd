"""The screen (which cases, what they say) and evo's pruner rule, on in-memory studies."""

from __future__ import annotations

import math

import optuna
import pytest

from evo.results import Shape, Timing
from evo.search.pruner import SCREEN_ATTR, EvoPruner
from evo.search.screen import OVERALL, screen_cases, screened
from evo.gpu.suites import fast_cases


def test_the_default_screen_is_every_short_case_and_each_buckets_largest() -> None:
    tags = [s.tag for s in screen_cases(fast_cases())]
    assert tags == ["F1-fp16", "F1c-fp16", "F2-fp16", "F2c-fp16", "F3-fp16", "F3c-fp16", "F5-fp16", "F5c-fp16",
                    "F8-fp16", "F8c-fp16"]


def test_the_decode_screen_times_each_layout_of_a_bucket() -> None:
    # D1-D4 are contiguous, D6 ragged and D7 paged in one bucket (D=128, not causal): the largest of each
    assert [s.tag for s in screen_cases(fast_cases(["decode"]))] == ["D3-bf16", "D5c-bf16", "D6-bf16", "D7-bf16"]


def test_a_layout_left_out_of_a_bucket_counts_at_its_own_value() -> None:
    d2, d3, d6, d7 = fast_cases(["D2", "D3", "D6", "D7"])
    cases = [d2, d3, d6, d7]
    screen = screened(_timings({d3: 1.0, d6: 2.0, d7: 16.0}), "sdpa_default", cases)   # D2 stands in at D3's
    assert screen is not None
    assert screen.score == pytest.approx((1.0 * 1.0 * 2.0 * 16.0) ** 0.25)
    assert screen.buckets == pytest.approx({"d128-full": screen.score})
    assert screened(_timings({d3: 1.0, d6: 2.0}), "sdpa_default", cases) is None        # the paged group untimed


def test_a_bucket_of_one_case_is_screened_on_it() -> None:
    (only,) = fast_cases(["F6f"])
    assert screen_cases([only]) == [only]


def _timings(speedups: dict[Shape, float]) -> list[Timing]:
    out = []
    for s, x in speedups.items():
        out += [Timing(s, "evo", 10.0 / x, 10.0 / x, 10.0 / x), Timing(s, "sdpa_default", 10.0, 10.0, 10.0)]
    return out


def test_a_case_left_out_of_the_screen_counts_at_its_buckets_value() -> None:
    f1, f4, f5, f6 = fast_cases(["F1f", "F4f", "F5f", "F6f"])
    cases = [f1, f4, f5, f6]
    screen = screened(_timings({f1: 1.2, f5: 0.8, f6: 1.1}), "sdpa_default", cases)   # F4 not screened
    assert screen is not None
    d64 = math.sqrt(1.2 * 0.8)
    assert screen.buckets == pytest.approx({"d64-full": d64, "d128-full": 1.1})
    assert screen.score == pytest.approx((d64 ** 3 * 1.1) ** 0.25)            # F4 stands in at d64's value
    assert screen.values("geomean") == [screen.score] and screen.values("per-bucket") == list(screen.buckets.values())
    assert screen.attrs()[OVERALL] == pytest.approx(screen.score)


def test_a_bucket_without_a_timed_case_cannot_be_screened() -> None:
    f1, f6 = fast_cases(["F1f", "F6f"])
    assert screened(_timings({f1: 1.2}), "sdpa_default", [f1, f6]) is None


def _study(*screens: dict[str, float]) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for values in screens:
        t = study.ask()
        t.set_user_attr(SCREEN_ATTR, values)
        study.tell(t, state=optuna.trial.TrialState.PRUNED)
    return study


def _judge(pruner: EvoPruner, study: optuna.Study, values: dict[str, float]) -> tuple[bool, str]:
    t = study.ask()
    t.set_user_attr(SCREEN_ATTR, values)
    pruned = pruner.prune(study, study.get_trials(deepcopy=False)[-1])
    return pruned, pruner.why(t.number)


def test_the_first_screen_is_kept() -> None:
    pruned, why = _judge(EvoPruner(), _study(), {"all": 0.5, "d64-full": 0.5})
    assert not pruned and "first" in why


def test_a_screen_that_leads_some_bucket_is_kept_and_one_that_leads_none_is_pruned() -> None:
    study = _study({"all": 1.10, "d64-full": 1.20, "d128-full": 1.00})
    pruned, why = _judge(EvoPruner(), study, {"all": 1.05, "d64-full": 1.00, "d128-full": 1.10})
    assert not pruned and "leads d128-full" in why
    pruned, why = _judge(EvoPruner(), study, {"all": 1.05, "d64-full": 1.15, "d128-full": 1.05})
    assert pruned and why.startswith("pruned after its screen: leads no bucket") and "d64-full x1.150 < x1.212" in why


def test_top_and_margin_widen_what_counts_as_leading() -> None:
    study = _study({"all": 1.10}, {"all": 1.00})
    assert _judge(EvoPruner(), study, {"all": 1.05})[0]
    assert not _judge(EvoPruner(top=2), study, {"all": 1.05})[0]              # second of three
    assert not _judge(EvoPruner(margin=0.05), study, {"all": 1.05})[0]        # within 5 % of the leader


def test_a_bucket_only_lead_must_clear_the_screens_error_and_the_overall_score_need_not() -> None:
    def study() -> optuna.Study:
        return _study({"all": 1.10, "d64-full": 1.20, "d128-full": 1.00})

    pruned, why = _judge(EvoPruner(), study(), {"all": 1.05, "d64-full": 1.205, "d128-full": 1.005})
    assert pruned and "d64-full x1.205 < x1.212" in why                        # 0.4 % ahead: inside the screen's error
    pruned, why = _judge(EvoPruner(), study(), {"all": 1.05, "d64-full": 1.213, "d128-full": 0.9})
    assert not pruned and "leads d64-full" in why
    pruned, why = _judge(EvoPruner(), study(), {"all": 1.101, "d64-full": 1.0, "d128-full": 0.9})
    assert not pruned and "leads all" in why                                   # the objective: any lead
    assert not _judge(EvoPruner(lead=0.0), study(), {"all": 1.05, "d64-full": 1.205})[0]


def test_a_trial_without_a_screen_is_never_pruned() -> None:
    study = _study({"all": 2.0})
    t = study.ask()
    assert not EvoPruner().prune(study, study.get_trials(deepcopy=False)[-1]) and t.number == 1


@pytest.mark.parametrize(("top", "margin", "lead"), [(0, 0.0, 0.0), (1, -0.1, 0.0), (1, 1.0, 0.0), (1, 0.0, -0.01),
                                                     (1, 0.0, 1.0)])
def test_a_pruner_with_no_sense_is_refused(top: int, margin: float, lead: float) -> None:
    with pytest.raises(ValueError):
        EvoPruner(top, margin, lead)


def _timed(study: optuna.Study, screen: dict[str, float], full: float) -> None:
    """A trial screened at ``screen`` and timed in full at ``full`` on every case (two cases alike)."""
    t = study.ask()
    t.set_user_attr(SCREEN_ATTR, screen)
    t.set_user_attr("speedups", {"F1-fp16": full, "F8-fp16": full})
    study.tell(t, full)


def test_the_incumbents_screen_bars_the_overall_key_once_a_full_score_is_known() -> None:
    """A lucky screen (x1.10, x1.00 in full) bars everything under it with the screens' bar; with
    the incumbent's, the bar is the screen of the best full score (x1.04, x1.05 in full)."""
    study = _study()
    _timed(study, {"all": 1.10}, 1.00)
    _timed(study, {"all": 1.04}, 1.05)
    pruned, why = _judge(EvoPruner(), study, {"all": 1.06})
    assert pruned and "all x1.060 < x1.100" in why
    pruned, why = _judge(EvoPruner(bar="incumbent"), study, {"all": 1.06})
    assert not pruned and "leads all (screened x1.060 >= x1.040)" in why
    assert _judge(EvoPruner(bar="incumbent"), study, {"all": 1.03})[0]
    pruned, why = _judge(EvoPruner(bar="incumbent", top=2), study, {"all": 1.06})      # the second best in full
    assert pruned and "all x1.060 < x1.100" in why
    one = _study({"all": 1.10})
    _timed(one, {"all": 1.04}, 1.05)
    pruned, why = _judge(EvoPruner(bar="incumbent", top=2), one, {"all": 1.03})   # one timed in full: the screens'
    assert pruned and "all x1.030 < x1.040" in why


def test_the_incumbent_bar_is_the_screens_until_a_screened_trial_is_timed_in_full_and_buckets_keep_theirs() -> None:
    study = _study({"all": 1.10, "d64-full": 1.20})
    pruned, why = _judge(EvoPruner(bar="incumbent"), study, {"all": 1.06, "d64-full": 1.0})
    assert pruned and "all x1.060 < x1.100" in why
    _timed(study, {"all": 1.02, "d64-full": 1.30}, 1.05)
    pruned, why = _judge(EvoPruner(bar="incumbent"), study, {"all": 1.01, "d64-full": 1.30})
    assert pruned and "d64-full x1.300 < x1.313" in why                         # the buckets' screens, with the lead


def test_a_pruner_bar_it_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="bar is one of screens, incumbent"):
        EvoPruner(bar="luckiest")
