"""A search in rungs on CPU: a stand-in evaluator that screens (no nvcc, no GPU, no worker
process) behind the real loop, store and Optuna study. A pruned candidate is stored ``pruned``
and never ranked, a kept one's full evaluation stores its screened score beside its full score,
a run stopped between a candidate's screen and its full rung loses nothing, and --full-only
times every candidate in full."""

from __future__ import annotations

import itertools
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from evo.family.manifest import load_family
from evo.family.space import all_candidates
from evo.family.render import Rendered
from evo.results import BuildResult, CheckResult, Evaluation, Shape, Status, Timing
from evo.search.evaluators import Evaluator, Job, Unmeasured
from evo.search.loop import Search
from evo.search.objective import names as objective_names
from evo.search.params import trial_params
from evo.search.pruner import SCREEN_ATTR, EvoPruner, ScreenOnlyPruner
from evo.search.resume import Retry
from evo.search.study import open_study, storage
from evo.store import open_store
from evo.gpu.suites import fast_cases
from evo.gpu.timing import steady_case
from evo.vocab import PASSED
from synthetic_sweep import speedup

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")
CASES = fast_cases(["F1", "F3", "F4", "F5", "F6", "F8"])   # short and long cases at D=64, long ones at D=128
DEVICE = "Fake H100"


class Screening(Evaluator):
    """Builds nothing; answers a screen ``green`` and a full rung ``fast`` from the synthetic
    sweep's speedups (the screen reads 1 % high), and keeps every job it was handed and every
    priming (full rung's case tags, screen's, jobs handed before it). ``stop_at``: raise
    KeyboardInterrupt instead of starting that many-th job (Ctrl-C mid-rung)."""

    name, device, arch, host = "gpu", DEVICE, "sm_90a", "h"
    screens = overlaps_builds = True

    def __init__(self, stop_at: int | None = None) -> None:
        self.jobs: list[Job] = []
        self.primed: list[tuple[list[str], list[str], int]] = []
        self.stop_at = stop_at

    def prime(self, cases: Sequence[Shape], screen: Sequence[Shape]) -> None:
        self.primed.append(([s.tag for s in cases], [s.tag for s in screen], len(self.jobs)))

    def primed_seconds(self) -> float:
        return 3.0 if self.primed else 0.0        # the GPU's seconds on the cached baselines at the start

    def paired(self) -> str:
        return "sdpa_default"

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        return [BuildResult(self.build_id(r), r.source_hash, self.arch, (), Status.BUILT, cubin_path="x")
                for r in items]

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        for job in jobs:
            if self.stop_at is not None and len(self.jobs) + 1 == self.stop_at:
                raise KeyboardInterrupt
            self.jobs.append(job)
            yield self.answer(job)

    def answer(self, job: Job) -> Evaluation:
        return answer(job)


def answer(job: Job) -> Evaluation:
    cand = job.rendered.candidate
    screen = job.rung == "screen"
    timings = []
    for s in job.cases:
        x = speedup(cand.family, cand.p, s) * (1.01 if screen else 1.0)
        timings += [Timing(s, "evo", 10.0 / x, 10.0 / x, 10.0 / x), Timing(s, "sdpa_default", 10.0, 10.0, 10.0)]
    checks = [CheckResult(s, 0, True, 1e-4, 1e-4, 1e-3) for s in job.cases[:1]] if job.green else []
    device = {"name": DEVICE, "rung": job.rung} | ({} if screen else {"paired": "sdpa_default"})
    return Evaluation(job.build.build_id, Status.GREEN if screen else Status.FAST, checks=checks, timings=timings,
                      device=device, green_seconds=0.5 * job.green, fast_seconds=1.0 if screen else 8.0)


def search(url: str, ev: Evaluator, screening: bool = True, study: str = "s", objective: str = "geomean",
           pruner: optuna.pruners.BasePruner | None = None, clock: Callable[[], float] | None = None) -> Search:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store, retry = open_store(url), Retry()
    rdb = storage(url, retry=retry)
    metrics = objective_names(objective, CASES)
    st = open_study(rdb, study, optuna.samplers.RandomSampler(seed=3), {}, ["maximize"] * len(metrics), metrics,
                    pruner=pruner or (EvoPruner() if screening else None))
    return Search(st, store, ev, [load_family("flash_mma")], CASES, "sdpa_default", objective,
                  store.start_run("evo run", study=study), storage=rdb, retry=retry, batch=4, screening=screening,
                  **({} if clock is None else {"clock": clock}))


@pytest.fixture(scope="module")
def blank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with evo's and Optuna's tables and nothing else, made once (that is the slow
    part); each test searches in a copy."""
    path = tmp_path_factory.mktemp("blank") / "evo.sqlite"
    open_store(f"sqlite:///{path}").close()
    storage(f"sqlite:///{path}").engine.dispose()
    return path


@pytest.fixture
def db(blank: Path, tmp_path: Path) -> str:
    shutil.copy(blank, tmp_path / "evo.sqlite")
    return f"sqlite:///{tmp_path / 'evo.sqlite'}"


@pytest.fixture(scope="module")
def screened_run(blank: Path, tmp_path_factory: pytest.TempPathFactory):
    """One search of 8 trials in rungs: (url, search, summary, evaluator)."""
    path = tmp_path_factory.mktemp("rungs") / "evo.sqlite"
    shutil.copy(blank, path)
    url = f"sqlite:///{path}"
    ev = Screening()
    s = search(url, ev)
    return url, s, s.run(8), ev


def test_each_candidate_is_screened_then_only_the_kept_are_timed_in_full(screened_run) -> None:
    _, s, summary, ev = screened_run
    screens = [j for j in ev.jobs if j.rung == "screen"]
    full = [j for j in ev.jobs if j.rung == "full"]
    assert screens and all(j.green for j in screens) and not any(j.green for j in full)
    assert [c.tag for c in screens[0].cases] == ["F1-fp16", "F1c-fp16", "F3-fp16", "F3c-fp16", "F5-fp16", "F5c-fp16",
                                                 "F8-fp16", "F8c-fp16"]
    assert all(set(j.cases) == set(CASES) for j in full)
    assert summary.screened == len(screens) and summary.kept == len(full) < len(screens)
    assert summary.counts["pruned"] == len(screens) - len(full) and summary.counts["fast"] == len(full)
    assert summary.gpu_s == {"GREEN": 0.5 * len(screens), "screen": 1.0 * len(screens), "full": 8.0 * len(full),
                             "prime": 3.0}
    # the evaluator is asked to measure the cached baselines before the first job (and again with
    # each batch, which a GPU evaluator ignores), always for both rungs' cases
    assert ev.primed[0] == ([c.tag for c in CASES], [c.tag for c in screens[0].cases], 0)
    assert len(ev.primed) > 1 and all(p[:2] == ev.primed[0][:2] for p in ev.primed)


def test_a_screen_only_run_times_no_candidate_in_full_and_stores_every_screen_pruned(db: str) -> None:
    ev = Screening()
    s = search(db, ev, pruner=ScreenOnlyPruner())
    summary = s.run(6)
    assert ev.jobs and {j.rung for j in ev.jobs} == {"screen"} and summary.kept == 0
    assert summary.screened == summary.counts["pruned"] == len(ev.jobs) and "fast" not in summary.counts
    store = open_store(db)
    for t in s.study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
        last = store.get(t.user_attrs["candidate"]).evaluations[-1]
        assert last.status is Status.PRUNED and last.reason == ScreenOnlyPruner.WHY


def test_the_incumbent_bar_reads_the_screens_and_full_scores_the_ladder_stores(db: str) -> None:
    """In a real ladder, the trials timed in full carry what the incumbent bar reads (their screen and
    per-case speedups), so it is the screen of the best full score, never the highest screen alone."""
    pruner = EvoPruner(bar="incumbent")
    s = search(db, Screening(), pruner=pruner)
    s.run(8)
    trials = s.study.get_trials(deepcopy=False)
    full = [t for t in trials if t.state == TrialState.COMPLETE]
    assert full and all(t.user_attrs.get(SCREEN_ATTR) and t.user_attrs.get("speedups") for t in full)
    best = max(full, key=lambda t: t.value)
    assert pruner._incumbents(trials)[0] == best.user_attrs[SCREEN_ATTR]["all"]


def test_the_summary_says_when_the_gpu_began_its_first_candidate(db: str) -> None:
    """first_gpu_s: the loop's clock when the first result came back, less that evaluation's GPU
    seconds (here 30 s of start-up, then each job's own seconds on a clock the evaluator moves)."""
    now = [0.0]

    class Timed(Screening):
        def answer(self, job: Job) -> Evaluation:
            ev = answer(job)
            now[0] += (30.0 if len(self.jobs) == 1 else 0.0) + ev.green_seconds + ev.fast_seconds
            return ev

    summary = search(db, Timed(), clock=lambda: now[0]).run(4)
    assert summary.first_gpu_s == 30.0 and summary.wall_s >= 30.0 + 1.5


def test_a_pruned_candidate_is_stored_pruned_and_never_ranked(screened_run) -> None:
    url, s, summary, _ = screened_run
    store = open_store(url)
    trials = s.study.get_trials(deepcopy=False)
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned and all(t.user_attrs["status"] == "pruned" and t.user_attrs[SCREEN_ATTR] for t in pruned)
    for t in pruned:
        rec = store.get(t.user_attrs["candidate"])
        assert rec.candidate.status is Status.PRUNED and rec.evaluations[-1].status is Status.PRUNED
        assert "leads no bucket" in rec.evaluations[-1].reason and rec.trials[-1].value is None
    ranked = {c.id for c, _ in store.best(50)} | {c.id for c in store.find_candidates(status=PASSED)}
    assert not ranked & {t.user_attrs["candidate"] for t in pruned}
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert summary.best is not None and summary.best.number in {t.number for t in complete}


def test_a_full_evaluation_stores_its_screened_score_beside_its_full_score(screened_run) -> None:
    url, s, summary, _ = screened_run
    store = open_store(url)
    kept = [t for t in s.study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    errors = []
    for t in kept:
        screen, full = store.get(t.user_attrs["candidate"]).evaluations[-2:]
        assert (screen.device_info["rung"], full.device_info["rung"]) == ("screen", "full")
        assert full.device_info["screen_score"] == screen.device_info["screen_score"]
        assert float(full.device_info["full_score"]) == pytest.approx(t.value)
        assert float(screen.device_info["screen_score"]) == pytest.approx(t.user_attrs[SCREEN_ATTR]["all"], rel=1e-5)
        errors.append(float(full.device_info["screen_score"]) / float(full.device_info["full_score"]) - 1)
    assert kept and summary.screen_errors == pytest.approx(errors, abs=1e-5)
    assert all(0.0 < x < 0.03 for x in errors)       # the stand-in's screen reads 1 % high, its cases a subset


def test_the_screen_error_distribution_is_read_back_from_the_store(screened_run) -> None:
    from evo import api

    url, _, summary, _ = screened_run
    errors = api.screen_errors(url, "s")
    assert (errors.screened, errors.pruned) == (summary.screened, summary.counts["pruned"])
    assert [p.error for p in errors.pairs] == pytest.approx(summary.screen_errors, abs=1e-5)
    assert errors.line().startswith(f"{summary.screened} screened, {summary.counts['pruned']} pruned; screen vs full over")
    doc = errors.document()
    assert doc["max_abs_error"] == pytest.approx(max(abs(x) for x in summary.screen_errors), abs=1e-5)
    assert api.screen_errors(url, "no such study").line() == "0 screened, 0 pruned; no candidate timed on both rungs yet"


def test_the_gpu_check_script_reads_the_studys_figures(screened_run, tmp_path: Path) -> None:
    """scripts/screen_check.py without a GPU (no time to time anything): the run's throughput
    from its summary, the screens, and the screen's error over the top by screen (the pruned
    among them still missing: exit 1) and for the best by full score."""
    import importlib.util
    import json

    url, s, summary, _ = screened_run
    spec = importlib.util.spec_from_file_location("screen_check", Path(__file__).parents[1] / "scripts" / "screen_check.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    (tmp_path / "run.json").write_text(json.dumps({"measured": summary.measured, "candidates_per_gpu_hour": 720.0}))
    code = check.main(["--study", "s", "--db", url, "--summary", str(tmp_path / "run.json"), "--top", "3",
                       "--out", str(tmp_path / "out.json")])
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["throughput"]["candidates_per_gpu_hour"] == 720.0
    assert doc["screens"] == {"screened": summary.screened, "pruned": summary.counts["pruned"], "kept": None,
                              "timed_in_full_by_this_check": 0}
    top = doc["top_by_screen"]
    assert top["asked"] == 3 and top["n"] + len(top["missing"]) == 3 and code == (1 if top["missing"] else 0)
    assert doc["best_by_full"]["n"] == 1 and doc["all"]["pairs"] == summary.kept
    assert check.main(["--study", "none", "--db", url]) == 2
    if url.startswith("sqlite:///"):     # a bare file path reads the same database
        again = check.main(["--study", "s", "--db", url.removeprefix("sqlite:///"), "--top", "3",
                            "--out", str(tmp_path / "again.json")])
        assert again == code and json.loads((tmp_path / "again.json").read_text())["screens"] == doc["screens"]


class Dying(EvoPruner):
    """A pruner whose process dies as it judges (Ctrl-C while the screen's verdict is made)."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        raise KeyboardInterrupt


@pytest.mark.parametrize("stop", ["before the full rung", "in the pruner"])
def test_a_run_stopped_between_screen_and_full_rung_loses_nothing(db: str, stop: str) -> None:
    """Stopped once the first screen is stored (as its full rung would start, or as the pruner
    judges it): its trial is given back; the next run judges the stored screen again and times
    only the full rung."""
    url = db
    first = Screening(stop_at=2)                  # the first screen is always kept: its full rung is the 2nd job
    s = search(url, first)
    if stop == "in the pruner":
        s.study.pruner = Dying()
    with pytest.raises(KeyboardInterrupt):
        s.run(2)
    (screen,) = first.jobs
    bid = screen.build.build_id
    stored = open_store(url).get(bid)
    assert stored.candidate.status is Status.GREEN and [e.device_info["rung"] for e in stored.evaluations] == ["screen"]
    again = Screening()
    search(url, again).run(2)
    mine = [j.rung for j in again.jobs if j.build.build_id == bid]
    assert mine == ["full"]
    after = open_store(url).get(bid)
    assert after.candidate.status is Status.FAST
    assert [e.device_info["rung"] for e in after.evaluations] == ["screen", "full"]
    assert "screen_score" in after.evaluations[-1].device_info


class Overlapping(Screening):
    """Notes whether the second batch's build had started by the time the first batch was
    evaluated (waiting for it a while: a loop that builds and evaluates in turn never does)."""

    def __init__(self) -> None:
        super().__init__()
        self.builds, self.second = 0, threading.Event()
        self.overlapped: bool | None = None

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        self.builds += 1
        if self.builds == 2:
            self.second.set()
        return super().build(items)

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        if self.overlapped is None:
            self.overlapped = self.second.wait(timeout=5)
        yield from super().evaluate(jobs)


def test_the_next_batch_is_built_while_this_one_is_evaluated(db: str) -> None:
    ev = Overlapping()
    s = search(db, ev, screening=False)
    s.batch = 1
    for cand in itertools.islice(all_candidates(load_family("flash_mma")), 2):   # two valid points
        s.study.enqueue_trial(trial_params(cand))
    s.run(2)
    assert ev.builds == 2 and ev.overlapped


def test_a_study_of_one_value_per_bucket_is_pruned_by_the_pruner_itself(db: str) -> None:
    """Optuna's trials report nothing for several objectives: the pruner is asked directly."""
    s = search(db, Screening(), objective="per-bucket")
    summary = s.run(3)
    told = [t for t in s.study.get_trials(deepcopy=False) if SCREEN_ATTR in t.user_attrs]
    assert summary.screened == len(told) >= 2 and summary.kept >= 1
    assert {t.state for t in told} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert all(len(t.values) == 4 for t in told if t.state == TrialState.COMPLETE)


def test_full_only_times_every_candidate_in_full(db: str) -> None:
    ev = Screening()
    summary = search(db, ev, screening=False).run(2)
    assert {j.rung for j in ev.jobs} == {"full"} and all(j.green for j in ev.jobs)
    assert summary.screened == 0 and summary.counts["pruned"] == 0 and summary.counts["fast"] == len(ev.jobs)
    assert ev.primed[0] == ([c.tag for c in CASES], [], 0)   # no screen: the full rung's cache alone


def test_full_only_times_a_pruned_candidate_in_full_keeping_its_checks(screened_run, tmp_path: Path) -> None:
    url, s, _, _ = screened_run
    pruned = next(t for t in s.study.get_trials(deepcopy=False) if t.state == TrialState.PRUNED)
    ev = Screening()
    again = search(url, ev, screening=False, study="again")
    again.study.enqueue_trial(pruned.params)
    again.run(1)
    (job,) = ev.jobs
    assert job.rung == "full" and not job.green and set(job.cases) == set(CASES)
    assert job.build.build_id == pruned.user_attrs["candidate"]


class Reusing(Screening):
    """Screens as the GPU worker does with ``screen_full``: the screen's long cases timed as the
    full rung times them (no screen bias), named in ``screen_full_cases``."""

    def answer(self, job: Job) -> Evaluation:
        ev = answer(job)
        if job.rung == "screen":
            long = {s.tag for s in job.cases if steady_case(s)}
            ev.device["screen_full_cases"] = ",".join(sorted(long))
            full = answer(replace(job, rung="full")).timings
            ev.timings = [t for t in ev.timings if t.shape.tag not in long] + [t for t in full if t.shape.tag in long]
        return ev


def _full_and_reused(url: str, bid: str) -> tuple[set[str], str]:
    last = open_store(url).get(bid).evaluations[-1]
    return {t.shape.tag for t in last.timings if t.backend == "evo"}, str(last.device_info.get("reused_from_screen"))


def test_a_kept_candidates_full_rung_reuses_the_cases_its_screen_timed_in_full(db: str) -> None:
    """The full rung times only the cases the screen did not time as it would; its stored
    evaluation holds every case, the reused ones named, and its full score counts them."""
    ev = Reusing()
    summary = search(db, ev).run(4)
    long = {s.tag for s in CASES if steady_case(s)} & {s.tag for s in ev.jobs[0].cases}
    assert long == {"F5-fp16", "F5c-fp16", "F8-fp16", "F8c-fp16"}
    full = [j for j in ev.jobs if j.rung == "full"]
    assert full and summary.kept == len(full)
    for job in full:
        assert {s.tag for s in job.cases} == {s.tag for s in CASES} - long
        tags, reused = _full_and_reused(db, job.build.build_id)
        assert tags == {s.tag for s in CASES} and reused == ",".join(sorted(long))
    assert summary.counts["fast"] == len(full) and len(summary.screen_errors) == len(full)


def test_a_stored_screen_judged_again_after_a_stop_still_lends_its_full_cases(db: str) -> None:
    first = Reusing()
    first.stop_at = 2
    with pytest.raises(KeyboardInterrupt):
        search(db, first).run(2)
    (screen,) = first.jobs
    again = Reusing()
    search(db, again).run(2)
    (job,) = [j for j in again.jobs if j.build.build_id == screen.build.build_id]
    assert job.rung == "full" and {"F5-fp16", "F8c-fp16"}.isdisjoint(s.tag for s in job.cases)
    tags, reused = _full_and_reused(db, job.build.build_id)
    assert tags == {s.tag for s in CASES} and reused == "F5-fp16,F5c-fp16,F8-fp16,F8c-fp16"


def test_an_evaluator_that_builds_gets_only_the_kernels_the_studys_cases_run(db: str) -> None:
    """A GPU search renders each candidate with its study's (head dim, dtype, causal) kernels only
    (flash_mma: the fp16 four of its eight), so nvcc compiles what is timed and nothing else."""
    ev = Screening()
    ev.subsets = True
    search(db, ev).run(2)
    wanted = {(s.D, s.dtype, s.causal) for s in CASES}
    assert ev.jobs and all({(e.head_dim, e.dtype, e.causal) for e in j.rendered.entries} == wanted for j in ev.jobs)
    stored = open_store(db).get(ev.jobs[0].build.build_id).candidate
    assert stored.kernels == frozenset(wanted)
