"""GREEN on the GPU: the families' defaults pass the full suite (the fixed core and this run's
draws), and so do flash_wgmma's feature genes (turn-taking of three consumers, the two-row
softmax, lazy rescaling, per-warpgroup causal trimming, Q in registers) switched on; every
planted control of tests/templates/faulty is caught, for its own reason.

- Bugs the fixed core always caught: no_write, zeros, skip_tail, no_scale, no_causal, oob_write.
- Bugs and cheats only the draws catch (issue 11): ignore_scale, no_max_sub, small_tail,
  shape_keyed pass the fixed core alone and are red on the draws; so are the bugs of grouped
  heads and unequal lengths (issue 33): wrong_kv_head, causal_off_by_one (under a shifted mask),
  ignore_lk (keys past Lq never seen) and top_left_only, which the core's multi-head self-attention cannot see; half_acc is red (its error
  is at the edge of the tolerance on the core's longest cases, and far beyond it on the long
  draws of std 2-3).
- first_n passes GREEN (it is right for its first 256 launches) and is red by the check of
  its timed outputs; jitter is correct but its timing spread stays wide, so it is measured
  again and flagged, not recorded as it stands.

Faults that hang or crash belong to the worker's tests (they need a process to kill).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from evo.toolchain.build import build_batch, default_arch
from evo.gpu.draws import drawn_cases
from evo.gpu.gate import run_green, verdict
from evo.family.render import Entry, render
from evo.results import Shape, Status
from evo.gpu.runtime import CandidateKernels
from evo.family.space import make_candidate
from evo.gpu.suites import GreenCase, green_cases, green_settings

pytestmark = pytest.mark.gpu

FAULTS = {"no_write": "unwritten", "zeros": "max|err|", "skip_tail": "max|err|",
          "no_scale": "max|err|", "no_causal": "max|err|", "oob_write": "wrote out of bounds",
          "ignore_scale": "max|err|", "no_max_sub": "in output", "small_tail": "max|err|",
          "shape_keyed": "max|err|", "half_acc": "max|err|", "many_heads": "max|err|", "flat": "max|err|",
          "wrong_kv_head": "max|err|", "causal_off_by_one": "max|err|", "ignore_lk": "max|err|",
          "top_left_only": "max|err|"}
DRAW_KEYED = ("ignore_scale", "no_max_sub", "small_tail", "shape_keyed", "many_heads", "flat",
              "wrong_kv_head", "causal_off_by_one", "ignore_lk", "top_left_only")
PROMOTE_KEYED = ("long_only",)   # wrong only past every length GREEN draws: promote's bucket checks refuse it
TIMED = ("first_n", "jitter")
HOPPER = default_arch() == "sm_90a"
FAMILIES = ["flash_scalar", "flash_mma", *(["flash_wgmma"] if HOPPER else []), "faulty"]
# flash_wgmma's mechanisms that change the main loop's synchronisation or the softmax, on (with
# the warpgroups they need) where the default leaves them off: each is a different kernel.
WGMMA_FEATURES: dict[str, dict[str, int | bool]] = {
    "pingpong3": {"WGS_D64": 3, "WGS_D128": 3, "BLOCK_N_D128": 64, "PINGPONG": False, "PINGPONG3": True},
    "softmax_ilp_lazy": {"SOFTMAX_ILP": True, "LAZY_D64": True, "LAZY_D128": True},
    "pingpong3_ilp_trim_qregs": {"WGS_D64": 3, "BLOCK_N_D64": 96, "PINGPONG3": True, "SOFTMAX_ILP": True,
                                 "CAUSAL_TRIM": True, "Q_IN_REGS": True},
    "rescale_early": {"RESCALE_EARLY": True, "SOFTMAX_ILP": True, "Q_IN_REGS": True},
    "rescale_early_lazy_rowsum_pack": {"RESCALE_EARLY": True, "SOFTMAX_ILP": True, "LAZY_D128": True, "ROWSUM_MMA": True,
                                       "PACK_GQA": True, "PRODUCER_REGS": 32},
    "rescale_early_q_smem_wg3": {"RESCALE_EARLY": True, "SOFTMAX_ILP": True, "Q_IN_REGS": True, "Q_SMEM_WG3": True,
                                 "WGS_D64": 3, "WGS_D96": 3, "BLOCK_N_D96": 112, "PINGPONG3": True},
    "split_mask_early_q_smem_wg3": {"SPLIT_MASK": True, "RESCALE_EARLY": True, "SOFTMAX_ILP": True, "Q_IN_REGS": True,
                                    "Q_SMEM_WG3": True, "WGS_D64": 3, "WGS_D96": 3, "BLOCK_N_D96": 112,
                                    "PINGPONG3": True},
    "split_mask_pack_trim_lazy": {"SPLIT_MASK": True, "PACK_GQA": True, "PRODUCER_REGS": 32, "CAUSAL_TRIM": True,
                                  "LAZY_D128": True},
    # 8 MB sections: GREEN's many-head draws span several sections, each dealt by its own snake
    "l2_section_8": {"L2_SECTION_MB": 8, "CAUSAL_ORDER": "sections", "SOFTMAX_ILP": True, "RESCALE_EARLY": True,
                     "Q_IN_REGS": True},
    # the same over equal sections, each section's snake started where the last one's partial round ended
    # (SECTION_DEAL even): a tile dealt twice or never is a wrong or unwritten output in the many-head draws
    "l2_section_8_even": {"L2_SECTION_MB": 8, "CAUSAL_ORDER": "sections", "SECTION_DEAL": "even",
                          "SOFTMAX_ILP": True, "RESCALE_EARLY": True, "Q_IN_REGS": True},
    # tiles from the launch's ticket counter (TILE_SCHED dynamic): a tile taken twice or never is a wrong or
    # unwritten output, and a counter not set back to zero by a launch skips the next launch's first tiles;
    # over 8 MB sections (several in the many-head draws) and with three consumers at D=64 and D=96
    "tile_sched_dynamic": {"TILE_SCHED": "dynamic", "PRODUCER_REGS": 32, "L2_SECTION_MB": 8,
                           "CAUSAL_ORDER": "sections", "SOFTMAX_ILP": True, "RESCALE_EARLY": True, "Q_IN_REGS": True},
    "tile_sched_dynamic_wg3": {"TILE_SCHED": "dynamic", "PRODUCER_REGS": 32, "WGS_D64": 3, "WGS_D96": 3,
                               "BLOCK_N_D96": 112, "PINGPONG3": True, "Q_IN_REGS": True, "Q_SMEM_WG3": True},
}
# flash_mma with Q read from shared memory and the causal loop cut at the diagonal: a CTA whose rows
# all see no key (causal at the bottom right, Lq > Lk) runs no K/V tile, and before 2026-11-28 wrote
# its O over Q's rows while Q's copies could still land (red as non-deterministic in a search, H100).
NO_KEY_CTAS = {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 4, "STAGES": 2, "Q_IN_REGS": False, "CAUSAL_SKIP": True}
CANDIDATES = [*((f, "none") for f in FAMILIES), *(("faulty", f) for f in (*FAULTS, *TIMED, *PROMOTE_KEYED)),
              *((("flash_wgmma", f) for f in WGMMA_FEATURES) if HOPPER else ()), ("flash_mma", "no_key_ctas")]
F1 = Shape("F1", 1, 8, 512, 64, False)
Built = dict[tuple[str, str], tuple[CandidateKernels, tuple[Entry, ...], str]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Every candidate above, compiled in one batch into a private cache and loaded."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVO_CANDIDATES", str(tmp_path_factory.mktemp("candidates")))
        mp.setenv("EVO_TEMPLATE_PATH", str(Path(__file__).parent / "templates"))
        rendered = [render(make_candidate(f, {"FAULT": v} if f == "faulty" else NO_KEY_CTAS if v == "no_key_ctas"
                                          else WGMMA_FEATURES.get(v, {})))
                    for f, v in CANDIDATES]
        results = build_batch(rendered, default_arch())
    device = torch.cuda.current_device()
    loaded = {}
    for key, r, x in zip(CANDIDATES, results, rendered, strict=True):
        assert r.status is Status.BUILT and r.cubin_path, f"{key}: {r.reason}\n{r.log[-3000:]}"
        loaded[key] = (CandidateKernels(r.cubin_path, x.entries, device), x.entries, r.cubin_path)
    yield loaded


def _cases(entries: tuple[Entry, ...], salt: int, core_only: bool = False) -> list[GreenCase]:
    """The core (for the kernel's keys) plus, unless ``core_only``, what is drawn for ``salt``."""
    keys = {(e.head_dim, e.dtype, e.causal) for e in entries}
    core = [GreenCase(s) for s in green_cases() if (s.D, s.dtype, s.causal) in keys]
    draws = green_settings().draws
    return core if core_only or draws is None else core + drawn_cases(draws, keys, salt)


def _checks(item: tuple[CandidateKernels, tuple[Entry, ...], str],
            core_only: bool = False) -> tuple[Status, str, list[str]]:
    """GREEN's verdict on ``item`` (its reason names the salt) and the reason of every failing check."""
    kernels, entries, _ = item
    settings = green_settings()
    salt = random.getrandbits(31)
    checks = run_green(kernels, _cases(entries, salt, core_only), settings, salt)
    status, reason = verdict(checks, settings.gate_dtypes)
    return status, f"{reason} (salt {salt})", [c.reason for c in checks if not c.passed]


def _green(item: tuple[CandidateKernels, tuple[Entry, ...], str], core_only: bool = False) -> tuple[Status, str]:
    status, reason, _ = _checks(item, core_only)
    return status, reason


@pytest.mark.parametrize("family", FAMILIES)
def test_default_candidate_is_green(built: Built, family: str) -> None:
    status, reason = _green(built[(family, "none")])
    assert status is Status.GREEN, reason


@pytest.mark.parametrize("feature", list(WGMMA_FEATURES) if HOPPER else [])
def test_wgmma_feature_is_green(built: Built, feature: str) -> None:
    status, reason = _green(built[("flash_wgmma", feature)])
    assert status is Status.GREEN, f"{feature}: {reason}"


def test_ctas_whose_rows_see_no_key_write_zeros_every_time(built: Built) -> None:
    """The case that caught the race (R35c bf16 of a search: 3 x 2 heads, 551 queries on 248 keys,
    causal at the bottom right, so the first 303 rows see no key), twelve times over: each check
    runs the kernel twice on the same inputs and compares, besides the reference."""
    kernels, _, _ = built[("flash_mma", "no_key_ctas")]
    shape = Shape("no-key", 3, 2, 551, 128, True, "bf16", Lk=248, align="bottom_right")
    cases = [GreenCase(shape, std=3.1, seeds=(seed,)) for seed in range(12)]
    checks = run_green(kernels, cases, green_settings(), random.getrandbits(31))
    assert [c.reason for c in checks if not c.passed] == [] and len(checks) == 12


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faulty_kernel_is_red_for_its_reason(built: Built, fault: str) -> None:
    # GREEN runs its cheapest checks first, so the verdict names whichever fails first (a planted
    # fault may also give NaN on a draw whose rows see no key): its own reason must be among them
    status, reason, failing = _checks(built[("faulty", fault)])
    print(f"{fault}: {status.value}: {reason}")
    assert status is Status.RED
    assert any(FAULTS[fault] in r for r in failing), (reason, failing)


@pytest.mark.parametrize("fault", PROMOTE_KEYED)
def test_green_lets_a_kernel_wrong_only_past_its_lengths_through(built: Built, fault: str) -> None:
    """GREEN cannot see past the lengths it draws; promote's checks up to each route's top do
    (tests/test_promote_gpu.py), and the package serves no length above that top."""
    status, reason = _green(built[("faulty", fault)])
    assert status is Status.GREEN, reason


@pytest.mark.parametrize("fault", DRAW_KEYED)
def test_the_fixed_core_alone_lets_it_through(built: Built, fault: str) -> None:
    """What the draws add: without them these would have been timed and recorded."""
    status, reason = _green(built[("faulty", fault)], core_only=True)
    assert status is Status.GREEN, reason


def _evaluate(item: tuple[CandidateKernels, tuple[Entry, ...], str], session: object):  # type: ignore[no-untyped-def]
    from evo.gpu.evaluate import evaluate
    from evo.gpu.worker import EvalRequest

    _, entries, cubin = item
    request = EvalRequest("b" * 64, cubin, entries, green=True, fast_cases=(F1,),
                          options={"quick": True, "backends": ["sdpa_default"],
                                   "salt": random.getrandbits(31)})
    return evaluate(request, session)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def session() -> object:
    from evo.gpu.evaluate import Session

    return Session()


def test_a_kernel_right_only_for_its_first_launches_is_red_by_its_timed_outputs(built: Built,
                                                                                session: object) -> None:
    ev = _evaluate(built[("faulty", "first_n")], session)
    print(f"first_n: {ev.status.value}: {ev.reason}")
    assert ev.checks and all(c.passed for c in ev.checks)                 # GREEN let it through
    assert ev.status is Status.RED and ev.reason.startswith("F1-fp16: timed output wrong: "), ev.reason
    assert int(ev.device["fast_outputs_checked"]) >= 1


def test_an_honest_kernel_is_fast_with_its_timed_outputs_checked(built: Built, session: object) -> None:
    from evo.gpu.evaluate import cubin_sha256

    item = built[("faulty", "none")]
    ev = _evaluate(item, session)
    assert ev.status is Status.FAST, ev.reason
    assert int(ev.device["fast_outputs_checked"]) >= 1 and int(ev.device["green_drawn"]) >= 6
    assert ev.device["cubin_sha256"] == cubin_sha256(item[2])


def test_a_kernel_whose_time_jumps_is_measured_again_and_flagged(built: Built) -> None:
    from evo.gpu.timing import EVO, time_case

    kernels = built[("faulty", "jitter")][0]

    def op(q, k, v, o):  # type: ignore[no-untyped-def]
        kernels.launch(q, k, v, o, causal=False)

    got = time_case(op, F1, (), rounds=2, reps=10, check=green_settings(), remeasure=1)
    (t,) = [t for t in got.timings if t.backend == EVO]
    print(f"jitter: {t.flagged}; samples {[round(x, 1) for x in t.samples_us]}")
    assert got.output_failure == ""                                       # right, only slow at times
    assert t.flagged.startswith("spread ") and "after 2 measurements" in t.flagged
