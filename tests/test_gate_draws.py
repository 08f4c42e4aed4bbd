"""GREEN's draws on CPU: kernels that pass the fixed core are red once the draws run, for the
reason their bug predicts; honest ones stay green; the check of timed outputs.

The "kernels" are torch stand-ins for the planted CUDA controls of tests/templates/faulty
(run on a GPU by tests/test_gate_gpu.py), on small shapes so the reference is cheap here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from evo.gpu.draws import drawn_cases
from evo.gpu.gate import (POISON, GuardedOutput, check_case, check_outputs, label, make_inputs, run_green,
                      verdict)
from evo.results import CheckResult, Shape, Status
from evo.gpu.suites import DrawSettings, GreenCase, GreenSettings

TILE = 8
DRAWS = DrawSettings(tile=TILE, long=(100, 140), max_heads=4, decode_keys=(1, 1024))
SETTINGS = GreenSettings(seeds=(0,), multiplier=2.0, floors={"fp16": 5e-4, "bf16": 4e-3},
                         guard_elements=64, draws=DRAWS)
CORE_LENGTHS = (40, 27)
CORE = [GreenCase(Shape(f"G{i}", b, h, n, 16, c, dt))
        for dt in ("fp16", "bf16") for i, (b, h, n) in enumerate([(1, 2, 40), (2, 1, 27)]) for c in (False, True)]
KEYS = [(16, dt, c) for dt in ("fp16", "bf16") for c in (False, True)]
Tensor = torch.Tensor


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def on_query_heads(t: Tensor, Hq: int, heads: Callable[[int, int], Tensor] | None = None) -> Tensor:
    """k or v (B, Hkv, Lk, D) in float32, one head per query head (``heads(Hq, Hkv)``: the K/V head
    index of each query head; default: the ABI's h // (Hq / Hkv))."""
    Hkv = t.shape[1]
    return t.float()[:, heads(Hq, Hkv) if heads else torch.arange(Hq) // (Hq // Hkv)]


def scores(q: Tensor, k: Tensor, scale: float, heads: Callable[[int, int], Tensor] | None = None) -> Tensor:
    """Scaled q k^T with each query head on its key/value head (:func:`on_query_heads`)."""
    return (q.float() @ on_query_heads(k, q.shape[1], heads).transpose(-1, -2)) * scale


def causal_fill(s: Tensor, causal: bool, shift: int = 0, value: float = -math.inf) -> Tensor:
    """``s`` (.., Lq, Lk) with the keys a causal row does not see (j > i + shift) set to ``value``."""
    Lq, Lk = s.shape[-2:]
    hidden = torch.arange(Lk).unsqueeze(0) > torch.arange(Lq).unsqueeze(1) + shift
    return s.masked_fill(hidden, value) if causal else s


def softmax_v(s: Tensor, v: Tensor, heads: Callable[[int, int], Tensor] | None = None) -> Tensor:
    """softmax(s) V on each query head's key/value head; rows that see no key are zeros."""
    return torch.softmax(s, -1).nan_to_num(0.0) @ on_query_heads(v, s.shape[1], heads)


def attend(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, shift: int,
           heads: Callable[[int, int], Tensor] | None = None) -> Tensor:
    return softmax_v(causal_fill(scores(q, k, scale, heads), causal, shift), v, heads)


def correct(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(attend(q, k, v, causal, scale, shift))


def ignore_scale(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    correct(q, k, v, o, causal, q.shape[-1] ** -0.5, shift)


def no_max_sub(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    p = torch.exp(causal_fill(scores(q, k, scale), causal, shift))     # overflows once a score passes 88
    o.copy_((p @ on_query_heads(v, q.shape[1])) / p.sum(-1, keepdim=True))


def small_tail(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """When Lk is below one tile, the tile's padding keys count with score 0 (and v = 0)."""
    Lk = k.shape[-2]
    if Lk >= TILE:
        return correct(q, k, v, o, causal, scale, shift)
    s = causal_fill(scores(q, k, scale), causal, shift)
    pad = torch.zeros(*s.shape[:-1], TILE - Lk)
    p = torch.softmax(torch.cat([s, pad], -1), -1)[..., :Lk]
    o.copy_(p @ on_query_heads(v, q.shape[1]))


def shape_keyed(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """Right on the core's lengths; elsewhere half the keys."""
    Lk = k.shape[-2]
    if q.shape[-2] in CORE_LENGTHS:
        return correct(q, k, v, o, causal, scale, shift)
    s = scores(q, k, scale)
    s[..., (Lk + 1) // 2:] = -math.inf
    o.copy_(softmax_v(causal_fill(s, causal, shift), v))


def wrong_kv_head(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """Query head h on K/V head h % Hkv (the faulty family's wrong_kv_head): right for multi-head."""
    o.copy_(attend(q, k, v, causal, scale, shift, heads=lambda hq, hkv: torch.arange(hq) % hkv))


def causal_off_by_one(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """Under a shifted causal mask a row sees one key past its last (an inclusive/exclusive slip
    in the shifted branch): right for self-attention and top-left masks."""
    o.copy_(attend(q, k, v, causal, scale, shift + 1 if shift else 0))


def ignore_lk(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """No more keys than queries (the faulty family's ignore_lk): right unless Lk > Lq."""
    Lq = q.shape[-2]
    o.copy_(attend(q, k[:, :, :Lq], v[:, :, :Lq], causal, scale, shift))


def top_left_only(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """The causal mask always at the top left: right for self-attention and top-left masks."""
    correct(q, k, v, o, causal, scale, 0)


def _green(launch: Callable[..., None], cases: list[GreenCase], salt: int) -> tuple[Status, str]:
    return verdict(run_green(launch, cases, SETTINGS, salt, device="cpu"))


def _drawn(salt: int) -> list[GreenCase]:
    return drawn_cases(DRAWS, KEYS, salt)


CONTROLS = [(ignore_scale, "max|err|"), (no_max_sub, "in output"), (small_tail, "max|err|"),
            (shape_keyed, "max|err|"), (wrong_kv_head, "max|err|"), (causal_off_by_one, "max|err|"),
            (ignore_lk, "max|err|"), (top_left_only, "max|err|")]


@pytest.mark.parametrize("salt", range(5))
def test_an_honest_kernel_passes_core_and_draws(salt: int) -> None:
    status, reason = _green(correct, CORE + _drawn(salt), salt)
    assert status is Status.GREEN, reason


@pytest.mark.parametrize(("launch", "reason"), CONTROLS, ids=lambda x: getattr(x, "__name__", None))
def test_the_fixed_core_alone_lets_them_through(launch: Callable[..., None], reason: str) -> None:
    assert _green(launch, CORE, 0)[0] is Status.GREEN


@pytest.mark.parametrize(("launch", "reason"), CONTROLS, ids=lambda x: getattr(x, "__name__", None))
@pytest.mark.parametrize("salt", range(5))
def test_the_draws_make_them_red(launch: Callable[..., None], reason: str, salt: int) -> None:
    status, why = _green(launch, CORE + _drawn(salt), salt)
    assert status is Status.RED and reason in why
    assert why.startswith("R")                                # a drawn case names it


def test_a_spike_overflows_exp_without_max_subtraction() -> None:
    case = GreenCase(Shape("R00 sd=1.0 spike", 1, 2, 20, 16, False), std=1.0, spike=200.0, seeds=(0,))
    r = check_case(no_max_sub, case, 0, SETTINGS, device="cpu")
    assert not r.passed and ("NaN in output" in r.reason or "Inf in output" in r.reason)
    assert check_case(correct, case, 0, SETTINGS, device="cpu").passed


def test_inputs_have_the_cases_spread_and_a_spiked_key() -> None:
    shape = Shape("X", 2, 3, 40, 16, False)
    q, k, v = make_inputs(shape, 0, 0, "cpu", std=3.0)
    assert 2.5 < float(q.float().std()) < 3.5
    q1, k1, _ = make_inputs(shape, 0, 0, "cpu", std=1.0, spike=50.0)
    row_norms = k1.float().norm(dim=-1)                       # (B, H, L)
    top = row_norms.argmax(-1)
    assert bool((row_norms.amax(-1) > 20 * row_norms.median(-1).values).all())
    assert bool((top < 20).all())                             # in the first half: causal rows see it
    assert torch.equal(q1, make_inputs(shape, 0, 0, "cpu")[0])


def test_a_non_default_scale_is_what_the_reference_uses() -> None:
    case = GreenCase(Shape("R01 sc=0.5 sd=1.0", 1, 2, 24, 16, True), scale=0.5, seeds=(0,))
    assert check_case(correct, case, 0, SETTINGS, device="cpu").passed
    assert not check_case(ignore_scale, case, 0, SETTINGS, device="cpu").passed


def test_label_of_a_drawn_check_spells_shape_and_inputs() -> None:
    r = CheckResult(Shape("R07 sc=0.0389 sd=2.6 spike", 1, 2, 37, 64, True), 0, False, 1.0, 1e-3, 3e-3)
    assert label(r) == "R07c fp16 seed 0 B,H,L,D=1,2,37,64 (sc=0.0389 sd=2.6 spike)"


# ----------------------------------------------------------------------------- timed outputs

SHAPE = Shape("F9", 1, 2, 24, 16, False)


def _sets(n: int, seed: int = 5) -> list[tuple[Tensor, Tensor, Tensor]]:
    return [make_inputs(SHAPE, i, seed, "cpu") for i in range(n)]


def _outputs(sets: list[tuple[Tensor, Tensor, Tensor]]) -> list[GuardedOutput]:
    outs = []
    for q, k, v in sets:
        g = GuardedOutput(SHAPE, 64, "cpu")
        g.poison()
        correct(q, k, v, g.out, False, 0.25)
        outs.append(g)
    return outs


def _check(outs: list[GuardedOutput], live: list, fresh: list) -> str:
    views = [g.out for g in outs]
    return check_outputs([("after the timed replays", views)], fresh, live, SHAPE, 0.25, SETTINGS, outs)


def test_right_timed_outputs_pass() -> None:
    sets = _sets(3)
    assert _check(_outputs(sets), sets, _sets(3)) == ""


def test_a_wrong_timed_output_names_its_set() -> None:
    sets = _sets(3)
    outs = _outputs(sets)
    outs[2].out[0, 1, 5, 3] += 0.5
    assert _check(outs, sets, _sets(3)).startswith("after the timed replays, set 2 of 3: max|err| 5.0e-01 > tol")


def test_an_unwritten_or_nan_timed_output_fails() -> None:
    sets = _sets(2)
    outs = _outputs(sets)
    outs[1].out.view(torch.int16)[0, 0, 0, :4] = POISON["fp16"]
    assert _check(outs, sets, _sets(2)) == "after the timed replays, set 1 of 2: unwritten: 4 of 768 output elements"
    outs = _outputs(sets)
    outs[0].out[0, 0, 0, 0] = math.inf
    assert _check(outs, sets, _sets(2)) == "after the timed replays, set 0 of 2: NaN or Inf in output"


def test_timed_inputs_must_be_unchanged_and_guards_untouched() -> None:
    sets = _sets(2)
    outs = _outputs(sets)
    sets[1][2][0, 0, 0, 0] += 1
    assert _check(outs, sets, _sets(2)) == "set 1 of 2: modified its inputs while timed: v"
    sets = _sets(2)
    outs = _outputs(sets)
    outs[0].buf[-1] = 0.0
    assert _check(outs, sets, _sets(2)) == "set 0 of 2: wrote out of bounds while timed: 1 guard elements changed"


def test_each_set_has_its_own_tolerance() -> None:
    """The tolerance of a set is PyTorch's error on that set, not the worst over all sets."""
    sets = _sets(2)
    outs = _outputs(sets)
    passes = [("p", [g.out for g in outs])]
    assert check_outputs(passes, _sets(2), sets, SHAPE, 0.25, SETTINGS) == ""
    tight = GreenSettings(seeds=(0,), multiplier=0.0, floors={"fp16": 1e-9, "bf16": 1e-9})
    assert check_outputs(passes, _sets(2), sets, SHAPE, 0.25, tight).startswith("p, set 0 of 2: max|err|")
