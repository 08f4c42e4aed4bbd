"""The worker's limits on a real GPU, with kernels of the test-only ``faulty`` family: a kernel
that never terminates is a ``timeout`` that says it was stuck, a slow one a ``timeout`` that says
it was slow, and either way a fresh worker goes on; a launch that cannot be set up is
``resource_rejected`` without a restart; a cold worker's start-up is not charged to its first
request."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from evo.family.render import Entry, Rendered
from evo.results import BuildResult, Status

pytestmark = pytest.mark.gpu

TEST_TEMPLATES = Path(__file__).parent / "templates"
FAULTS = ("none", "hang", "slow", "slow_first")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Rendered, BuildResult]]]:
    """Every fault above, built in one batch into a private cache."""
    from evo.toolchain.build import build_batch, default_arch
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))
        mp.setenv("EVO_CANDIDATES", str(tmp_path_factory.mktemp("candidates")))
        fam = load_family("faulty")
        rendered = [render(make_candidate(fam, {"FAULT": f}), fam) for f in FAULTS]
        built = build_batch(rendered, arch=default_arch())
        assert [b.status for b in built] == [Status.BUILT] * len(FAULTS), [b.reason for b in built]
        yield {f: (r, b) for f, r, b in zip(FAULTS, rendered, built, strict=True)}  # the cache stays set


def green(faulty: dict[str, tuple[Rendered, BuildResult]], fault: str, *, build_id: str | None = None,
          entries: tuple[Entry, ...] | None = None):  # noqa: ANN201 - EvalRequest, imported late
    from evo.gpu.worker import EvalRequest

    rendered, built = faulty[fault]
    return EvalRequest(build_id or built.build_id, built.cubin_path or "", entries or rendered.entries,
                       green=True, fast_cases=())


def test_a_hanging_kernel_times_out_as_stuck_and_the_worker_is_replaced(faulty) -> None:  # type: ignore[no-untyped-def]
    from evo.gpu.worker import Worker

    with Worker(0) as worker:
        stuck = worker.evaluate(green(faulty, "hang"), timeout_s=20)
        assert stuck.status is Status.TIMEOUT
        assert "stuck: no progress in the last" in stuck.reason and "GREEN launch 1" in stuck.reason, stuck.reason
        after = worker.evaluate(green(faulty, "none"), timeout_s=300)
        assert after.status is Status.GREEN, after.reason
        assert worker.restarts == 1


def test_a_slow_kernel_times_out_as_slow(faulty) -> None:  # type: ignore[no-untyped-def]
    from evo.gpu.worker import Worker

    with Worker(0) as worker:
        slow = worker.evaluate(green(faulty, "slow"), timeout_s=6)  # every launch lasts >= 1 s
        assert slow.status is Status.TIMEOUT
        assert "slow: still progressing" in slow.reason and "GREEN launch" in slow.reason, slow.reason
        assert worker.restarts == 1


def test_an_over_limit_shared_memory_launch_is_resource_rejected_without_a_restart(faulty) -> None:  # type: ignore[no-untyped-def]
    """Shared memory over the limit, planted in the launch config of a built candidate: the parent
    rejects it against the cached build, and the worker's runtime rejects it for a build id the
    parent cannot look up; neither kills the worker, which then gates a healthy kernel."""
    from evo.toolchain.build import default_arch, smem_limit
    from evo.gpu.worker import Worker

    rendered, _ = faulty["none"]
    over = smem_limit(default_arch()) + 1024
    wide = tuple(dataclasses.replace(e, launch=dataclasses.replace(e.launch, smem_bytes=over))
                 for e in rendered.entries)
    with Worker(0) as worker:
        pid = worker.pid
        in_parent = worker.evaluate(green(faulty, "none", entries=wide), timeout_s=60)
        assert in_parent.status is Status.RESOURCE_REJECTED, in_parent.reason
        assert f"{over} dynamic) > {smem_limit(default_arch())} B on {default_arch()}" in in_parent.reason
        in_worker = worker.evaluate(green(faulty, "none", build_id="planted-uncached", entries=wide), timeout_s=60)
        assert in_worker.status is Status.RESOURCE_REJECTED, in_worker.reason
        assert f"{over} dynamic) >" in in_worker.reason and "on this GPU" in in_worker.reason
        after = worker.evaluate(green(faulty, "none"), timeout_s=300)
        assert after.status is Status.GREEN, after.reason
        assert worker.restarts == 0 and worker.pid == pid


def test_a_cold_workers_first_request_gets_its_whole_budget(faulty) -> None:  # type: ignore[no-untyped-def]
    """A fresh worker (torch import, CUDA context and libraries still to load) and a first launch
    that lasts 2 s: GREEN passes within a 10 s budget, because start-up is not charged to it."""
    from evo.gpu.worker import Worker

    with Worker(0) as worker:
        ev = worker.evaluate(green(faulty, "slow_first"), timeout_s=10)
        assert ev.status is Status.GREEN, ev.reason
        assert ev.green_seconds >= 2.0  # the planted 2 s launch ran inside the budget
        assert worker.restarts == 0
