"""GREEN's decode draws on CPU: a split-KV kernel's combine bugs are red on them for every seed,
an honest split-KV kernel is green, and the draws span what issue 34 asks for.

The "kernels" are torch stand-ins of templates/flash_decode's schedule: the keys split as
:func:`evo.family.space.split_plan` splits them for the family's default on a 132-SM GPU, each
split's normalised output and log-sum-exp, and the combine, honest or with the planted faults of
tests/templates/faulty_decode (run on a GPU by tests/test_decode_gpu.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from evo.family.manifest import load_family
from evo.family.space import all_candidates, launch_config, make_candidate, split_plan
from evo.gpu.draws import DECODE_GROUPS, DECODE_KINDS, DECODE_SCORES, SPIKES_ROWS, drawn_cases
from evo.gpu.gate import SPIKES_TAIL, make_inputs, run_green, verdict
from evo.gpu.suites import DrawSettings, GreenCase, GreenSettings
from evo.results import Shape, Status

SMS = 132
FAMILY = load_family("flash_decode")
LAUNCH = launch_config(FAMILY, make_candidate(FAMILY), 64)
DRAWS = DrawSettings(kinds=DECODE_KINDS, tile=8, max_heads=4, decode_keys=(1, 8192))
SETTINGS = GreenSettings(seeds=(0,), multiplier=2.0, floors={"fp16": 5e-4, "bf16": 4e-3},
                         guard_elements=64, draws=DRAWS)
KEYS = [(16, dt, c) for dt in ("fp16", "bf16") for c in (False, True)]
Tensor = torch.Tensor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def split_kv(fault: str = "none") -> Callable[..., None]:
    """A stand-in of flash_decode's schedule: every split's softmax-normalised output and natural
    log-sum-exp (-inf where a row sees none of its keys), combined with weights exp(lse - max) and
    divided by their sum; ``one_max`` takes the maximum without the last split, ``drop_last`` leaves
    the last split out."""
    assert LAUNCH.split is not None

    def launch(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
        B, Hq, Lq, _ = q.shape
        Hkv, Lk = k.shape[1], k.shape[2]
        plan = split_plan(LAUNCH.split, LAUNCH.rows_per_cta, B, Hq, Hkv, Lq, Lk, SMS)
        heads = torch.arange(Hq) // (Hq // Hkv)                # each query head's K/V head
        kq, vq = k.float()[:, heads], v.float()[:, heads]
        s = (q.float() @ kq.transpose(-1, -2)) * scale
        if causal:                                             # query i sees keys j <= i + shift
            s = s.masked_fill(torch.arange(Lk)[None] > torch.arange(Lq)[:, None] + shift, -math.inf)
        parts, lses = [], []
        for a in range(0, Lk, plan.split_len):
            part = s[..., a:a + plan.split_len]
            lse = torch.logsumexp(part, -1, keepdim=True)
            parts.append((torch.exp(part - lse).nan_to_num(0.0)) @ vq[:, :, a:a + plan.split_len])
            lses.append(lse)
        lse, out = torch.stack(lses), torch.stack(parts)
        top = (lse[:-1] if fault == "one_max" and len(lses) > 1 else lse).amax(0)
        kept = len(lses) - 1 if fault == "drop_last" and len(lses) > 1 else len(lses)
        w = torch.where(lse[:kept] == -math.inf, 0.0, torch.exp(lse[:kept] - top))
        total = w.sum(0)
        o.copy_((w * out[:kept]).sum(0) * torch.where(total > 0, 1 / total, 0.0))

    return launch


def _green(launch: Callable[..., None], cases: list[GreenCase], salt: int) -> tuple[Status, str]:
    return verdict(run_green(launch, cases, SETTINGS, salt, device="cpu"))


@pytest.mark.parametrize("salt", range(5))
def test_an_honest_split_kv_kernel_passes_the_decode_draws(salt: int) -> None:
    status, reason = _green(split_kv(), drawn_cases(DRAWS, KEYS, salt), salt)
    assert status is Status.GREEN, reason


# one_max overflows exp (Inf or NaN); drop_last is wrong, or (where the kept weights are denormal
# and their sum's inverse overflows float32, which the kernel's flush-to-zero exp2 avoids) Inf
@pytest.mark.parametrize(("fault", "reasons"), [("one_max", ("in output",)), ("drop_last", ("max|err|", "in output"))])
@pytest.mark.parametrize("salt", range(5))
def test_the_decode_draws_catch_a_broken_combine(fault: str, reasons: tuple[str, ...], salt: int) -> None:
    cases = [c for c in drawn_cases(DRAWS, KEYS, salt) if c.inputs == "spikes"]
    assert len(cases) == 2                                     # one per dtype
    for case in cases:                                         # each check alone catches it
        status, why = _green(split_kv(fault), [case], salt)
        assert status is Status.RED and any(r in why for r in reasons), why


def _many(settings: DrawSettings, seeds: int = 200) -> list[GreenCase]:
    return [c for seed in range(seeds) for c in drawn_cases(settings, KEYS, seed)]


def test_decode_draws_span_query_rows_groups_and_cache_lengths() -> None:
    settings = DrawSettings(kinds=("decode",))
    cases = _many(settings)
    assert {c.shape.L for c in cases} == set(range(1, 17))
    assert {c.shape.H // c.shape.Hkv for c in cases} == set(DECODE_GROUPS)
    lengths = [c.shape.Lk for c in cases]
    assert min(lengths) <= 4 and max(lengths) >= 16384
    assert all(c.shape.B * c.shape.H * c.shape.L * c.shape.Lk <= DECODE_SCORES for c in cases)
    assert all(c.shape.align == "bottom_right" for c in cases if c.shape.causal and c.shape.Lk != c.shape.L)


def test_masked_draws_put_a_short_query_chunk_at_the_top_left_of_a_long_cache() -> None:
    cases = _many(DrawSettings(kinds=("decode_masked",)), 50)
    assert all(c.shape.causal and c.shape.align == "top_left" and 2 <= c.shape.L <= 16 for c in cases)
    assert all(c.shape.Lk >= 32768 // 8 for c in cases)        # every split past the first holds masked keys only


def test_every_flash_decode_config_splits_the_spiked_draws() -> None:
    """The combine faults show only where the keys are split: on an A100's 108 SMs and an H100's 132,
    every valid configuration splits every decode_spikes draw of acceptance/green.toml's range."""
    cases = _many(DrawSettings(kinds=("decode_spikes",)), 50)
    assert all(c.shape.B == 1 and SPIKES_ROWS[0] <= c.shape.H // c.shape.Hkv * c.shape.L <= SPIKES_ROWS[1]
               for c in cases)
    for cand in all_candidates(FAMILY):
        launch = launch_config(FAMILY, cand, 128)
        assert launch.split is not None
        for sms in (108, 132):
            for c in cases:
                s = c.shape
                plan = split_plan(launch.split, launch.rows_per_cta, s.B, s.H, s.Hkv, s.L, s.Lk, sms)
                assert plan.splits >= 2, (cand.label(), s)


def test_spikes_inputs_put_the_larger_spike_among_the_last_keys() -> None:
    shape = Shape("X", 2, 4, 3, 16, False, "fp16", 2, 1000)
    _, k, _ = make_inputs(shape, 0, 0, "cpu", std=1.0, spike=40.0, inputs="spikes")
    norms = k.float().norm(dim=-1)                             # (B, Hkv, Lk)
    top2 = norms.topk(2, dim=-1).indices
    assert bool((top2[..., 0] >= 1000 - SPIKES_TAIL).all())    # the larger: the last split
    assert bool((top2[..., 1] < 1000 // 8).all())              # the other: far before it
    values = norms.topk(3, dim=-1).values
    assert bool((values[..., 2] * 5 < values[..., 1]).all())   # and no third
