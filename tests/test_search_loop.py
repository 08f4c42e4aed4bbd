"""The search loop end to end in replay: real store, real Optuna RDB study, synthetic recording."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import func, select

from evo import api
from evo.cli import run_cmds
from evo.cli.output import console
from evo.errors import EvoError
from evo.analysis.insights import compute
from evo.family.manifest import load_family
from evo.family.render import Rendered
from evo.store.recording import load_recording, record_key, save_recording
from evo.results import BuildResult, CheckResult, Evaluation, Shape, Status
from evo.search import driver
from evo.search.driver import RunOptions, run
from evo.search.evaluators import Job, ReplayEvaluator, Unmeasured
from evo.search.loop import NullReporter, RunSummary, Search
from evo.search.resume import counted
from evo.search.sampler_evo import EvoSampler
from evo.family.space import all_candidates
from evo.store import open_store
from evo.store.models import EvaluationRow, Trial
from synthetic_sweep import make_recording

CASES = ["F1", "F6"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=0)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evo.sqlite'}"


@pytest.fixture(scope="module", autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def search(db: str, rec: Path, **kw):
    opts = RunOptions(**({"replay": rec, "db": db, "study": "s", "batch": 4, "seed": 0, "cases": CASES} | kw))
    return run(opts, NullReporter())


def trials(db: str, study: str = "s") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=db).get_trials(deepcopy=False)


def recorded_score(rec, family: str, params: dict, tags: list[str], baseline: str = "sdpa_default") -> float:
    r = rec.records[record_key(family, params)]
    logs = [math.log(r.timings[t][baseline]["median_us"] / r.timings[t]["evo"]["median_us"]) for t in tags]
    return math.exp(sum(logs) / len(logs))


def params_of(t: optuna.trial.FrozenTrial) -> tuple[str, dict]:
    fam = t.params["family"]
    return fam, {k.split(".", 1)[1]: v for k, v in t.params.items() if k.startswith(fam + ".")}


@pytest.fixture(scope="module")
def evo_run(tmp_path_factory: pytest.TempPathFactory, recording: Path):
    """One evolutionary replay run of 16 trials: (db, summary)."""
    db = f"sqlite:///{tmp_path_factory.mktemp('evo') / 'evo.sqlite'}"
    return db, search(db, recording, trials=16)


def test_replay_run_scores_from_the_recording(evo_run, recording: Path) -> None:
    db, summary = evo_run
    rec, ts = load_recording(recording), trials(db)
    tags = [s.tag for s in rec.shapes() if s.case in CASES]
    assert summary.total == 16 and len(ts) == 16
    done = [t for t in ts if t.state == TrialState.COMPLETE]
    assert done
    for t in done:
        assert t.value == pytest.approx(recorded_score(rec, *params_of(t), tags))
    assert summary.best is not None and summary.best.score == pytest.approx(max(t.value for t in done))


def test_every_trial_is_linked_to_its_candidate_in_the_store(evo_run) -> None:
    db, _ = evo_run
    store = open_store(db)
    for t in trials(db):
        if t.user_attrs["status"] == "unmeasured":  # nothing about it is stored
            assert "candidate" not in t.user_attrs
            continue
        links = store.get(t.user_attrs["candidate"]).trials
        assert any(x.study == "s" and x.number == t.number and x.state == t.state.name for x in links)


def test_evo_runs_record_lineage_edges(evo_run) -> None:
    db, _ = evo_run
    kinds = {e.kind for e in open_store(db).edges("s")}
    assert kinds and kinds <= {"mutation", "crossover", "nearest"}


def test_continuing_a_study_with_other_settings_is_refused(evo_run, recording: Path) -> None:
    db, _ = evo_run
    with pytest.raises(EvoError, match="was run with --cases"):
        search(db, recording, trials=20, cases=["F1"])


def _retouch(src: Path, dst: Path) -> tuple[Path, list]:
    """A copy of the recording where flash_scalar's first points (manifest order) get the
    statuses of RETOUCHED or, for DROPPED, are left out."""
    rec = load_recording(src)
    points = list(all_candidates(load_family("flash_scalar")))[:12]
    template = next(iter(rec.records.values()))
    for i, cand in enumerate(points):
        key = record_key(cand.family, cand.p)
        if i in DROPPED:
            rec.records.pop(key, None)
        elif i in RETOUCHED:
            r = rec.records.setdefault(key, template)
            r.status, r.reason, r.timings = RETOUCHED[i], f"made {RETOUCHED[i].value}", {}
    return save_recording(rec, dst), points


RETOUCHED = {1: Status.RED, 2: Status.RESOURCE_REJECTED, 3: Status.COMPILE_FAILED, 4: Status.CRASHED,
             5: Status.TIMEOUT}
DROPPED = {0, 7}


@pytest.fixture(scope="module")
def grid_runs(tmp_path_factory: pytest.TempPathFactory, recording: Path):
    """Two grid studies over the same 12 flash_scalar points in one database: (db, points, a, b)."""
    tmp = tmp_path_factory.mktemp("grid")
    path, points = _retouch(recording, tmp / "r.json.gz")
    db = f"sqlite:///{tmp / 'evo.sqlite'}"
    a = search(db, path, trials=12, families=["flash_scalar"], sampler="grid", study="a")
    b = search(db, path, trials=12, families=["flash_scalar"], sampler="grid", study="b")
    return db, points, a, b


def test_failures_reach_optuna_as_fail_with_status_and_reason(grid_runs) -> None:
    db, points, _, _ = grid_runs
    by_key = {record_key(*params_of(t)): t for t in trials(db, "a")}
    for i, status in RETOUCHED.items():
        t = by_key[record_key(points[i].family, points[i].p)]
        assert t.state == TrialState.FAIL
        assert (t.user_attrs["status"], t.user_attrs["reason"]) == (status.value, f"made {status.value}")


def test_unmeasured_candidates_are_reported_not_invented(grid_runs) -> None:
    db, points, a, _ = grid_runs
    assert a.counts["unmeasured"] == len(DROPPED)
    by_key = {record_key(*params_of(t)): t for t in trials(db, "a")}
    store = open_store(db)
    for i in DROPPED:
        t = by_key[record_key(points[i].family, points[i].p)]
        assert (t.state, t.user_attrs["status"]) == (TrialState.FAIL, "unmeasured")
        assert all(c.params != points[i].p for c in store.find_candidates(family=points[i].family))


def test_a_candidate_known_to_the_store_is_not_evaluated_again(grid_runs) -> None:
    db, _, a, b = grid_runs
    measured = 12 - len(DROPPED)
    assert b.reused == measured and a.reused == 0
    store = open_store(db)
    for t in trials(db, "b"):
        if "candidate" in t.user_attrs:
            assert len(store.evaluations(t.user_attrs["candidate"])) <= 1
    first = {record_key(*params_of(t)): (t.state, t.values) for t in trials(db, "a")}
    assert all(first[record_key(*params_of(t))] == (t.state, t.values) for t in trials(db, "b"))


def test_invalid_points_are_stored_and_told_fail(db: str, recording: Path) -> None:
    search(db, recording, trials=8, families=["flash_mma"], sampler="cmaes", seed=1)
    invalid = [t for t in trials(db) if t.user_attrs.get("status") == "invalid"]
    assert invalid and all(t.state == TrialState.FAIL for t in invalid)
    assert all("constraint violated" in t.user_attrs["reason"] for t in invalid)
    store = open_store(db)
    assert {store.get(t.user_attrs["candidate"]).candidate.status for t in invalid} == {Status.INVALID}


def test_per_bucket_objective_gives_one_value_per_head_dim_and_mask(db: str, recording: Path) -> None:
    search(db, recording, trials=4, objective="per-bucket")
    done = [t for t in trials(db) if t.state == TrialState.COMPLETE]
    assert done and all(len(t.values) == 4 for t in done)  # d64/d128 x full/causal


class StopAfter(NullReporter):
    """Ctrl-C after ``n`` told trials."""

    def __init__(self, n: int) -> None:
        self.n = n

    def advance(self, number, outcome, best) -> None:
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt


def test_interrupted_run_resumes_without_duplicates(db: str, recording: Path) -> None:
    opts = RunOptions(replay=recording, db=db, study="s", batch=4, seed=0, cases=CASES, trials=12)
    assert run(opts, StopAfter(6)).interrupted
    before = {t.number: t.values for t in trials(db) if t.state == TrialState.COMPLETE}
    assert search(db, recording, trials=12).total == 12
    ts = trials(db)
    assert not [t for t in ts if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert before == {t.number: t.values for t in ts if t.number in before}
    store = open_store(db)
    for cid in {t.user_attrs["candidate"] for t in ts if "candidate" in t.user_attrs}:
        assert len(store.evaluations(cid)) <= 1
    assert sum(t.user_attrs.get("status", "abandoned") != "abandoned" for t in ts) == 12


def test_insights_of_a_replayed_study(evo_run) -> None:
    db, _ = evo_run
    report = compute(open_store(db), "s", db_url=db)
    assert report.moves and all(m.family in ("flash_mma", "flash_scalar") for m in report.moves)
    assert {i.family for i in report.importances} <= {"flash_mma", "flash_scalar"}


class Ticking(ReplayEvaluator):
    """Replay on a fake clock (the search's, :meth:`clock`) on which every evaluation takes
    ``step_s``; it keeps the build ids of the candidates it built and of those whose evaluation
    it started, in order."""

    def __init__(self, recording: Path, step_s: float) -> None:
        super().__init__(load_recording(recording))
        self.now, self.step_s = 0.0, step_s
        self.built: list[str] = []
        self.started: list[str] = []

    def clock(self) -> float:
        return self.now

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        out = super().build(items)
        self.built += [r.build_id for r in out if isinstance(r, BuildResult) and r.status is Status.BUILT]
        return out

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        for ev in super().evaluate(self._start(jobs)):
            self.now += self.step_s
            yield ev

    def _start(self, jobs: Iterable[Job]) -> Iterator[Job]:
        for job in jobs:
            self.started.append(job.build.build_id)
            yield job


def budgeted(monkeypatch: pytest.MonkeyPatch, db: str, recording: Path,
             time_budget_s: float | None) -> tuple[RunSummary, Ticking]:
    """A grid search of 8 flash_scalar trials in one batch of 8, each evaluation 100 s long on
    the search's clock."""
    ev = Ticking(recording, step_s=100)
    monkeypatch.setattr(driver, "choose_evaluator", lambda opts, note: ev)
    monkeypatch.setattr(driver, "Search", functools.partial(Search, clock=ev.clock))
    summary = search(db, recording, trials=8, batch=8, families=["flash_scalar"], sampler="grid",
                     time_budget_s=time_budget_s)
    return summary, ev


def evaluations_stored(db: str) -> int:
    with open_store(db)._read() as s:
        return s.scalar(select(func.count()).select_from(EvaluationRow)) or 0


def test_a_spent_time_budget_starts_no_further_evaluation_of_the_batch(monkeypatch, db: str, recording: Path) -> None:
    summary, ev = budgeted(monkeypatch, db, recording, time_budget_s=150)
    unstarted = len(ev.built) - 2
    assert unstarted > 0 and ev.started == ev.built[:2]  # the 2nd started at 100 s, ended at 200 s
    assert evaluations_stored(db) == 2                   # ... and was kept
    assert summary.finished == 8 - unstarted
    assert summary.stopped == f"time budget of 150 s spent ({unstarted} unstarted trial(s) re-queued)"


def test_trials_the_budget_left_unstarted_are_evaluated_by_the_next_run(monkeypatch, db: str, recording: Path) -> None:
    _, first = budgeted(monkeypatch, db, recording, time_budget_s=150)
    unstarted = set(first.built) - set(first.started)
    assert len(trials(db, "s")) == 8 + len(unstarted)  # each enqueued again
    assert sum(t.state == TrialState.WAITING for t in trials(db)) == len(unstarted) > 0
    summary, second = budgeted(monkeypatch, db, recording, time_budget_s=None)
    assert set(second.started) == unstarted and len(second.started) == len(unstarted)
    assert summary.total == 8 and summary.stopped == "reached 8 trials"
    assert not [t for t in trials(db) if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert evaluations_stored(db) == len(first.built)  # every built candidate evaluated once


def test_after_a_spent_budget_the_store_and_the_study_agree(monkeypatch, db: str, recording: Path) -> None:
    summary, ev = budgeted(monkeypatch, db, recording, time_budget_s=150)
    ts = trials(db)
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    abandoned = [t for t in ts if t.user_attrs.get("status") == "abandoned"]
    assert len(abandoned) == len(ev.built) - 2 > 0
    assert all(t.state == TrialState.FAIL and "time budget" in t.user_attrs["reason"] for t in abandoned)
    assert summary.total == counted(ts) == summary.finished == 8 - len(abandoned)
    store = open_store(db)
    with store._read() as s:
        rows = {r.trial_number: r.state for r in s.scalars(select(Trial).where(Trial.study == "s"))}
    assert rows == {t.number: t.state.name for t in ts if t.state.is_finished()}
    assert all("candidate" not in t.user_attrs for t in abandoned)  # linked to nothing measured
    assert store.get_run(summary.run_id).status == "done"


def test_a_run_whose_space_takes_longer_than_its_lease_to_enumerate_is_not_failed_by_itself(
        monkeypatch, db: str, recording: Path) -> None:
    """The flash_wgmma space takes about a minute to enumerate, longer than the 60 s lease: run 1
    of study wgmma6 marked itself failed before its first batch. Here enumeration takes 3 s
    against a 2 s lease."""
    import time

    from evo.search import loop

    slow = loop.all_candidates

    def enumerate_slowly(family):  # type: ignore[no-untyped-def]
        time.sleep(3.0)
        yield from slow(family)

    notes: list[str] = []

    class Notes(NullReporter):
        def note(self, text: str) -> None:
            notes.append(text)

    monkeypatch.setattr(loop, "all_candidates", enumerate_slowly)
    opts = RunOptions(replay=recording, db=db, study="s", batch=4, seed=0, cases=CASES, trials=4,
                      heartbeat_s=1, grace_s=2)
    summary = run(opts, Notes())
    assert not [n for n in notes if "failed" in n], notes
    with open_store(db) as store:
        assert store.get_run(summary.run_id).status == "done"


def test_a_search_of_a_space_too_large_to_list_never_lists_it(monkeypatch, db: str, recording: Path) -> None:
    """flash_wgmma (1.9 million valid points) is searched without listing its space: proposals
    are drawn, and the untried count stops at the listable families."""
    from evo.search import loop, proposal

    def refuse(family):  # type: ignore[no-untyped-def]
        raise AssertionError(f"listed {family.name}")

    monkeypatch.setattr(loop, "all_candidates", refuse)
    monkeypatch.setattr(proposal, "all_candidates", refuse)
    summary = run(RunOptions(replay=recording, db=db, study="w", batch=4, seed=0, cases=CASES, trials=6,
                             families=["flash_wgmma"]), NullReporter())
    assert summary.total == 6 and summary.stopped == "reached 6 trials"


class Marginal(ReplayEvaluator):
    """Replay whose FAST evaluations carry GREEN checks: every flash_mma candidate with STAGES 3
    passed its D=128 checks at 0.9 of the tolerance, everything else at 0.5."""

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        for job, ev in zip(jobs := list(jobs), super().evaluate(jobs), strict=True):
            if isinstance(ev, Evaluation) and ev.status is Status.FAST:
                cand = job.rendered.candidate
                near = cand.family == "flash_mma" and cand.p["STAGES"] == 3
                ev.checks = [CheckResult(Shape("G1", 1, 2, 64, D, False), 0, True, share * 1e-2, 3e-3, 1e-2)
                             for D, share in ((64, 0.5), (128, 0.9 if near else 0.5))]
            yield ev


def test_the_green_margin_reaches_the_trial_and_keeps_unshippable_kernels_out_of_the_elites(
        monkeypatch: pytest.MonkeyPatch, db: str, recording: Path) -> None:
    monkeypatch.setattr(driver, "choose_evaluator", lambda opts, note: Marginal(load_recording(recording)))
    search(db, recording, trials=24, families=["flash_mma"])
    done = [t for t in trials(db) if t.state == TrialState.COMPLETE]
    assert done and all(set(t.user_attrs["green_share"]) == {"64", "128"} for t in done)
    over = [t for t in done if params_of(t)[1]["STAGES"] == 3]
    assert over and all(t.user_attrs["green_share"]["128"] == pytest.approx(0.9) for t in over)
    sampler = EvoSampler([load_family("flash_mma")], seed=0)
    elites = sampler.elites(trials(db))
    assert elites and all(c.p["STAGES"] != 3 for _, c in elites)


def test_a_run_whose_best_promote_would_refuse_says_so(monkeypatch: pytest.MonkeyPatch, db: str, recording: Path) -> None:
    class AllNear(Marginal):
        def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
            for ev in super().evaluate(jobs):
                for c in getattr(ev, "checks", []):
                    c.max_abs_err = 0.8 * c.tolerance if c.shape.D == 128 else c.max_abs_err
                yield ev

    monkeypatch.setattr(driver, "choose_evaluator", lambda opts, note: AllNear(load_recording(recording)))
    summary = search(db, recording, trials=6, families=["flash_mma"])
    assert summary.best is not None and summary.best.over == [128]
    with console.capture() as out:
        run_cmds.print_summary(api.run_report(summary, db))
    assert "its D=128 kernel passed GREEN above 0.75 of the tolerance" in " ".join(out.get().split())


class Pairing(ReplayEvaluator):
    """Replay that says it times ``sdpa_default`` beside every candidate (as the GPU evaluator
    does) and marks its evaluations so; it keeps each job it was asked for."""

    def __init__(self, recording: Path) -> None:
        super().__init__(load_recording(recording))
        self.jobs: list[Job] = []

    def paired(self) -> str:
        return "sdpa_default"

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        jobs = list(jobs)
        self.jobs += jobs
        for ev in super().evaluate(jobs):
            if isinstance(ev, Evaluation):
                ev.device["paired"] = "sdpa_default"
            yield ev


def test_a_paired_search_times_again_what_was_timed_beside_a_cached_baseline(
        monkeypatch: pytest.MonkeyPatch, db: str, recording: Path) -> None:
    """Timings taken against a cached baseline are not reused by a search that times its baseline
    beside the candidate: every case is timed again (GREEN's checks are kept, so no GREEN);
    what that search measured is reused by the next one."""
    plain = search(db, recording, trials=6, families=["flash_scalar"], sampler="grid", study="plain")
    measured = plain.counts["fast"]
    first = Pairing(recording)
    monkeypatch.setattr(driver, "choose_evaluator", lambda opts, note: first)
    again = search(db, recording, trials=6, families=["flash_scalar"], sampler="grid", study="paired")
    assert measured > 0 and again.reused == 6 - measured and len(first.jobs) == measured
    every = {"F1-fp16", "F1c-fp16", "F6-fp16", "F6c-fp16"}    # CASES, both causal modes
    assert all(not job.green and {s.tag for s in job.cases} == every for job in first.jobs)
    second = Pairing(recording)
    monkeypatch.setattr(driver, "choose_evaluator", lambda opts, note: second)
    third = search(db, recording, trials=6, families=["flash_scalar"], sampler="grid", study="paired-again")
    assert third.reused == 6 and second.jobs == []


def test_what_was_timed_beside_which_baselines_answers_which_search() -> None:
    from evo.search.storeview import Known

    cached, paired = Known("c", Status.FAST), Known("c", Status.FAST, paired="sdpa_default")
    interleaved = Known("c", Status.FAST, paired="sdpa_flash,sdpa_cudnn,sdpa_efficient,sdpa_default")
    assert cached.timed_beside("") and not cached.timed_beside("sdpa_default")
    assert paired.timed_beside("sdpa_default") and not paired.timed_beside("sdpa_flash") and not paired.timed_beside("")
    assert interleaved.timed_beside("sdpa_flash") and interleaved.timed_beside("sdpa_default")
