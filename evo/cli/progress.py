"""The progress bar of ``evo run``: trials done of the study's total, rate, ETA and best score.

Every column has a fixed, short width (about 70 characters in all), so the bar stays visible
on an 80-column terminal; a new best candidate is printed above the bar with its full label.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from evo import api

BAR_WIDTH = 20


class RateColumn(ProgressColumn):
    """Trials per second, or seconds per trial when slower than one a second (a GPU search)."""

    def render(self, task: Task) -> Text:
        speed = task.speed
        if not speed:
            return Text("  ?/s", style="progress.data.speed")
        text = f"{speed:.1f}/s" if speed >= 1 else f"{1 / speed:.0f} s/trial"
        return Text(text, style="progress.data.speed")


class EtaColumn(ProgressColumn):
    """``ETA 0:01:30`` while trials remain; ``took 0:02:10`` once the study has all of them."""

    def render(self, task: Task) -> Text:
        seconds = task.finished_time if task.finished else task.time_remaining
        shown = "-:--:--" if seconds is None else _clock(seconds)
        return Text(f"{'took' if task.finished else 'ETA'} {shown}", style="progress.remaining")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class TrialProgress:
    """A :class:`evo.api.Reporter` drawing one rich progress bar."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("trials"), BarColumn(bar_width=BAR_WIDTH), MofNCompleteColumn(),
                                 RateColumn(), EtaColumn(),
                                 TextColumn("{task.fields[best]}"), console=console, transient=False)
        self.task = self.progress.add_task("trials", total=None, best="")
        self.best: float | None = None

    def start(self, total: int, done: int) -> None:
        self.progress.update(self.task, total=total, completed=done)
        self.progress.start()

    def advance(self, number: int, outcome: api.Outcome, best: api.Best | None) -> None:
        if best is not None and (self.best is None or best.score > self.best):
            self.best = best.score
            self.note(f"trial {best.number}: new best x{best.score:.3f} {escape(best.label)}")
        self.progress.update(self.task, advance=1, best="" if best is None else f"best x{best.score:.3f}")

    def note(self, text: str) -> None:
        self.progress.console.print(text, highlight=False)

    def stop(self) -> None:
        """End the bar, if it was drawn (input refused before the search started drew none)."""
        if self.progress.live.is_started:
            self.progress.stop()
