"""Where one search-time evaluation spends its time (GPU host): GREEN and FAST of a family's
default, in this process, as the search's worker runs them (baselines cached), twice: the first
pays for the baselines, the second is what every later candidate costs.

Usage: python scripts/profile_eval.py [--screen | --prime] [FAMILY ...]  (default flash_wgmma)

Without ``--screen``: the full rung's quick FAST on F1-F8. With it: the screen `evo run` sends by
default (``rung`` screen, the scoring baseline ``sdpa_default`` paired on the long cases, GREEN to
its first failure) on the screen's cases of F1-F8, and the seconds each case took (from the
worker's progress notes), so that the short cases' set-up can be told from the long cases'
steady-state warm-ups (issue 35). Prints the phase times and cProfile's top functions by own time
and by cumulative time.

With ``--prime``: no candidate; the full rung's prime request `evo run` queues at its start (the
reported backends on every case of F1-F8, :func:`evo.gpu.evaluate.prime`), in a fresh session,
and the seconds between the worker's progress notes (each op's warm-up and samples, and before a
case's first note its input sets, first calls and captures): the start of a run is mostly this.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import secrets
import time
from collections.abc import Callable

import evo.gpu.evaluate
import evo.gpu.timing
from evo.api import fast_shapes
from evo.toolchain.build import build_batch, default_arch
from evo.gpu.evaluate import Session, evaluate
from evo.family.render import render
from evo.results import Status
from evo.family.space import make_candidate
from evo.gpu.worker import EvalRequest
from evo.search.driver import SEARCH_OPTIONS
from evo.search.evaluators import PRIME_ID
from evo.search.screen import screen_cases
from evo.vocab import DEFAULT_BASELINE, FULL, SCREEN

# what `evo run`'s GPU evaluator asks of its worker for a screen (evo.search.driver, evaluators)
SCREEN_OPTIONS = SEARCH_OPTIONS | {"screen_full": True, "rung": SCREEN, "paired": DEFAULT_BASELINE}


class CaseClock:
    """Seconds per FAST case, from the ``FAST <tag>`` notes the worker sends as each case starts."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def note(self, text: str) -> None:
        if text.startswith("FAST ") and len(text.split()) == 2:
            self.marks.append((text.split()[1], time.perf_counter()))

    def seconds(self, end: float) -> list[tuple[str, float]]:
        ends = [t for _, t in self.marks[1:]] + [end]
        return [(tag, stop - start) for (tag, start), stop in zip(self.marks, ends, strict=True)]


def listen(note: Callable[[str], None]) -> None:
    """Send the worker's progress notes of this process to ``note``."""
    for module in (evo.gpu.evaluate, evo.gpu.timing):
        module.progress = note     # type: ignore[attr-defined]


def print_top(prof: cProfile.Profile) -> None:
    """cProfile's top functions by own time, then by cumulative time."""
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(22)
        print("\n".join(line[:150] for line in out.getvalue().splitlines()[6:]))


class NoteTimeline:
    """Every progress note with the seconds since the one before it (the first: since ``start``)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.notes: list[tuple[str, float]] = []

    def note(self, text: str) -> None:
        self.notes.append((text, time.perf_counter()))

    def lines(self) -> list[str]:
        before = [self.start] + [t for _, t in self.notes[:-1]]
        return [f"  {t - b:7.3f} s  {text}" for (text, t), b in zip(self.notes, before, strict=True)]


def profile_prime() -> None:
    """The full rung's prime request on F1-F8 in a fresh session: its note timeline and cProfile's top."""
    timeline = NoteTimeline()
    listen(timeline.note)
    options = SCREEN_OPTIONS | {"rung": FULL, "prime": True}   # what the evaluator's prime sends for the full rung
    request = EvalRequest(PRIME_ID, "", (), False, tuple(fast_shapes("F1-F8", "fp16")), options)
    prof = cProfile.Profile()
    timeline.start = t0 = time.perf_counter()
    prof.enable()
    ev = evaluate(request, Session())
    prof.disable()
    print(f"\n=== prime {FULL}: {time.perf_counter() - t0:.2f} s, {ev.reason}")
    print("\n".join(timeline.lines()))
    print_top(prof)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--screen", action="store_true", help="the search's default screen, per case")
    mode.add_argument("--prime", action="store_true", help="the full rung's prime request, note by note")
    ap.add_argument("families", nargs="*", default=["flash_wgmma"])
    args = ap.parse_args()
    if args.prime:
        profile_prime()
        return
    session = Session()
    shapes = fast_shapes("F1-F8", "fp16")
    cases = screen_cases(shapes) if args.screen else shapes
    base = SCREEN_OPTIONS if args.screen else {"quick": True}
    clock = CaseClock()
    listen(clock.note)
    for family in args.families:
        rendered = render(make_candidate(family, {}))
        (built,) = build_batch([rendered], arch=default_arch())
        assert built.status is Status.BUILT and built.cubin_path, built.reason
        for attempt in ("first", "second"):
            request = EvalRequest(built.build_id, built.cubin_path, rendered.entries, green=True,
                                  fast_cases=tuple(cases), options=base | {"salt": secrets.randbelow(2**31)})
            clock.marks.clear()
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            ev = evaluate(request, session)
            prof.disable()
            end = time.perf_counter()
            print(f"\n=== {family} {attempt}: {ev.status.value} in {end - t0:.2f} s "
                  f"(GREEN {ev.green_seconds:.2f} s, {len(ev.checks)} checks; FAST {ev.fast_seconds:.2f} s, "
                  f"{len(ev.timings)} timings, {ev.device.get('fast_outputs_checked')} outputs checked)")
            print("  " + ", ".join(f"{tag} {s:.3f} s" for tag, s in clock.seconds(end)))
            print_top(prof)


if __name__ == "__main__":
    main()
