"""A built candidate whose kernels are machine code already timed is answered from those timings
(evo.search.twins): replayed searches whose builds hold one kernel whose code ignores one gene."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import select

from evo import api
from evo.cli import run_cmds
from evo.cli.output import console
from evo.family.render import Rendered
from evo.results import BuildResult, Evaluation, Shape, Status
from evo.search import driver, twins
from evo.search.driver import RunOptions, run
from evo.search.evaluators import Job, ReplayEvaluator, Unmeasured
from evo.search.loop import NullReporter, Outcome, RunSummary
from evo.store import open_store
from evo.store.models import EvaluationRow
from evo.store.recording import load_recording
from synthetic_sweep import make_recording

FREE = "VEC"   # the gene flash_scalar's kernel code ignores here (nor does its launch read it)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_recording(tmp_path_factory.mktemp("rec") / "sweep-synthetic.json.gz", seed=0)


@pytest.fixture(scope="module", autouse=True)
def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


class Twinned(ReplayEvaluator):
    """Replay whose every build is a file holding one kernel, ``k``, whose machine code depends on
    every gene but :data:`FREE`; each FAST evaluation records its portable digest as the GPU
    evaluator does (device info ``kernel_code_sha256``). It keeps the build ids it evaluated."""

    def __init__(self, recording: Path, folder: Path, free: str = FREE) -> None:
        super().__init__(load_recording(recording))
        self.folder, self.free = folder, free
        self.code: dict[str, str] = {}        # cubin path -> the digest of its one kernel
        self.evaluated: list[str] = []

    def build(self, items: Sequence[Rendered]) -> list[BuildResult | Unmeasured]:
        out = super().build(items)
        for i, (item, res) in enumerate(zip(items, out, strict=True)):
            if isinstance(res, BuildResult) and res.status is Status.BUILT:
                path = self.folder / f"{res.build_id}.cubin"
                path.write_bytes(b"")
                genes = {k: v for k, v in item.candidate.p.items() if k != self.free}
                self.code[str(path)] = hashlib.sha256(json.dumps(genes, sort_keys=True).encode()).hexdigest()
                out[i] = replace(res, cubin_path=str(path))
        return out

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[Evaluation | Unmeasured]:
        jobs = list(jobs)
        for job, ev in zip(jobs, super().evaluate(jobs), strict=True):
            self.evaluated.append(job.build.build_id)
            if isinstance(ev, Evaluation) and job.build.cubin_path:
                ev.device["kernel_code_sha256"] = json.dumps({"k": self.code[job.build.cubin_path]})
            yield ev


def twinned_search(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recording: Path, study: str,
                   ev: Twinned | None = None) -> tuple[RunSummary, Twinned]:
    """A grid search of 30 flash_scalar trials over F1 and F6 on ``tmp_path``'s database."""
    ev = ev or Twinned(recording, tmp_path)
    monkeypatch.setattr(driver, "choose_evaluator", lambda opts, note: ev)
    monkeypatch.setattr(twins, "kernel_digests", lambda path, portable=False: {"k": ev.code[str(path)]})
    opts = RunOptions(replay=recording, db=f"sqlite:///{tmp_path / 'evo.sqlite'}", study=study, batch=4, seed=0,
                      cases=["F1", "F6"], trials=30, families=["flash_scalar"], sampler="grid")
    return run(opts, NullReporter()), ev


def test_a_candidate_whose_kernel_was_timed_before_is_answered_from_that_timing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recording: Path) -> None:
    summary, ev = twinned_search(monkeypatch, tmp_path, recording, "s")
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'evo.sqlite'}")
    done = study.get_trials(deepcopy=False)
    answered = [t for t in done if "evo:built_as" in t.user_attrs]
    assert answered and summary.twins == len(answered)
    assert summary.reused >= summary.twins                  # a twin is answered from the store
    by_candidate = {t.user_attrs["candidate"]: t for t in done
                    if t.state == TrialState.COMPLETE and "evo:built_as" not in t.user_attrs}
    for t in answered:
        twin = by_candidate[t.user_attrs["candidate"]]       # the measured candidate, told in this study
        assert t.state == TrialState.COMPLETE and t.value == twin.value
        assert {k: v for k, v in t.params.items() if not k.endswith(FREE)} == \
               {k: v for k, v in twin.params.items() if not k.endswith(FREE)}
        assert t.params != twin.params and t.user_attrs["evo:built_as"] != twin.user_attrs["candidate"]
        assert "compile to the machine code of" in t.user_attrs["reason"]
    # each kernel timed once: every evaluation a distinct digest, and a twin's own candidate never evaluated
    assert len(ev.evaluated) == len(set(ev.evaluated))
    built_as = {t.user_attrs["evo:built_as"] for t in answered}
    assert not built_as & set(ev.evaluated)
    with open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")._read() as s:
        stored = set(s.scalars(select(EvaluationRow.candidate_id)))
    assert not built_as & stored                             # nothing copied to them
    assert summary.best is not None and summary.best.candidate_id not in built_as
    with console.capture() as printed:
        run_cmds.print_summary(api.run_report(summary, f"sqlite:///{tmp_path / 'evo.sqlite'}"))
    assert f"(of them: kernels timed before, as another candidate's) {len(answered)}" in " ".join(printed.get().split())
    assert api.run_report(summary, f"sqlite:///{tmp_path / 'evo.sqlite'}").document()["twins"] == len(answered)


def test_a_twin_answers_a_later_study_and_only_from_timings_of_its_own_kind(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recording: Path) -> None:
    """A second study on the same database takes its twins from the first's evaluations; the twins
    index reads only FAST evaluations of the full protocol that recorded digests, on its device."""
    first, ev = twinned_search(monkeypatch, tmp_path, recording, "a")
    store = open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")
    index = twins.Twins(store, ev.device)
    index.refresh()
    assert set(index.code) == {cid for cid in set(ev.evaluated)
                               if store.get(cid).candidate.status == Status.FAST.value}
    assert twins.Twins(store, "another GPU").matches({"k": next(iter(ev.code.values()))}, "") == []
    again = Twinned(recording, tmp_path)
    second, _ = twinned_search(monkeypatch, tmp_path, recording, "b", again)
    assert second.twins > 0
    assert not set(again.evaluated) & set(ev.evaluated)      # nothing the first study timed is timed again
    timed = {ev.code[str(tmp_path / f"{cid}.cubin")] for cid in ev.evaluated}
    assert not {again.code[str(tmp_path / f"{cid}.cubin")] for cid in again.evaluated} & timed   # no kernel either


def test_a_gene_of_the_launch_alone_makes_no_twin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  recording: Path) -> None:
    """ROWS_PER_BLOCK sets flash_scalar's threads a CTA: two candidates whose kernel code ignored it would
    still run differently, so none answers for another and every one is timed."""
    summary, ev = twinned_search(monkeypatch, tmp_path, recording, "s",
                                 Twinned(recording, tmp_path, free="ROWS_PER_BLOCK"))
    timed = [ev.code[str(tmp_path / f"{cid}.cubin")] for cid in ev.evaluated]
    assert summary.twins == 0 and len(timed) > len(set(timed))   # the same code timed under other launches


class OneTwin:
    """A store whose one FAST evaluation of candidate t... recorded kernels ``k`` and ``other``."""

    def code_digests(self, device: str, after: int = 0) -> list[tuple[int, str, dict[str, str]]]:
        return [(1, "t" * 64, {"k": "d1", "other": "d2"})] if after == 0 else []


class Answers:
    """A study of one D=128 case whose stored outcome of any candidate is ``outcome``."""

    def __init__(self, outcome: Outcome) -> None:
        self.cases, self.outcome = [Shape("L8", 16, 32, 512, 128, True)], outcome

    def reuse(self, known: object) -> Outcome:
        return self.outcome


@pytest.mark.parametrize("status", ["fast", "red", "pruned"])
def test_only_a_timed_twin_answers_and_only_for_the_studys_head_dims(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, status: str) -> None:
    """The twin's GREEN margin is told for the head dims the study runs (its D=96 kernel is not the trial's);
    a twin whose stored outcome is red or a screen's prune answers nothing (another study's cases, other kernels)."""
    cubin = tmp_path / "n.cubin"
    cubin.write_bytes(b"")
    monkeypatch.setattr(twins, "kernel_digests", lambda path, portable=False: {"k": "d1"})
    monkeypatch.setattr(twins, "known_outcome", lambda store, cid, device: cid)
    stored = Outcome(status, values=[1.1] if status == "fast" else None, candidate_id="t" * 64, reused=True,
                     shares={128: 0.4, 96: 0.9} if status == "fast" else None)
    build = BuildResult("n" * 64, "h", "sm_90a", (), Status.BUILT, cubin_path=str(cubin))
    monkeypatch.setattr(twins.Twins, "launched_alike", lambda self, twin, rendered: True)
    index = twins.Twins(OneTwin(), "GPU")                                            # type: ignore[arg-type]
    index.refresh()
    out = index.answer("n" * 64, build, object(), Answers(stored))                   # type: ignore[arg-type]
    if status != "fast":
        assert out is None
        return
    assert out is not None and out.candidate_id == "t" * 64 and out.built_as == "n" * 64
    assert out.values == [1.1] and out.shares == {128: 0.4}
