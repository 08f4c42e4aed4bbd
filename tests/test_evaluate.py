"""The worker's GREEN-then-FAST pass: request options and case filtering on CPU;
a family default evaluated end to end in a real worker on a GPU."""

from __future__ import annotations

import pytest

from evo.evaluate import INTERLEAVED, NORMAL, QUICK, Plan, supported
from evo.render import Entry
from evo.results import Shape, Status
from evo.space import LaunchConfig

CFG = LaunchConfig(128, 64, 0)


@pytest.mark.parametrize(("options", "rounds", "reps"), [
    ({}, NORMAL["rounds"], NORMAL["reps"]),
    ({"quick": True}, QUICK["rounds"], QUICK["reps"]),
    ({"interleave": True}, INTERLEAVED["rounds"], INTERLEAVED["reps"]),
    ({"quick": True, "rounds": 7}, 7, QUICK["reps"]),
])
def test_plan_from_options(options: dict[str, object], rounds: int, reps: int) -> None:
    plan = Plan.of(options)
    assert (plan.rounds, plan.reps) == (rounds, reps)


def test_plan_defaults_compare_with_every_backend() -> None:
    plan = Plan.of({"salt": 9})
    assert plan.backends == ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default")
    assert (plan.salt, plan.interleave) == (9, False)


def test_supported_keeps_shapes_with_a_kernel() -> None:
    entries = [Entry("evo_attn_d64_fp16_full", 64, "fp16", False, CFG),
               Entry("evo_attn_d64_fp16_causal", 64, "fp16", True, CFG)]
    shapes = [Shape("a", 1, 1, 8, 64, False), Shape("b", 1, 1, 8, 128, False),
              Shape("c", 1, 1, 8, 64, True, "bf16"), Shape("d", 1, 1, 8, 64, True)]
    assert [s.case for s in supported(shapes, entries)] == ["a", "d"]


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["flash_scalar", "flash_mma"])
def test_worker_evaluates_a_family_default_end_to_end(family: str) -> None:
    from evo.build import build_batch, default_arch, nvcc_path
    from evo.errors import EvoError
    from evo.render import render
    from evo.space import make_candidate
    from evo.suites import fast_cases
    from evo.worker import EvalRequest, Worker

    try:
        nvcc_path()
    except EvoError:
        pytest.skip("nvcc not available")
    rendered = render(make_candidate(family))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT, built.reason
    request = EvalRequest(built.build_id, built.cubin_path, rendered.entries,
                          fast_cases=tuple(fast_cases(["F1"])), options={"quick": True, "salt": 1})
    with Worker(0) as worker:
        ev = worker.evaluate(request, timeout_s=600)
    assert ev.status is Status.FAST, ev.reason
    assert ev.checks and all(c.passed for c in ev.checks)
    backends = {(t.shape.tag, t.backend) for t in ev.timings}
    assert {("F1-fp16", "evo"), ("F1c-fp16", "evo"), ("F1-fp16", "sdpa_default")} <= backends
    assert all(t.median_us > 0 for t in ev.timings)
    assert ev.device["name"] and ev.green_seconds > 0 and ev.fast_seconds > 0
