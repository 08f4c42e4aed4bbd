"""``evo run --gpus``: which GPUs, each worker's options, and two worker processes on one study
(in replay, where the GPU index is only a tag, so the machinery runs without a GPU)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pytest
from sqlalchemy import select

from evo.errors import EvoError
from evo.search import fanout
from evo.search.driver import RunOptions, run
from evo.search.fanout import merge, parse_gpus, run_workers, tags, worker_options
from evo.search.params import CANDIDATE
from evo.search.records import REUSED, RunSummary
from evo.search.resume import STATUS, counted
from evo.store import open_store
from evo.store.models import Run
from evo.vocab import EVALUATED
from synthetic_sweep import make_recording


def test_gpus_all_or_a_list_of_visible_indices() -> None:
    assert parse_gpus("all", visible=3) == [0, 1, 2]
    assert parse_gpus("1, 0", visible=2) == [1, 0]
    assert parse_gpus("0,0", visible=1) == [0, 0]


@pytest.mark.parametrize("spec, visible, message", [
    ("all", 0, "no CUDA GPU is visible"), ("2", 2, "GPU 2 is not visible"), ("x", 2, "takes 'all'"),
    (",", 2, "empty")])
def test_bad_gpus_are_one_line_errors(spec: str, visible: int, message: str) -> None:
    with pytest.raises(EvoError, match=message):
        parse_gpus(spec, visible=visible)


def test_gpus_with_replay_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvoError, match="--replay measures nothing"):
        fanout.start(RunOptions(replay=tmp_path / "x.json"), "0,1", reporter=None)  # type: ignore[arg-type]


def test_a_grace_period_not_longer_than_the_heartbeat_is_refused() -> None:
    with pytest.raises(EvoError, match="grace period longer than the heartbeat"):
        run(RunOptions(heartbeat_s=5, grace_s=5), Events())


def test_workers_share_the_nvcc_jobs_and_get_their_own_seed() -> None:
    opts = worker_options(RunOptions(jobs=16, seed=5), [0, 1, 1])
    assert [(o.gpu, o.jobs, o.seed) for o in opts] == [(0, 5, 5), (1, 5, 6), (1, 5, 7)]
    assert tags([0, 1, 1]) == ["gpu0", "gpu1.0", "gpu1.1"]
    assert [o.seed for o in worker_options(RunOptions(seed=None), [0, 1])] == [None, None]


@dataclass
class Events:
    starts: int = 0
    advanced: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def start(self, total: int, done: int) -> None:
        self.starts += 1

    def advance(self, number: int, outcome, best) -> None:
        self.advanced.append(number)

    def note(self, text: str) -> None:
        self.notes.append(text)


def test_two_worker_processes_fill_one_study_and_report_as_one(tmp_path: Path) -> None:
    rec = make_recording(tmp_path / "sweep.json.gz", seed=2)
    db = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    events = Events()
    opts = RunOptions(trials=12, batch=2, cases=["F1"], seed=0, db=db, study="f", replay=rec,
                      heartbeat_s=1, grace_s=30)
    summary = run_workers(opts, [0, 0], events)
    assert summary.total == 12 and summary.finished == 12 and not summary.interrupted
    assert events.starts == 1 and sorted(events.advanced) == list(range(12))
    trials = optuna.load_study(study_name="f", storage=db).get_trials(deepcopy=False)
    assert counted(trials) == 12 and len(trials) == 12
    with open_store(db) as store, store._read() as s:  # two workers ran (one may have told every trial)
        runs = list(s.scalars(select(Run).where(Run.study == "f")))
    assert len(runs) == 2 and {r.device["gpu"] for r in runs} == {0}
    assert len({r.device["pid"] for r in runs}) == 2 and {r.status for r in runs} == {"done"}
    assert {int(t.system_attrs["evo:run"]) for t in trials} <= {r.id for r in runs}
    evaluated = {s.value for s in EVALUATED}  # a trial its worker measured was told an evaluation, not reused
    measured = {t.user_attrs[CANDIDATE] for t in trials
                if t.user_attrs.get(STATUS) in evaluated and not t.user_attrs.get(REUSED)}
    assert summary.measured_ids == measured and summary.workers == 2 and summary.gpus == 0
    assert summary.device == "replay:synthetic"


def worker_summary(source: str, measured: set[str], wall_s: float, finished: int) -> RunSummary:
    """One worker's summary: ``measured`` candidates and ``finished`` trials in ``wall_s`` seconds."""
    return RunSummary("s", source, 1, 20, finished=finished, measured_ids=measured, wall_s=wall_s, device="H100")


def test_workers_throughput_adds_their_candidates_over_the_slowest_worker() -> None:
    parts = [worker_summary("gpu", {"a", "b", "c"}, 1800.0, 5),
             worker_summary("gpu", {"d", "e", "f", "g", "h"}, 3600.0, 7),
             worker_summary("gpu", {"c"}, 900.0, 4)]  # a candidate two workers measured counts once
    out = merge(parts)
    assert (out.measured, out.finished, out.workers, out.gpus, out.wall_s) == (8, 16, 3, 3, 3600.0)
    assert out.candidates_per_gpu_hour == pytest.approx(8 / 3) and out.trials_per_gpu_hour == pytest.approx(16 / 3)
    assert out.per_hour(out.measured) == pytest.approx(8.0) and out.device == "H100"
    assert out.first_gpu_s is None                               # none of them measured a start
    parts[0].first_gpu_s, parts[1].first_gpu_s = 41.0, 29.5
    assert merge(parts).first_gpu_s == 29.5                      # the GPUs' first candidate: the earliest


def test_without_a_gpu_or_a_wall_time_there_is_no_rate_per_gpu_hour() -> None:
    replay = worker_summary("replay", {"a", "b"}, 1800.0, 3)
    assert replay.gpus == 0 and replay.candidates_per_gpu_hour is None and replay.per_hour(2) == pytest.approx(4.0)
    unrun = worker_summary("gpu", set(), 0.0, 0)
    assert unrun.gpus == 1 and unrun.candidates_per_gpu_hour is None and unrun.per_hour(0) is None
