"""On a GPU: a search stores the GEMM rate with its first evaluation, and the report's data finds
it beside the kernels that run timed (the dashed line of the roofline), for a real device."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.analysis.lineage import build_lineage
from evo.report import data
from evo.results import Status
from evo.search.driver import RunOptions, run
from evo.search.loop import NullReporter
from evo.store import open_store

pytestmark = pytest.mark.gpu


def test_a_gpu_search_keeps_the_gemm_rate_for_the_roofline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    summary = run(RunOptions(families=["flash_mma"], sampler="grid", trials=2, batch=2, cases=["F1"], db=url,
                             study="gemm"), NullReporter())
    assert summary.source == "gpu" and summary.counts.get("fast"), summary.counts
    with open_store(url) as store:
        lin = build_lineage(store, "gemm")
        timed = store.latest_timings([n.id for n in lin.nodes.values() if n.status is Status.FAST])
        cases = data.cases(store, lin, timed, "sdpa_default")
    assert cases["device"] and cases["winners"]
    assert 100.0 < cases["gemm_tflops"] < 5000.0  # dense fp16 on a datacenter GPU: hundreds of TFLOP/s
