"""``evo run``'s progress bar: its rate and ETA follow the recent pace, not the mean since start."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from evo.cli.progress import RATE_WINDOW, RecentRate, TrialProgress, eta


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_is_that_of_the_last_trials() -> None:
    clock = Clock()
    rate = RecentRate(window=5, clock=clock)
    rate.start()
    assert rate.per_second() is None
    for _ in range(100):       # fast at first: 10 trials a second
        clock.now += 0.1
        rate.tick()
    for _ in range(5):         # then one every 6 s
        clock.now += 6.0
        rate.tick()
    assert rate.per_second() == pytest.approx(1 / 6)


def test_the_eta_follows_a_slowdown_that_the_mean_since_start_hides() -> None:
    clock = Clock()
    bar = TrialProgress(Console(file=io.StringIO()), clock=clock)
    bar.start(total=1000, done=0)
    for i in range(400):
        clock.now += 0.1 if i < 300 else 2.0     # 300 at 10/s, then one every 2 s
        bar.advance(i, None, None)  # type: ignore[arg-type]
    task = bar.progress.tasks[0]
    bar.stop()
    assert task.completed == 400
    assert eta(task) == pytest.approx(600 * 2.0)  # the recent pace: 600 left at 2 s each
    mean_since_start = 400 / clock.now
    assert eta(task) > 3 * 600 / mean_since_start   # what the mean since start would say


def test_no_eta_before_the_first_trial() -> None:
    bar = TrialProgress(Console(file=io.StringIO()), clock=Clock())
    bar.start(total=10, done=3)
    task = bar.progress.tasks[0]
    bar.stop()
    assert eta(task) is None and RATE_WINDOW > 1
