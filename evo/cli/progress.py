"""The progress bar of ``evo run``: trials done of the study's total, rate, ETA and best score.

Every column has a fixed, short width (about 70 characters in all), so the bar stays visible
on an 80-column terminal; a new best candidate is printed above the bar with its full label.
The rate and the ETA come from the last ``RATE_WINDOW`` trials (:class:`RecentRate`), not from
the mean since the start: a search whose trials slow down or speed up (a study that grows, a
worker that joins) gets an ETA of its current pace.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from evo.cli.app import api

BAR_WIDTH = 20
RATE_WINDOW = 20  # trials the rate is measured over


class RecentRate:
    """Trials per second over the last ``window`` trials: the trials finished in that window
    over the time they took (the first of them timed from the one before it, or from
    :meth:`start`)."""

    def __init__(self, window: int = RATE_WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._times: deque[float] = deque(maxlen=window + 1)

    def start(self) -> None:
        """Time the next trial from now."""
        self._times.clear()
        self._times.append(self.clock())

    def tick(self) -> None:
        """One trial finished now."""
        self._times.append(self.clock())

    def per_second(self) -> float | None:
        """The recent rate; None before a trial has finished."""
        if len(self._times) < 2 or self._times[-1] <= self._times[0]:
            return None
        return (len(self._times) - 1) / (self._times[-1] - self._times[0])


def _rate(task: Task) -> float | None:
    """The recent rate :class:`TrialProgress` keeps in the task's fields."""
    rate: float | None = task.fields.get("rate")
    return rate


class RateColumn(ProgressColumn):
    """Trials per second, or seconds per trial when slower than one a second (a GPU search)."""

    def render(self, task: Task) -> Text:
        speed = _rate(task)
        if not speed:
            return Text("  ?/s", style="progress.data.speed")
        text = f"{speed:.1f}/s" if speed >= 1 else f"{1 / speed:.0f} s/trial"
        return Text(text, style="progress.data.speed")


class EtaColumn(ProgressColumn):
    """``ETA 0:01:30`` while trials remain; ``took 0:02:10`` once the study has all of them."""

    def render(self, task: Task) -> Text:
        seconds = task.finished_time if task.finished else eta(task)
        shown = "-:--:--" if seconds is None else _clock(seconds)
        return Text(f"{'took' if task.finished else 'ETA'} {shown}", style="progress.remaining")


def eta(task: Task) -> float | None:
    """Seconds until the task's total at its recent rate (None without a total or a rate)."""
    rate = _rate(task)
    if task.total is None or not rate:
        return None
    return max(0.0, task.total - task.completed) / rate


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class TrialProgress:
    """A :class:`evo.api.Reporter` drawing one rich progress bar."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.progress = Progress(TextColumn("trials"), BarColumn(bar_width=BAR_WIDTH), MofNCompleteColumn(),
                                 RateColumn(), EtaColumn(),
                                 TextColumn("{task.fields[best]}"), console=console, transient=False)
        self.task = self.progress.add_task("trials", total=None, best="", rate=None)
        self.best: float | None = None
        self.rate = RecentRate(clock=clock)

    def start(self, total: int, done: int) -> None:
        self.progress.update(self.task, total=total, completed=done)
        self.rate.start()
        self.progress.start()

    def advance(self, number: int, outcome: api.Outcome, best: api.Best | None) -> None:
        if best is not None and (self.best is None or best.score > self.best):
            self.best = best.score
            self.note(f"trial {best.number}: new best x{best.score:.3f} {escape(best.label)}")
        self.rate.tick()
        self.progress.update(self.task, advance=1, rate=self.rate.per_second(),
                             best="" if best is None else f"best x{best.score:.3f}")

    def note(self, text: str) -> None:
        self.progress.console.print(text, highlight=False)

    def stop(self) -> None:
        """End the bar, if it was drawn (input refused before the search started drew none)."""
        if self.progress.live.is_started:
            self.progress.stop()
