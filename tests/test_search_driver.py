"""Choosing the measurement source, and a build-only run on the tiny fixture family."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from evo.errors import EvoError
from evo.results import Evaluation, Status
from evo.search import driver
from evo.search.driver import RunOptions, choose_evaluator, run
from evo.search.evaluators import BuildOnlyEvaluator, GpuEvaluator, ReplayEvaluator
from evo.search.loop import NullReporter
from evo.store import open_store
from evo.gpu.suites import fast_cases
from synthetic_sweep import make_recording


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "gpu_count", lambda: 0)


def test_without_gpu_the_newest_recording_is_replayed_and_said_so(no_gpu, monkeypatch, tmp_path: Path) -> None:
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz")
    monkeypatch.setattr(driver, "newest_recording", lambda folder: rec)
    notes: list[str] = []
    ev = choose_evaluator(RunOptions(), notes.append)
    assert isinstance(ev, ReplayEvaluator) and ev.device == "replay:synthetic"
    assert len(notes) == 1 and "replaying sweep-synthetic.json.gz" in notes[0]


def test_without_gpu_or_recording_it_builds_only(no_gpu, monkeypatch) -> None:
    monkeypatch.setattr(driver, "newest_recording", lambda folder: None)
    notes: list[str] = []
    ev = choose_evaluator(RunOptions(arch="sm_90a"), notes.append)
    assert isinstance(ev, BuildOnlyEvaluator) and "building and resource-checking only" in notes[0]
    assert "GREEN and FAST need a GPU" in ev.not_evaluated


def test_replay_refuses_cases_the_recording_lacks(tmp_path: Path) -> None:
    rec = make_recording(tmp_path / "r.json.gz", cases=fast_cases(["F1"]))
    with pytest.raises(EvoError, match="does not cover F6-fp16"):
        run(RunOptions(replay=rec, cases=["F6"], db=f"sqlite:///{tmp_path / 'x.sqlite'}"), NullReporter())


FIXTURES = Path(__file__).resolve().parent / "fixtures"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def tiny_family(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The test-only ``tiny`` family (compiles in about a second), built into a private cache."""
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES / "templates"))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)


@needs_nvcc
def test_build_only_run_builds_for_real_and_says_gpu_is_needed(no_gpu, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(driver, "newest_recording", lambda folder: None)
    tiny_family(monkeypatch, tmp_path)
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    summary = run(RunOptions(families=["tiny"], sampler="grid", trials=2, batch=2, db=db, arch="sm_90a"),
                  NullReporter())
    assert summary.source == "build-only" and "need a GPU" in summary.not_evaluated
    trials = optuna.load_study(study_name="evo-build-only", storage=db).trials
    assert all(t.state == TrialState.FAIL for t in trials)
    # grid order: ROWS=32, SMEM_KB=1 with FAULT none, then syntax
    assert [t.user_attrs["status"] for t in trials] == ["built", "compile_failed"]


@needs_nvcc
def test_gpu_path_builds_evaluates_in_workers_and_reuses(monkeypatch, tmp_path: Path) -> None:
    """The GPU evaluator with its worker target a CPU stand-in (evo 5 us, SDPA 8 us): no GPU needed."""
    monkeypatch.setattr(driver, "gpu_count", lambda: 0)  # the target alone chooses the worker path
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    tiny_family(monkeypatch, tmp_path)
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    opts = RunOptions(families=["tiny"], sampler="grid", trials=2, batch=2, db=db, arch="sm_90a", cases=["F1"],
                      target="standins:serve_bench")
    first = run(opts, NullReporter())
    again = run(RunOptions(**{**opts.__dict__, "study": "again"}), NullReporter())
    assert (first.source, first.counts) == ("gpu", {"fast": 1, "compile_failed": 1})
    assert first.best is not None and first.best.score == pytest.approx(8.0 / 5.0)
    assert again.reused == 2 and again.best.score == first.best.score
    assert len(open_store(db).evaluations(first.best.candidate_id)) == 1


def test_every_gpu_request_gets_a_fresh_green_salt() -> None:
    from types import SimpleNamespace

    from evo.search.evaluators import Job

    seen = []
    ev = GpuEvaluator.__new__(GpuEvaluator)
    ev.options, ev.timeout_s = {"quick": True}, 1.0
    ev.pool = SimpleNamespace(map=lambda reqs, timeout: seen.extend(reqs) or iter(()))
    rendered = SimpleNamespace(entries=())
    jobs = [Job(rendered, SimpleNamespace(build_id=f"b{i}", cubin_path="x"), True, ()) for i in range(8)]
    list(ev.evaluate(jobs))
    salts = [r.options["salt"] for r in seen]
    assert len(set(salts)) == 8 and all(r.options["quick"] for r in seen)


def test_a_paired_evaluator_asks_for_its_baseline_beside_every_candidate() -> None:
    from types import SimpleNamespace

    from evo.search.evaluators import Job

    seen = []
    ev = GpuEvaluator.__new__(GpuEvaluator)
    ev.options, ev.timeout_s = {"quick": True}, 1.0
    ev.pool = SimpleNamespace(map=lambda reqs, timeout: seen.extend(reqs) or iter(()))
    ev.pair("sdpa_flash")
    job = Job(SimpleNamespace(entries=()), SimpleNamespace(build_id="b", cubin_path="x"), True, ())
    list(ev.evaluate([job]))
    assert seen[0].options["paired"] == "sdpa_flash" and seen[0].options["quick"]


def test_a_gpu_request_names_its_rung_and_shared_baselines_reach_the_pool() -> None:
    from types import SimpleNamespace

    from evo.search.evaluators import Job

    seen, shared = [], []
    ev = GpuEvaluator.__new__(GpuEvaluator)
    ev.options, ev.timeout_s = {"quick": True, "first_failure": True}, 1.0
    ev.pool = SimpleNamespace(map=lambda reqs, timeout: seen.extend(reqs) or iter(()), share=shared.append)
    built = SimpleNamespace(build_id="b", cubin_path="x")
    list(ev.evaluate([Job(SimpleNamespace(entries=()), built, True, (), "screen"),
                      Job(SimpleNamespace(entries=()), built, False, ())]))
    assert [r.options["rung"] for r in seen] == ["screen", "full"] and seen[0].options["first_failure"]
    ev.share({"screen": []})
    assert shared == [{"screen": []}] and GpuEvaluator.screens


def test_a_gpu_request_is_made_only_when_the_pool_draws_it() -> None:
    """The pool draws a request only as a worker starts it, so a search's time budget can end a
    batch between evaluations: the evaluator must not draw jobs ahead of it."""
    from types import SimpleNamespace

    from evo.search.evaluators import Job

    drawn: list[int] = []

    def jobs() -> Iterator[Job]:
        for i in range(3):
            drawn.append(i)
            yield Job(SimpleNamespace(entries=()), SimpleNamespace(build_id=f"b{i}", cubin_path="x"), True, ())

    ev = GpuEvaluator.__new__(GpuEvaluator)
    ev.options, ev.timeout_s, ev.where = {}, 1.0, {"host": "h"}
    ev.pool = SimpleNamespace(map=lambda reqs, timeout: (SimpleNamespace(build_id=r.build_id, device={}) for r in reqs))
    results = ev.evaluate(jobs())
    assert next(results).build_id == "b0" and drawn == [0]


def test_a_search_scores_cases_of_both_dtypes(monkeypatch, tmp_path: Path) -> None:
    """``--cases F1,F1c-bf16``: the study stores both tags and the worker is asked for both dtypes."""
    monkeypatch.setattr(driver, "gpu_count", lambda: 0)
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    tiny_family(monkeypatch, tmp_path)
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    opts = RunOptions(families=["tiny"], sampler="grid", trials=2, batch=2, db=db, arch="sm_90a",
                      cases=["F1", "F1c-bf16"], target="standins:serve_bench")
    summary = run(opts, NullReporter())
    assert summary.best is not None
    timed = {t.shape.tag for t in open_store(db).timings_for(summary.best.candidate_id)}
    assert timed == {"F1-fp16", "F1c-fp16", "F1c-bf16"}


def test_priming_queues_one_request_per_rung_that_loads_no_kernel() -> None:
    """GpuEvaluator.prime: a request per rung with cases (the screen's only when the search
    screens), the evaluator's options plus its rung and ``prime``, queued on the pool, once."""
    from types import SimpleNamespace

    from evo.gpu.suites import fast_cases
    from evo.search.evaluators import PRIME_ID

    queued = []

    def submit(request: Any, timeout: float) -> Future[Evaluation]:
        queued.append((request, timeout))
        done: Future[Evaluation] = Future()
        done.set_result(Evaluation(request.build_id, Status.GREEN, fast_seconds=2.5 * len(request.fast_cases)))
        return done

    ev = GpuEvaluator.__new__(GpuEvaluator)
    ev.options, ev.timeout_s, ev.primes = {"quick": True, "paired": "sdpa_default"}, 7.0, []
    ev.pool = SimpleNamespace(submit=submit)
    cases = tuple(fast_cases(["F1", "F8"]))
    ev.prime(cases, cases[:2])
    ev.prime(cases, cases[:2])                                   # a later batch: the caches are primed
    fresh = GpuEvaluator.__new__(GpuEvaluator)
    fresh.options, fresh.timeout_s, fresh.pool, fresh.primes = ev.options, 7.0, ev.pool, []
    fresh.prime(cases, ())                                       # a search that does not screen
    assert [(r.options["rung"], r.fast_cases, t) for r, t in queued] == [
        ("screen", cases[:2], 7.0), ("full", cases, 7.0), ("full", cases, 7.0)]
    assert all(r.build_id == PRIME_ID and not r.entries and not r.green and r.options["prime"]
               and r.options["paired"] == "sdpa_default" for r, _ in queued)
    # what the answers took, for the run's GPU time (gpu_s "prime"); an unanswered one counts nothing
    assert ev.primed_seconds() == 2.5 * (2 + 4) and fresh.primed_seconds() == 2.5 * 4
    fresh.primes.append(Future())
    assert fresh.primed_seconds() == 2.5 * 4
