"""Issue 35: an ask whose cost does not grow with the study, and no model fit under the ask lock.

No wall-clock assertions: the GP's window is bounded by what it is given, finished trials are
read once, and the hyperparameter search is seen (by instrumenting the lock) to run outside the
lock that serializes the workers' asks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from evo.family.manifest import load_family
from evo.search import driver, internals
from evo.search.driver import RunOptions, run
from evo.search.loop import NullReporter
from evo.search.memo import TrialMemo
from evo.search.prescreen import WINDOW_BEST, WINDOW_RECENT, TinyGp, window
from evo.search import sampler_evo
from evo.search.params import suggest
from evo.search.sampler_evo import EvoSampler, move_records
from evo.store.engine import ProcessLock
from synthetic_sweep import make_recording

FAM = load_family("flash_mma")


@pytest.fixture(autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_window_keeps_the_best_and_the_latest_and_no_more() -> None:
    y = np.random.default_rng(0).random(5000)
    keep = window(y)
    assert len(keep) == WINDOW_BEST + WINDOW_RECENT
    assert set(np.argsort(-y)[:WINDOW_BEST]) <= set(keep)       # the best, the incumbent first of all
    assert set(range(5000 - WINDOW_RECENT, 5000)) - set(np.argsort(-y)[:WINDOW_BEST]) <= set(keep)
    assert list(keep) == sorted(keep)


def test_a_study_smaller_than_the_window_is_fitted_on_all_of_it() -> None:
    assert list(window(np.arange(10.0))) == list(range(10))


def test_the_fit_sees_at_most_the_window_whatever_the_study_size(monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = EvoSampler([FAM], seed=0)
    points = [(c, float(i % 17)) for i, (_, c) in enumerate(sampler.valid_points(FAM)[:600])]
    sizes: list[int] = []
    real = TinyGp.fit.__func__  # type: ignore[attr-defined]

    def fit(cls: type[TinyGp], X: np.ndarray, y: np.ndarray, *a: Any, **kw: Any) -> TinyGp:
        sizes.append(len(X))
        return real(cls, X, y, *a, **kw)

    monkeypatch.setattr(TinyGp, "fit", classmethod(fit))
    X, y = sampler._window(points)
    TinyGp.fit(X, y, ard=True)
    assert len(points) == 600 and sizes == [WINDOW_BEST + WINDOW_RECENT]


def test_a_finished_trial_is_read_once() -> None:
    calls: list[int] = []
    memo = TrialMemo(lambda t: calls.append(t.number) or t.number)
    study = optuna.create_study()
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    running = study.ask()
    for _ in range(2):
        assert [memo(t) for t in study.get_trials(deepcopy=False)] == [0, 1, 2, running.number]
    assert calls == [0, 1, 2, 3, 3]  # the running trial is read every time


def test_each_finished_trial_tells_the_sampler_its_moves_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[int, int] = {}
    real = sampler_evo.move_outcomes

    def counted(t: optuna.trial.FrozenTrial, by_number: Any) -> Any:
        if t.state.is_finished():
            calls[t.number] = calls.get(t.number, 0) + 1
        return real(t, by_number)

    monkeypatch.setattr(sampler_evo, "move_outcomes", counted)
    study = optuna.create_study(direction="maximize", sampler=EvoSampler([FAM], seed=0, warm=False))
    for _ in range(30):
        trial = study.ask()
        _, p = suggest(trial, [FAM])
        study.tell(trial, p["BLOCK_N"] / p["BLOCK_M"] + p["STAGES"] + (2 if p["EXP2"] else 0))
    assert len(calls) >= 29 and set(calls.values()) == {1}
    assert move_records(study.trials)  # mutations were bred and measured, so there were moves to tell


class WatchedLock(ProcessLock):
    """The ask lock, noting whether it is held."""

    held = False

    def __enter__(self) -> ProcessLock:
        out = super().__enter__()
        WatchedLock.held = True
        return out

    def __exit__(self, *exc: object) -> None:
        WatchedLock.held = False
        super().__exit__(*exc)


def test_the_model_never_runs_under_the_ask_lock(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    rec = make_recording(tmp_path / "sweep.json.gz", seed=0)
    fits: list[tuple[bool, bool]] = []   # (searched hyperparameters, under the lock)
    real = TinyGp.fit.__func__  # type: ignore[attr-defined]

    def fit(cls: type[TinyGp], X: np.ndarray, y: np.ndarray, length: Any = None, noise: Any = None,
            ard: bool = False) -> TinyGp:
        fits.append((length is None, WatchedLock.held))
        return real(cls, X, y, length, noise, ard)

    monkeypatch.setattr(TinyGp, "fit", classmethod(fit))
    monkeypatch.setattr(driver, "ProcessLock", WatchedLock)
    opts = RunOptions(replay=rec, db=f"sqlite:///{tmp_path / 'evo.sqlite'}", study="s", batch=4, seed=0,
                      cases=["F1", "F6"], trials=40)
    run(opts, NullReporter())
    # fitted and conditioned while drafting the proposals, before the lock (one worker: every ask takes a draft)
    assert (True, False) in fits and (False, False) in fits
    assert not any(held for _, held in fits)


def test_a_proposal_samplers_parameters_are_written_after_the_ask_lock(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    rec = make_recording(tmp_path / "sweep.json.gz", seed=0)
    writes: list[tuple[int, bool]] = []   # per write of parameters: of how many trials, under the lock
    real = internals._write    # where one_write(_all) puts trials' parameters, in one transaction

    def write(rdb: Any, kept: Any) -> list[int]:
        if any(k.params for k in kept):
            writes.append((sum(bool(k.params) for k in kept), WatchedLock.held))
        return real(rdb, kept)

    monkeypatch.setattr(internals, "_write", write)
    monkeypatch.setattr(driver, "ProcessLock", WatchedLock)
    opts = RunOptions(replay=rec, db=f"sqlite:///{tmp_path / 'evo.sqlite'}", study="s", batch=4, seed=0,
                      cases=["F1", "F6"], trials=12)
    summary = run(opts, NullReporter())
    assert summary.total == 12 and writes == [(4, False)] * 3  # one write per batch of 4, none under the lock
    study = optuna.load_study(study_name="s", storage=opts.db)
    assert all(t.params for t in study.trials)   # every trial still holds its parameters
