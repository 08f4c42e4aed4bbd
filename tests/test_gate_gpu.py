"""GREEN on the GPU: both families' defaults pass the full suite; every faulty kernel is red.

The negative controls come from the test-only ``faulty`` family (tests/templates/faulty); its
``hang`` fault, and faults that crash, belong to the worker's tests (they need a process to kill).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from evo.build import build_batch, default_arch
from evo.gate import run_green, verdict
from evo.render import render
from evo.results import Status
from evo.runtime import CandidateKernels
from evo.space import make_candidate
from evo.suites import green_cases, green_settings

pytestmark = pytest.mark.gpu

FAULTS = {"no_write": "unwritten", "zeros": "max|err|", "skip_tail": "max|err|",
          "no_scale": "max|err|", "no_causal": "max|err|", "oob_write": "wrote out of bounds"}
CANDIDATES = [("flash_scalar", "none"), ("flash_mma", "none"), ("faulty", "none"),
              *(("faulty", f) for f in FAULTS)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], CandidateKernels]]:
    """Every candidate above, compiled in one batch into a private cache and loaded."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(tmp_path_factory.mktemp("candidates")))
        mp.setenv("EVO_TEMPLATE_PATH", str(Path(__file__).parent / "templates"))
        rendered = [render(make_candidate(f, {"FAULT": fault} if f == "faulty" else {}))
                    for f, fault in CANDIDATES]
        results = build_batch(rendered, default_arch())
    device = torch.cuda.current_device()
    loaded = {}
    for key, r, x in zip(CANDIDATES, results, rendered):
        assert r.status is Status.BUILT and r.cubin_path, f"{key}: {r.reason}\n{r.log[-3000:]}"
        loaded[key] = CandidateKernels(r.cubin_path, x.entries, device)
    yield loaded


def _green(kernels: CandidateKernels) -> tuple[Status, str]:
    settings = green_settings()
    checks = run_green(kernels, green_cases(), settings, salt=random.getrandbits(32))
    return verdict(checks, settings.gate_dtypes)


@pytest.mark.parametrize("family", ["flash_scalar", "flash_mma", "faulty"])
def test_default_candidate_is_green(built: dict, family: str) -> None:  # type: ignore[type-arg]
    status, reason = _green(built[(family, "none")])
    assert status is Status.GREEN, reason


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faulty_kernel_is_red_for_its_reason(built: dict, fault: str) -> None:  # type: ignore[type-arg]
    status, reason = _green(built[("faulty", fault)])
    assert status is Status.RED
    assert FAULTS[fault] in reason, reason
