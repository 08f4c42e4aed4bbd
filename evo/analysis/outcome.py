"""What a finished search comes to (the end of ``evo run``): where its results are, how fast its
best candidate is against each SDPA baseline, what needs saying about the study, the commands
that can come next on this machine, and all of it with the run's throughput as one JSON document.

The next commands are only those that can work: a replayed study's candidates carry no GREEN
checks of their own, so instead of ``evo promote`` (which ships only kernels gated on a GPU) it
is told to gate its best on a GPU; a study measured without a GPU here is promoted unverified.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evo import paths
from evo.errors import EvoError
from evo.gpu.margin import TOLERANCE_SHARE
from evo.gpu.worker import gpu_count
from evo.results import Shape
from evo.scoring import score
from evo.search.loop import RunSummary
from evo.search.study import study_cases
from evo.store import Store, short_id
from evo.store.engine import safe_url
from evo.vocab import DEFAULT_BASELINE, SDPA_BACKENDS


@dataclass(frozen=True)
class NextStep:
    """A command to run next and what it gives."""

    command: str
    purpose: str


@dataclass(frozen=True)
class RunReport:
    """A search's outcome as ``evo run`` prints it.

    ``speedups``: the best candidate's score against each SDPA backend timed beside it (the
    default baseline first), over the study's ``cases`` FAST cases (None: the cases it was
    timed on). ``done_before``: why the run had nothing to do, when the study already held the
    trials asked for, and how to continue it. ``margin``: a warning when the best kernel passed
    GREEN so close to the tolerance that promote would likely refuse it. ``git_sha``: the commit
    the run recorded (None when it could not tell).
    """

    summary: RunSummary
    location: str
    cases: int | None
    speedups: dict[str, float] = field(default_factory=dict)
    done_before: str = ""
    margin: str = ""
    next_steps: list[NextStep] = field(default_factory=list)
    git_sha: str | None = None

    def document(self) -> dict[str, Any]:
        """The run as one JSON-ready document (``evo run --summary-json``), for a record that
        keeps a search's cost beside its results: the study and the run, its trials by status,
        the best candidate and its speedups, and the throughput :class:`RunSummary` defines.
        ``candidates_per_gpu_hour`` and ``trials_per_gpu_hour`` are null without a GPU (a
        replay's rate is ``candidates_per_hour``: per hour of wall time), and every rate is
        null when the search loop never ran. The rungs: ``screened``, ``kept``, ``screen_errors``
        (screened / full score - 1 per candidate timed on both), and ``gpu_s``, the GPU worker's
        own seconds by part, with ``gpu_busy_share`` (their sum over the GPU-time held) and
        ``candidates_per_busy_gpu_hour`` (the candidates measured per hour of them); ``first_gpu_s``,
        how long after the start the GPU began its first candidate."""
        s = self.summary
        best = None if s.best is None else {
            "trial": s.best.number, "candidate_id": s.best.candidate_id, "label": s.best.label,
            "score": s.best.score, "metrics": list(s.metric_names), "values": list(s.best.values),
            "speedups": dict(self.speedups)}
        return {"study": s.study, "source": s.source, "run_id": s.run_id, "device": s.device or None,
                "git_sha": self.git_sha, "requested": s.requested, "trials": s.finished, "study_trials": s.total,
                "counts": dict(s.counts.most_common()), "reused": s.reused, "twins": s.twins, "waited": s.waited,
                "recovered": s.recovered, "lost": s.lost, "stopped": s.stopped, "interrupted": s.interrupted,
                "best": best, "measured": s.measured, "wall_s": s.wall_s, "workers": s.workers, "gpus": s.gpus,
                "candidates_per_gpu_hour": s.candidates_per_gpu_hour, "trials_per_gpu_hour": s.trials_per_gpu_hour,
                "candidates_per_hour": s.per_hour(s.measured), "trials_per_hour": s.per_hour(s.finished),
                "screened": s.screened, "kept": s.kept, "screen_errors": list(s.screen_errors),
                "gpu_s": dict(s.gpu_s), "gpu_busy_share": s.busy_share,
                "candidates_per_busy_gpu_hour": s.candidates_per_busy_gpu_hour, "first_gpu_s": s.first_gpu_s}


def run_report(store: Store, summary: RunSummary) -> RunReport:
    """The outcome of ``summary``'s run on ``store``'s database."""
    url = store.url
    cases = study_cases(url, summary.study)
    location = str(paths.sqlite_file(url) or safe_url(url))
    db_flag = "" if url == paths.default_db_url() else f" --db {shlex.quote(location)}"
    run = store.get_run(summary.run_id) if summary.run_id is not None else None
    return RunReport(summary, location, len(cases) if cases else None, best_speedups(store, summary, cases),
                     done_before(summary, db_flag), margin(summary), next_steps(summary, db_flag),
                     run.git_sha if run is not None else None)


def best_speedups(store: Store, summary: RunSummary, cases: Sequence[Shape] | None) -> dict[str, float]:
    """The best candidate's score against each baseline it was timed beside, the default first."""
    if summary.best is None:
        return {}
    cid = summary.best.candidate_id
    _, timings = store.latest_timings([cid]).get(cid, ("", []))
    out = {}
    for backend in sorted(SDPA_BACKENDS, key=lambda b: b != DEFAULT_BASELINE):
        try:
            out[backend] = score(timings, backend, cases)
        except EvoError:  # not timed against this backend (e.g. a recording without it)
            continue
    return out


def done_before(summary: RunSummary, db_flag: str) -> str:
    """Why a run that told no trial had nothing to do, when the study already had its trials."""
    if summary.finished or summary.interrupted or summary.total < summary.requested:
        return ""
    study = shlex.quote(summary.study)
    return (f"study {summary.study} already has {summary.total} trials and --trials asks for {summary.requested}, "
            f"so this run had none to do: `evo run --study {study}{db_flag} --trials M` with M > {summary.total} "
            f"continues it")


def margin(summary: RunSummary) -> str:
    """A warning when the best kernel's GREEN margin is above the share promote verifies at."""
    if summary.best is None or not summary.best.over:
        return ""
    dims = ", ".join(f"D={d}" for d in summary.best.over)
    return (f"its {dims} kernel passed GREEN above {TOLERANCE_SHARE:g} of the tolerance, the share promote "
            f"verifies at: promote will most likely refuse it (the evo sampler does not breed from such kernels)")


def next_steps(summary: RunSummary, db_flag: str) -> list[NextStep]:
    """The commands to run next that can work here, naming the database when it is not the
    default one."""
    best = short_id(summary.best.candidate_id) if summary.best else "ID"
    study = shlex.quote(summary.study)
    steps = [NextStep(f"evo show {best}{db_flag}", "everything stored about the best candidate"),
             NextStep(f"evo lineage --study {study}{db_flag}", "how the search got there, move by move"),
             NextStep(f"evo insights --study {study}{db_flag}", "which moves helped, on which shapes"),
             NextStep(f"evo report --study {study}{db_flag} --out report.html",
                      "all of it on one page: plots and the lineage graph")]
    if summary.source == "replay":
        steps.append(NextStep(f"evo eval --id {best}{db_flag}", "on a GPU: gate and time it for real (promote "
                              "ships only candidates gated on a GPU, which replayed ones are not)"))
    elif summary.source == "gpu" and summary.best is not None:
        steps.append(_promote(study, db_flag))
    return steps


def _promote(study: str, db_flag: str) -> NextStep:
    """``evo promote``, unverified where no GPU is here to verify the winners on."""
    command = f"evo promote --study {study}{db_flag} --name NAME --out DIR"
    if gpu_count() > 0:
        return NextStep(command, "a pip package of the winners")
    return NextStep(f"{command} --no-verify", "a pip package of the winners, unverified (no GPU here to verify on)")
