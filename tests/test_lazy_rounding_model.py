"""scripts/lazy_rounding_model.py: the CPU model behind flash_wgmma's rounded row sum under LAZY
(dev/perf-notes.md, 2026-11-26) keeps saying what the kernel change rests on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SPEC = importlib.util.spec_from_file_location(
    "lazy_rounding_model", Path(__file__).resolve().parents[1] / "scripts" / "lazy_rounding_model.py")
assert SPEC and SPEC.loader
MODEL = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(MODEL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_stale_max_costs_accuracy_and_the_rounded_sum_wins_most_of_it_back(dtype: torch.dtype) -> None:
    e = MODEL.errors(dtype, seed=0, rows=64, length=2048)
    assert e["lazy"] > 2 * e["exact max"]                 # the unrounded sum against rounded P
    assert e["lazy, rounded sum"] < 0.6 * e["lazy"]
    assert e["lazy, rounded sum"] < e["lazy, truncated P"]


def test_without_lazy_every_variant_is_the_plain_online_softmax() -> None:
    q, k, v = MODEL.inputs(torch.float16, 1, 32, 512, 64, 1.0, 1.0)
    ref = torch.softmax(q.double() @ k.double().T / 8.0, 1) @ v.double()
    assert (MODEL.attention(q, k, v, False, "plain") - ref).abs().max().item() < 2e-3
