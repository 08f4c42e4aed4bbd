"""Per-sequence lengths and paged caches on CPU (docs/kernel-abi.md, "Ragged and paged caches"):
a problem's layout round-trips through every spelling of a Shape, a paged pool holds the cache it
was made from with its pages out of order, GREEN's decode_lens / decode_paged draws are asked only
of kernels that export those layouts and span what issue 34 asks for, an honest split-KV kernel is
green on them and one reading its page table off by one is red on every seed.

The "kernels" are torch stand-ins of templates/flash_decode's _lens and _paged entries: the split
plan computed on the capacity (:func:`evo.family.space.split_plan`, the family's default on a
132-SM GPU), each sequence's keys gathered row by row through its block table, every split past a
sequence's length an empty part, and the combine. tests/test_decode_gpu.py runs the real ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.render import render
from evo.family.space import launch_config, make_candidate, split_plan
from evo.gpu.evaluate import layouts_of, supported
from evo.gpu.draws import DECODE_SCORES, LAYOUT_KINDS, PAGE_SIZES, drawn_cases
from evo.gpu.gate import SPIKES_TAIL, make_inputs, problem_reference, run_green, verdict
from evo.gpu.layouts import cache_args, from_pages, kv_dims, to_pages
from evo.gpu.runtime import check_cache, check_tensors
from evo.gpu.suites import DRAW_KINDS, DrawSettings, GreenCase, GreenSettings, fast_cases
from evo.products.verify import Bucket, cases_for
from evo.results import CheckResult, Shape, Status, Timing
from evo.store import open_store
from store_fixture import FIXTURES, PARENT, built, evaluation, tiny

SMS = 132
FAMILY = load_family("flash_decode")
LAUNCH = launch_config(FAMILY, make_candidate(FAMILY), 64)
KINDS = tuple(LAYOUT_KINDS)
DRAWS = DrawSettings(kinds=KINDS, tile=8, max_heads=4, decode_keys=(1, 8192))
SETTINGS = GreenSettings(seeds=(0,), multiplier=2.0, floors={"fp16": 5e-4, "bf16": 4e-3},
                         guard_elements=64, draws=DRAWS)
KEYS = [(16, dt, c) for dt in ("fp16", "bf16") for c in (False, True)]
BOTH = {"lens", "paged"}
Tensor = torch.Tensor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ragged_split_kv(fault: str = "none") -> Callable[..., None]:
    """A stand-in of flash_decode's _lens / _paged entries: per sequence b of seqlens[b] keys (its
    mask at their bottom right), rows gathered through the block table (``page_off_by_one``: from
    the next entry of the sequence's row, wrapping), the keys split as the plan on the capacity
    splits them, each split's normalised output and log-sum-exp (-inf when empty), combined."""
    assert LAUNCH.split is not None

    def launch(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0, *,
               seqlens: Tensor, block_table: Tensor | None = None) -> None:
        B, Hq, Lq, D = q.shape
        Hkv = k.shape[1]
        if block_table is None:
            cap, rows_of = k.shape[2], lambda t, b, n: t[b, :, :n]
        else:
            ps, pages = k.shape[2], block_table.shape[1]
            cap = ps * pages

            def rows_of(t: Tensor, b: int, n: int) -> Tensor:
                j = torch.arange(n)
                slot = (j // ps + 1) % pages if fault == "page_off_by_one" else j // ps
                return t[block_table[b, slot].long(), :, j % ps].transpose(0, 1)   # (Hkv, n, D)

        plan = split_plan(LAUNCH.split, LAUNCH.rows_per_cta, B, Hq, Hkv, Lq, cap, SMS)
        heads = torch.arange(Hq) // (Hq // Hkv)
        for b in range(B):
            n = int(seqlens[b])
            kb, vb = rows_of(k, b, n).float()[heads], rows_of(v, b, n).float()[heads]
            s = (q[b].float() @ kb.transpose(-1, -2)) * scale
            if causal:
                s = s.masked_fill(torch.arange(n)[None] > torch.arange(Lq)[:, None] + n - Lq, -math.inf)
            parts, lses = [], []
            for a in range(0, cap, plan.split_len):                  # splits past n: empty
                part = s[..., a:a + plan.split_len]
                lse = torch.logsumexp(part, -1, keepdim=True) if part.shape[-1] else \
                    torch.full((Hq, Lq, 1), -math.inf)
                parts.append(torch.exp(part - lse).nan_to_num(0.0) @ vb[:, a:a + plan.split_len])
                lses.append(lse)
            lse, out = torch.stack(lses), torch.stack(parts)
            top = lse.amax(0)
            w = torch.where(lse == -math.inf, 0.0, torch.exp(lse - top))
            total = w.sum(0)
            o[b] = (w * out).sum(0) * torch.where(total > 0, 1 / total, 0.0)

    return launch


def _green(launch: Callable[..., None], cases: list[GreenCase], salt: int) -> tuple[Status, str]:
    return verdict(run_green(launch, cases, SETTINGS, salt, device="cpu"))


def test_a_layout_round_trips_and_a_contiguous_problem_reads_as_before() -> None:
    lens = Shape("D6", 64, 32, 1, 128, False, "bf16", 8, 16000, "top_left", "lens", 100, 34)
    paged = Shape("D7", 4, 8, 2, 64, True, "fp16", 2, 100, "top_left", "paged", 0, 3, 16)
    for s in (lens, paged):
        assert Shape.from_dict(s.as_dict()) == s
    assert paged.align == "bottom_right"                         # each sequence's own bottom right
    plain = Shape("D1", 1, 32, 1, 128, False, "bf16", 8, 131072)
    assert plain.as_dict() == {"case": "D1", "B": 1, "H": 32, "L": 1, "D": 128, "causal": False, "dtype": "bf16",
                               "Hkv": 8, "Lk": 131072}
    assert plain.seqlens() == [131072] and plain.kv_rows == 131072 and plain.dims == "1,32/8,1/131072,128"
    assert lens.dims.endswith("lens 100..16000") and "paged16" in paged.dims
    with pytest.raises(ValueError):
        Shape("X", 1, 1, 1, 64, False, "fp16", 1, 10, "top_left", "paged", 0, 0, 0)   # no page size
    with pytest.raises(ValueError):
        Shape("X", 1, 1, 1, 64, False, "fp16", 1, 10, page_size=16)                    # pages, contiguous


def test_lengths_hold_the_capacity_and_both_edges_and_the_pages_are_shuffled() -> None:
    s = Shape("P", 6, 4, 1, 64, False, "fp16", 2, 100, "top_left", "paged", 0, 7, 16)
    lens = s.seqlens()
    assert max(lens) == 100 and {0, 1} <= set(lens) and lens == s.seqlens()          # pure
    table = s.block_table()
    assert sorted(table) == list(range(6 * 7)) and table != sorted(table)
    assert s.kv_rows == sum(lens)
    k = torch.randn(6, 2, 100, 64)
    pool = to_pages(k, s)
    assert tuple(pool.shape) == kv_dims(s) == (42, 2, 16, 64)
    assert torch.equal(from_pages(pool, s), k)
    args = cache_args(s, "cpu")
    assert args["seqlens"].dtype == torch.int32 and tuple(args["block_table"].shape) == (6, 7)
    page, row = divmod(37, 16)                                   # key 37 of sequence 4: row 5 of its page 2
    assert torch.equal(pool[int(args["block_table"][4, page]), :, row], k[4, :, 37])


def test_the_decode_suite_states_the_ragged_batch_and_its_paged_twin() -> None:
    by_case = {s.case: s for s in fast_cases(["D6-D7"])}
    d6, d7 = by_case["D6"], by_case["D7"]
    assert (d6.B, d6.H, d6.Hkv, d6.L, d6.Lk, d6.D, d6.dtype) == (64, 32, 8, 1, 16000, 128, "bf16")
    assert d6.layout == "lens" and d7.layout == "paged" and d7.page_size == 16
    assert d6.seqlens() == d7.seqlens() and min(d6.seqlens()) == 100 and max(d6.seqlens()) == 16000


def test_layout_kinds_are_drawn_only_for_kernels_that_export_them() -> None:
    assert DRAW_KINDS[-2:] == KINDS                              # last: leaving them out changes no other draw
    every = DrawSettings()
    plain = drawn_cases(every, KEYS, 5)
    assert all(c.shape.layout == "contiguous" for c in plain)
    both = drawn_cases(every, KEYS, 5, BOTH)
    assert [c.shape for c in both[:len(plain)]] == [c.shape for c in plain]
    assert [c.shape.layout for c in both[len(plain):]] == ["lens", "lens", "paged", "paged"]
    assert {c.shape.layout for c in drawn_cases(every, KEYS, 5, {"lens"})} == {"contiguous", "lens"}


def test_layout_draws_span_what_the_issue_asks_for() -> None:
    cases = [c for seed in range(100) for c in drawn_cases(DrawSettings(kinds=KINDS), KEYS, seed, BOTH)]
    assert all({0, 1, c.shape.Lk} <= set(c.shape.seqlens()) for c in cases)
    assert all(c.shape.B * c.shape.H * c.shape.L * c.shape.Lk <= DECODE_SCORES for c in cases)
    assert {c.shape.page_size for c in cases if c.shape.layout == "paged"} == set(PAGE_SIZES)
    assert all(c.shape.pages_per_seq >= 2 for c in cases if c.shape.layout == "paged")
    assert all(c.inputs == "spikes" for c in cases)
    assert max(c.shape.Lk for c in cases) >= 16384 and {c.shape.L for c in cases} == set(range(1, 17))
    split = LAUNCH.split
    assert split is not None                                     # the long sequences are split, raggedly
    assert sum(split_plan(split, 16, c.shape.B, c.shape.H, c.shape.Hkv, c.shape.L, c.shape.Lk, SMS).splits > 1
               for c in cases) > len(cases) // 2


def test_spikes_fall_within_each_sequence_far_apart() -> None:
    s = Shape("X", 4, 4, 1, 16, False, "fp16", 2, 3000, "top_left", "lens", 0, 11)
    _, k, _ = make_inputs(s, 0, 0, "cpu", std=1.0, spike=40.0, inputs="spikes")
    norms = k.float().norm(dim=-1)
    for b, n in enumerate(s.seqlens()):
        if n < 8 * SPIKES_TAIL:
            continue
        top2 = norms[b, :, :n].topk(2, dim=-1).indices
        assert bool((top2[:, 0] >= n - SPIKES_TAIL).all()) and bool((top2[:, 1] < n // 8).all()), (b, n)


def test_the_reference_takes_each_sequence_alone() -> None:
    s = Shape("X", 3, 4, 2, 16, True, "fp16", 2, 50, "top_left", "lens", 0, 1)
    q, k, v = make_inputs(s, 0, 0, "cpu")
    ref = problem_reference(q, k, v, s, 0.25, torch.float64)
    for b, n in enumerate(s.seqlens()):
        if n == 0:
            assert not bool(ref[b].any())                         # no keys: zeros
            continue
        kk = k[b, :, :n].double().repeat_interleave(2, 0)
        scores = (q[b].double() @ kk.transpose(-1, -2)) * 0.25
        scores = scores.masked_fill(torch.arange(n)[None] > torch.arange(2)[:, None] + n - 2, -math.inf)
        want = torch.softmax(scores, -1).nan_to_num(0.0) @ v[b, :, :n].double().repeat_interleave(2, 0)
        assert torch.allclose(ref[b], want), b


@pytest.mark.parametrize("salt", range(4))
def test_an_honest_ragged_split_kv_kernel_passes_the_layout_draws(salt: int) -> None:
    status, reason = _green(ragged_split_kv(), drawn_cases(DRAWS, KEYS, salt, BOTH), salt)
    assert status is Status.GREEN, reason


@pytest.mark.parametrize("salt", range(6))
def test_a_page_table_read_off_by_one_is_red_on_every_paged_draw(salt: int) -> None:
    cases = [c for c in drawn_cases(DRAWS, KEYS, salt, BOTH) if c.shape.layout == "paged"]
    assert len(cases) == 2                                       # one per dtype
    for case in cases:                                           # each check alone catches it
        status, why = _green(ragged_split_kv("page_off_by_one"), [case], salt)
        assert status is Status.RED and ("max|err|" in why or "in output" in why), why


def test_promotes_checks_of_a_paged_route_pass_the_honest_kernel_and_catch_the_page_fault() -> None:
    """Promote's verification of a layout route (evo.products.verify.cases_for on a paged bucket,
    issue 34; a lens bucket's checks are the same problems in one cache) is green on the honest
    stand-in and red on the page-table fault in each of its checks of two pages or more (the
    many-heads ones, at capacity 1, have one page: no other to read)."""
    cases = cases_for([Bucket((64, "fp16", True), 1, 300, (250,), 48, "paged", (16,))], 3)
    assert {c.shape.layout for c in cases} == {"paged"} and len(cases) >= 6
    status, reason = _green(ragged_split_kv(), cases, 3)
    assert status is Status.GREEN, reason
    paged = [c for c in cases if c.shape.pages_per_seq >= 2]
    assert len(paged) >= 4
    for case in paged:
        assert _green(ragged_split_kv("page_off_by_one"), [case], 3)[0] is Status.RED, case.shape


def test_the_faulty_family_plants_the_page_fault_only_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(Path(__file__).parent / "templates"))
    honest = render(make_candidate("faulty_decode", {"DECODE_FAULT": "none"})).source
    planted = render(make_candidate("faulty_decode", {"DECODE_FAULT": "page_off_by_one"})).source
    assert "(slot[p] + 1) % pages" in planted and "(slot[p] + 1)" not in honest
    assert "evo_attn_d128_bf16_causal_paged(" in honest and "evo_attn_d64_fp16_full_lens(" in honest


def test_the_store_keeps_a_checks_and_a_timings_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    lens = Shape("D6", 64, 32, 1, 128, False, "bf16", 8, 16000, "top_left", "lens", 100, 34)
    paged = Shape("R24 sd=2.0 spike 2spk", 5, 8, 4, 64, True, "fp16", 2, 900, "top_left", "paged", 0, 17, 48)
    with open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}") as store:
        item = tiny()
        store.record_build(item, built(item, PARENT))
        ev = evaluation(PARENT)
        store.record_evaluation(replace(ev, checks=[*ev.checks, CheckResult(paged, 0, True, 1e-3, 1e-3, 3e-3)],
                                        timings=[*ev.timings, Timing(lens, "evo", 300.0, 290.0, 310.0, [300.0])]))
        (view,) = store.evaluations(PARENT)
    assert view.checks[-1].shape == paged and view.timings[-1].shape == lens
    assert view.checks[0].shape == ev.checks[0].shape                # a contiguous row reads as before


def test_a_family_without_the_layout_entries_is_not_asked_them() -> None:
    entries = render(make_candidate(FAMILY)).entries
    plain = tuple(replace(e, launch=replace(e.launch, layouts=())) for e in entries)
    assert layouts_of(entries) == BOTH and layouts_of(plain) == set()
    cases = fast_cases(["decode"])
    assert [s.case for s in supported(cases, entries)] == [s.case for s in cases]
    assert [s.case for s in supported(cases, plain)] == ["D1", "D2", "D3", "D4", "D5"]


def test_the_runtime_refuses_index_tensors_the_kernels_do_not_take() -> None:
    q = torch.zeros(3, 8, 1, 64, dtype=torch.float16)
    pool = torch.zeros(12, 2, 16, 64, dtype=torch.float16)
    cpu = torch.device("cpu")
    good, table = torch.tensor([5, 0, 64], dtype=torch.int32), torch.zeros(3, 4, dtype=torch.int32)
    check_cache(q, good, table, cpu)
    check_tensors(q, pool, pool, q.clone(), cpu, pool=True)           # a pool: any number of pages
    with pytest.raises(EvoError, match="int32"):
        check_cache(q, good.long(), None, cpu)
    with pytest.raises(EvoError, match="shape"):
        check_cache(q, good[:2], None, cpu)
    with pytest.raises(EvoError, match="shape"):
        check_cache(q, good, table.view(-1), cpu)
    with pytest.raises(EvoError, match="batch"):
        check_tensors(q, pool, pool, q.clone(), cpu)                   # not a pool: k needs q's batch
