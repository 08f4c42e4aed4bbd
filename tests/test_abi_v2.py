"""Kernel ABI v2 on CPU (issue 33): the problem record (grouped heads, Lq != Lk, the causal mask's
corner), GREEN's float64 reference against a brute-force one, the LLM FAST suite, and the store
keeping what a check ran."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from evo.errors import EvoError
from evo.gpu.gate import make_inputs, reference, sdpa, zero_unseen
from evo.gpu.suites import fast_cases, fast_cases_by_tag
from evo.results import CheckResult, Shape
from evo.store import open_store
from store_fixture import FIXTURES, built, evaluation, tiny


def brute(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, shift: int) -> torch.Tensor:
    """Attention one (batch, query head, row) at a time in float64, straight from the ABI's text."""
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    out = torch.zeros(B, Hq, Lq, D, dtype=torch.float64)
    for b, h, i in itertools.product(range(B), range(Hq), range(Lq)):
        hk = h // (Hq // Hkv)
        seen = [j for j in range(Lk) if not causal or j <= i + shift]
        if not seen:
            continue                                          # a row that sees no key is zeros
        s = torch.stack([(q[b, h, i].double() * k[b, hk, j].double()).sum() * scale for j in seen])
        p = torch.softmax(s, 0)
        out[b, h, i] = sum(p[n] * v[b, hk, j].double() for n, j in enumerate(seen))
    return out


PROBLEMS = [  # (B, Hq, Hkv, Lq, Lk, align)
    (1, 4, 2, 5, 9, "bottom_right"), (2, 6, 3, 9, 5, "bottom_right"), (1, 3, 1, 7, 7, "top_left"),
    (1, 2, 2, 4, 11, "top_left"), (1, 4, 1, 12, 3, "bottom_right"), (1, 2, 2, 6, 6, "top_left"),
]


@pytest.mark.parametrize(("B", "Hq", "Hkv", "Lq", "Lk", "align"), PROBLEMS)
@pytest.mark.parametrize("causal", [False, True])
def test_reference_is_the_abi_problem(B: int, Hq: int, Hkv: int, Lq: int, Lk: int, align: str, causal: bool) -> None:
    shape = Shape("X", B, Hq, Lq, 8, causal, "fp16", Hkv, Lk, align)
    q, k, v = make_inputs(shape, 0, 0, "cpu")
    assert q.shape == (B, Hq, Lq, 8) and k.shape == v.shape == (B, Hkv, Lk, 8)
    want = brute(q, k, v, causal, 0.3, shape.shift)
    got = reference(q, k, v, causal, 0.3, torch.float64, shift=shape.shift)
    assert torch.allclose(got, want, atol=1e-12), (got - want).abs().max()
    own = zero_unseen(sdpa(q.float(), k.float(), v.float(), causal=causal, shift=shape.shift, scale=0.3),
                      causal, shape.shift)
    assert torch.allclose(own.double(), want, atol=1e-5)


def test_rows_that_see_no_key_are_zeros_and_the_rest_are_not() -> None:
    shape = Shape("X", 1, 2, 10, 4, True, "fp16", 1, 6, "bottom_right")     # shift -4
    q, k, v = make_inputs(shape, 0, 0, "cpu")
    out = reference(q, k, v, True, 0.5, torch.float64, shift=shape.shift)
    assert shape.shift == -4 and bool((out[:, :, :4] == 0).all()) and bool((out[:, :, 4:] != 0).all())


def test_shape_normalizes_its_alignment_and_counts_visible_pairs() -> None:
    assert Shape("X", 1, 8, 64, 64, True, align="bottom_right").align == "top_left"       # Lq == Lk
    assert Shape("X", 1, 8, 64, 128, False, align="bottom_right").align == "top_left"     # not causal
    square = Shape("X", 2, 8, 512, 64, True)
    assert (square.Hkv, square.Lk, square.shift) == (8, 512, 0)
    assert square.flops == 4 * 2 * 8 * 512 * 512 * 64 / 2                                  # convention kept
    for Lq, Lk, align in itertools.product((1, 5, 64), (1, 7, 130), ("top_left", "bottom_right")):
        s = Shape("X", 1, 1, Lq, 64, True, Lk=Lk, align=align)
        if Lq != Lk:
            assert s.visible_pairs == sum(min(Lk, max(0, i + s.shift + 1)) for i in range(Lq))
    with pytest.raises(ValueError, match="alignment"):
        Shape("X", 1, 1, 2, 64, True, align="middle")


def test_shape_records_round_trip_and_old_records_read_as_before() -> None:
    v2 = Shape("L3", 1, 32, 512, 128, True, "bf16", 8, 8192, "bottom_right")
    assert Shape.from_dict(v2.as_dict()) == v2 and v2.dims == "1,32/8,512/8192,128 br"
    old = {"case": "F1", "B": 1, "H": 8, "L": 512, "D": 64, "causal": False}
    assert Shape.from_dict(old).as_dict() == old | {"dtype": "fp16"}


def test_llm_suite_is_selectable_beside_the_default_one() -> None:
    default = fast_cases()
    assert [s.case for s in default][:2] == ["F1", "F1"] and all(s.Hkv == s.H for s in default)
    llm = fast_cases(["llm"])
    assert [s.case for s in llm] == [f"L{i}" for i in range(1, 9)] and {s.dtype for s in llm} == {"bf16"}
    chunk = next(s for s in llm if s.case == "L3")
    assert (chunk.H, chunk.Hkv, chunk.L, chunk.Lk, chunk.align, chunk.shift) == (32, 8, 512, 8192, "bottom_right", 7680)
    assert [s.causal for s in llm if s.case == "L7"] == [False]                  # cross-attention
    assert [s.tag for s in fast_cases(["L1-L2-fp16", "F1c"])] == ["F1c-fp16", "L1c-fp16", "L2c-fp16"]
    assert "L3c-bf16" in fast_cases_by_tag() and "F4c-fp16" in fast_cases_by_tag()
    with pytest.raises(EvoError, match="llm: L1, L2"):
        fast_cases(["L9"])


def test_the_store_keeps_the_problem_a_check_and_a_timing_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    chunk = Shape("R30 sd=2.8", 1, 8, 37, 64, True, "bf16", 2, 901, "bottom_right")
    ev = evaluation("c" * 64)
    ev = replace(ev, checks=[*ev.checks, CheckResult(chunk, 0, True, 1e-3, 1e-3, 3e-3)],
                 timings=[replace(t, shape=chunk) for t in ev.timings[:1]])
    with open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}") as store:
        item = tiny()
        store.record_build(item, built(item, "c" * 64))
        store.record_evaluation(ev)
        (stored,) = store.evaluations("c" * 64)
        assert stored.checks[-1].shape == chunk and stored.checks[0].shape.Hkv == stored.checks[0].shape.H
        assert store.timings_for("c" * 64)[0].shape == chunk
        assert math.isclose(store.timings_for("c" * 64)[0].shape.flops, chunk.flops)
