"""Negative controls that need a process to kill: a kernel that never terminates ends
``timeout`` in a real GPU worker, and the replacement worker goes on serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.results import Status

TEST_TEMPLATES = Path(__file__).parent / "templates"


@pytest.mark.gpu
def test_a_hanging_kernel_times_out_and_the_worker_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.build import build_batch, default_arch
    from evo.manifest import load_family
    from evo.render import render
    from evo.space import make_candidate
    from evo.worker import EvalRequest, Worker

    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))
    fam = load_family("faulty")
    hang, ok = (render(make_candidate(fam, {"FAULT": f}), fam) for f in ("hang", "none"))
    built = build_batch([hang, ok], arch=default_arch())
    assert [b.status for b in built] == [Status.BUILT, Status.BUILT]
    with Worker(0) as worker:
        stuck = worker.evaluate(EvalRequest(built[0].build_id, built[0].cubin_path or "", hang.entries,
                                            green=True, fast_cases=()), timeout_s=20)
        assert stuck.status is Status.TIMEOUT
        after = worker.evaluate(EvalRequest(built[1].build_id, built[1].cubin_path or "", ok.entries,
                                            green=True, fast_cases=()), timeout_s=300)
        assert after.status is Status.GREEN, after.reason
        assert worker.restarts >= 1
