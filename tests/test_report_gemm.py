"""The GEMM rate behind the report's roofline: a GPU search measures it once per run, and the
report draws it only beside candidates timed in that run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from store_fixture import CHILD, FIXTURES, built, evaluation, populate, tiny

from evo.report import build, data
from evo.search.evaluators import GpuEvaluator, Job
from evo.store import Store, open_store

OTHER = "ac" + "0" * 62


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    store = open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}")
    populate(store)  # run 1 timed PARENT and CHILD, without a GEMM rate
    return store


def test_a_gpu_search_asks_for_the_gemm_rate_once() -> None:
    seen: list = []
    ev = GpuEvaluator.__new__(GpuEvaluator)  # no GPU: the pool is a stand-in that records requests
    ev.options, ev.timeout_s = {}, 1.0
    ev.pool = SimpleNamespace(map=lambda reqs, timeout: seen.extend(reqs) or iter(()))
    jobs = [Job(SimpleNamespace(entries=()), SimpleNamespace(build_id=f"b{i}", cubin_path="x"), True, ())
            for i in range(3)]
    list(ev.evaluate(jobs))
    list(ev.evaluate(jobs))
    assert [bool(r.options.get("gemm")) for r in seen] == [True, False, False, False, False, False]


def test_the_rate_comes_from_the_runs_that_timed_the_candidates_shown(store: Store) -> None:
    assert data.gemm_rate(store, "NVIDIA H200", [CHILD], [CHILD]) is None
    run = store.start_run("evo run", study="s2")
    item = tiny(ROWS=128)
    store.record_build(item, built(item, OTHER), run)
    measured = evaluation(OTHER, 6.0)
    measured.device["gemm_tflops"] = "770.4"
    store.record_evaluation(measured, run)
    assert data.gemm_rate(store, "NVIDIA H200", [OTHER], [CHILD, OTHER]) == 770.4
    assert data.gemm_rate(store, "NVIDIA H200", [CHILD], [CHILD, OTHER]) is None  # run 1 measured none
    assert data.gemm_rate(store, "NVIDIA H100", [OTHER], [OTHER]) is None          # another device


def test_the_roofline_draws_the_rate_of_the_same_run(store: Store) -> None:
    run = store.start_run("evo run", study="s2")
    item = tiny(ROWS=128)
    store.record_build(item, built(item, OTHER), run)
    measured = evaluation(OTHER, 2.0)  # the fastest on every case: the winner the roofline shows
    measured.device["gemm_tflops"] = "770.4"
    store.record_evaluation(measured, run)
    html = build(store)
    figures = json.loads(re.search(r'id="evo-figures">(.*?)</script>', html, re.S).group(1))
    (line,) = [t for t in figures["roofline"]["data"] if t["name"].startswith("dense fp16 GEMM")]
    assert line["y"] == [770.4, 770.4] and "770 TFLOP/s" in line["name"]
