"""flash_wgmma's Q_IN_REGS (with Q_SMEM_WG3), LAZY_D64 / LAZY_D128 and RESCALE_EARLY genes: what the manifest admits and
what the compiled kernels contain.

Q_IN_REGS holds Q as wgmma A-operand registers (ldmatrix once per tile), so S = Q K^T reads only K
from shared memory; at D=128 with BLOCK_N 128 it does not fit the consumers' registers (ptxas
spilled 104 bytes), and the manifest must say so before a build is spent; and its registers must
stay Q's for the whole tile (ptxas 13.0 handed them to P without the overlap: the SASS is scanned
for it). LAZY_* skip O *= alpha
with a warp vote, and their row sums add P as rounded for P V. ROWSUM_MMA sums P on the tensor cores (P against a column of ones) instead of
the softmax's add chain. RESCALE_EARLY waits for the previous P V and rescales O between the row maxima
and the exponentials (FlashAttention-4's order). Q_SMEM_WG3 keeps Q in shared memory for three-consumer kernels
only, so they can sit beside two-consumer kernels with Q in registers. Build tests need nvcc (and cuobjdump for the SASS) and skip without them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from evo.toolchain.build import build_batch
from evo.toolchain.sass import cuobjdump, dump_sass
from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.toolchain.ptxas import parse_ptxas
from evo.family.render import render
from evo.results import Status
from evo.family.space import is_valid, make_candidate

FAMILY = load_family("flash_wgmma")


def point(**genes: object) -> dict[str, object]:
    return FAMILY.defaults() | genes


def test_q_in_registers_is_refused_where_the_count_says_it_spills() -> None:
    assert not is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=176))
    # spilled until version 6 kept the epilogue's addresses out of the loop (test_wgmma_registers builds it)
    assert is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=128))
    assert is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=96))
    assert is_valid(FAMILY, point(Q_IN_REGS=False, BLOCK_N_D128=128))


def test_conditional_rescaling_is_off_by_default_at_both_head_dims() -> None:
    # it costs accuracy (the manifest's comment says how much): the search may turn it on
    assert FAMILY.defaults()["LAZY_D64"] is False and FAMILY.defaults()["LAZY_D128"] is False


def test_q_in_registers_needs_the_overlap() -> None:
    assert not is_valid(FAMILY, point(Q_IN_REGS=True, BLOCK_N_D128=96, INTRA_WG_OVERLAP=False))
    assert is_valid(FAMILY, point(Q_IN_REGS=False, INTRA_WG_OVERLAP=False))


def sass_by_function(genes: dict[str, object], cache: Path, monkeypatch: pytest.MonkeyPatch,
                     validate: bool = True, head_dims: tuple[int, ...] = (64, 128)) -> dict[str, str]:
    """Build the D=64 and D=128 kernels of one candidate (``head_dims``: a test that reads only
    one of them builds only it; ``validate=False``: under the manifest less its Q_IN_REGS / overlap
    constraint) into ``cache``; its SASS per kernel function (ptxas checked)."""
    if shutil.which("nvcc") is None or cuobjdump() is None:
        pytest.skip("nvcc or cuobjdump not available")
    monkeypatch.setenv("EVO_CANDIDATES", str(cache))
    family = dataclasses.replace(FAMILY, head_dims=head_dims)   # the genes tested here are theirs (96, 256: test_wgmma_head_dims)
    if not validate:
        family = dataclasses.replace(
            family, constraints=tuple(c for c in FAMILY.constraints if "Q_IN_REGS or INTRA_WG_OVERLAP" not in c.expr))
    try:
        (result,) = build_batch([render(make_candidate(family, point(**genes)), family)], arch="sm_90a")
    except EvoError as err:
        pytest.skip(str(err))
    assert result.status is Status.BUILT, result.reason
    cubin = Path(result.cubin_path)
    for name, res in parse_ptxas((cubin.parent / "ptxas.log").read_text()).items():
        assert res.spill_stores == 0 and res.spill_loads == 0, name
    sass = dump_sass(cubin)
    return {body.split()[0]: body for body in re.split(r"\n\s*Function : ", sass)[1:]}


def test_q_in_registers_feeds_s_from_registers(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    genes = {"Q_IN_REGS": True, "BLOCK_N_D128": 96}
    functions = sass_by_function(genes, build_cache, monkeypatch)
    assert len(functions) == 8
    for name, body in functions.items():
        n = 96 if "_d128_" in name else 128
        assert "LDSM" in body, name                                  # Q by ldmatrix
        # S = Q K^T: A from registers (R..), B from a descriptor; no HGMMA of that N reads A from shared memory
        assert re.search(rf"HGMMA\.64x{n}x16\.F32\S* R\d+, R\d+, gdesc", body), name
        assert not re.search(rf"HGMMA\.64x{n}x16\.F32\S* R\d+, gdesc", body), name
        assert "HMMA" not in body.replace("HGMMA", ""), name


def test_conditional_rescaling_votes_only_where_it_is_on(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    functions = sass_by_function({"LAZY_D128": True}, build_cache, monkeypatch)
    assert len(functions) == 8
    for name, body in functions.items():
        assert ("VOTE.ANY" in body) == ("_d128_" in name), name
        # the row sum adds P as rounded for P V: fp16 P goes back to fp32 (HADD2.F32) only there
        if "_fp16_" in name:
            assert ("HADD2.F32" in body) == ("_d128_" in name), name


@pytest.mark.parametrize("genes", [{}, {"Q_IN_REGS": True}, {"ROWSUM_MMA": True, "WGS_D64": 3}])
def test_the_rounded_row_sum_is_rendered_only_for_conditional_rescaling(genes: dict[str, object]) -> None:
    # candidates without LAZY render the text of family version 7 (their stored builds stay valid)
    assert "round_pair" not in render(make_candidate(FAMILY, point(**genes))).source
    for lazy in ("LAZY_D64", "LAZY_D128"):
        assert "round_pair<T>(s[" in render(make_candidate(FAMILY, point(**genes, **{lazy: True}))).source


def test_row_sums_run_on_the_tensor_cores_instead_of_an_add_chain(build_cache: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    plain = sass_by_function({}, build_cache, monkeypatch)
    summed = sass_by_function({"ROWSUM_MMA": True}, build_cache, monkeypatch)
    assert plain.keys() == summed.keys() and len(summed) == 8
    for name, body in summed.items():
        # P (A from registers) against the ones (B from a descriptor), beside every P V step
        steps = len(re.findall(r"HGMMA\.64x8x16\.F32\S* R\d+, R\d+, gdesc", body))
        pv = len(re.findall(r"HGMMA\.64x(?:64|128)x16\.F32\S* R\d+, R\d+, gdesc\[\w+\]\.tnspB", body))
        assert steps == pv > 0, name
        assert "HGMMA.64x8x16" not in plain[name], name
        # the row sum's FADD chain (BLOCK_N / 2 adds per row pair and tile, in each unrolled body) is gone
        assert body.count(" FADD") * 10 < plain[name].count(" FADD"), name


def _code(body: str) -> list[str]:
    """A function's SASS instructions without their addresses and encodings."""
    return [ln.split("*/", 1)[1].split(";")[0].strip() for ln in body.splitlines()
            if re.match(r"\s+/\*[0-9a-f]{4}\*/", ln)]


def _unpredicated(ins: str) -> str:
    """One instruction of :func:`_code` without its guard predicate (``@P0``, ``@!UP1``)."""
    return ins.split(None, 1)[1] if ins.startswith("@") else ins


@pytest.mark.parametrize("genes", [{"WGS_D64": 3, "BLOCK_N_D64": 96}, {"BLOCK_N_D64": 64, "INTRA_WG_OVERLAP": False}])
def test_causal_trim_changes_only_the_causal_kernels(genes: dict[str, object], build_cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With three consumers, or ping-pong without the overlap and BLOCK_N 64, warpgroups stop
    before the CTA's last KV tiles: the causal kernels change (no spill, sass_by_function checks)
    and the full ones compile to the same machine code, as without the gene."""
    plain = sass_by_function(genes, build_cache, monkeypatch)
    trimmed = sass_by_function(genes | {"CAUSAL_TRIM": True}, build_cache, monkeypatch)
    assert plain.keys() == trimmed.keys() and len(trimmed) == 8
    for name, body in trimmed.items():
        assert (_code(body) == _code(plain[name])) == ("_full" in name), name


def test_the_section_order_changes_only_the_causal_kernels(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CAUSAL_ORDER = "sections" deals each L2 section's tiles by a snake of its own; the order of a
    non-causal launch is unchanged, so those kernels compile to the default's machine code."""
    plain = sass_by_function({}, build_cache, monkeypatch)
    dealt = sass_by_function({"CAUSAL_ORDER": "sections"}, build_cache, monkeypatch)
    assert plain.keys() == dealt.keys() and len(dealt) == 8
    for name, body in dealt.items():
        assert (_code(body) == _code(plain[name])) == ("_full" in name), name


@pytest.mark.parametrize("order", ["natural", "reverse", "global"])
def test_the_older_orders_render_the_text_they_had(order: str) -> None:
    # the Jinja guard keeps every stored candidate's source (and build id) valid
    assert "in_section" not in render(make_candidate(FAMILY, point(CAUSAL_ORDER=order))).source
    assert "in_section" in render(make_candidate(FAMILY, point(CAUSAL_ORDER="sections"))).source


def q_register_clobbers(body: str) -> list[str]:
    """Instructions other than LDSM that write a register some S = Q K^T HGMMA reads Q from (A
    from registers, B not transposed: the P V ones read P with a transposed V), unless the next
    instruction that names the register is an LDSM (a value used as an LDSM address, or dead,
    before Q is loaded into it: ptxas computes Q's own addresses in Q's registers)."""
    lines = _code(body)
    q = {int(m.group(1)) + i for ln in lines
         if (m := re.search(r"HGMMA\.\S+ R\d+, R(\d+), gdesc\[\w+\](?!\.tnspB)", ln)) for i in range(4)}
    ops = [_unpredicated(ln).split() for ln in lines]
    out = []
    for k, op in enumerate(ops):
        if len(op) < 2 or op[0].startswith(("LDSM", "HGMMA", "ST", "BAR", "WARPGROUP", "SYNCS", "BRA", "ISETP", "FSETP")):
            continue
        if not ((dest := re.match(r"R(\d+)", op[1])) and int(dest.group(1)) in q):
            continue
        reg = re.compile(rf"\bR{dest.group(1)}\b")
        after = next((o for o in ops[k + 1:] if reg.search(" ".join(o[1:]))), None)
        if after is None or not after[0].startswith("LDSM"):
            out.append(lines[k])
    return out


@pytest.mark.parametrize(("genes", "valid"), [
    ({"Q_IN_REGS": True, "BLOCK_N_D128": 96}, True),
    ({"Q_IN_REGS": True, "WGS_D128": 1, "PERSISTENT": False}, True),
    ({"Q_IN_REGS": True, "WGS_D128": 1, "PERSISTENT": False, "INTRA_WG_OVERLAP": False}, False),
])
def test_q_registers_stay_q_for_the_whole_tile(genes: dict[str, object], valid: bool, build_cache: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Admitted points keep Q's registers; the refused one (one consumer, no overlap, D=128, BLOCK_N
    128) is what ptxas 13.0 miscompiled: if it stops clobbering, the constraint can go."""
    assert is_valid(FAMILY, point(**genes)) == valid
    functions = sass_by_function(genes, build_cache, monkeypatch, validate=valid, head_dims=(128,))
    clobbered = {name: len(q_register_clobbers(body)) for name, body in functions.items()}
    assert len(clobbered) == 4
    if valid:
        assert all(n == 0 for n in clobbered.values()), clobbered
    else:
        assert all(n > 0 for n in clobbered.values()), clobbered


def softmax_exps_beside_pv(body: str) -> list[int]:
    """For each wait for S (``WARPGROUP.DEPBAR.LE gsb0, 0x1``: P V of the tile before is still in
    flight), the exponentials (MUFU.EX2) issued before the wait for that P V (``gsb0, 0x0``)."""
    ops = [op for op in map(_unpredicated, _code(body)) if op.startswith(("WARPGROUP.DEPBAR.LE gsb0", "MUFU.EX2"))]
    counts = []
    for i, op in enumerate(ops):
        if op.endswith("0x1"):
            rest = ops[i + 1:]
            end = next((k for k, o in enumerate(rest) if o.endswith("0x0")), len(rest))
            counts.append(sum(o.startswith("MUFU") for o in rest[:end]))
    return counts


@pytest.mark.parametrize("genes", [
    {},
    {"WGS_D64": 3, "BLOCK_N_D64": 96, "PINGPONG3": True, "SOFTMAX_ILP": True, "Q_IN_REGS": True},
    {"LAZY_D64": True, "ROWSUM_MMA": True, "BLOCK_N_D128": 96},
])
def test_the_softmax_runs_beside_the_previous_p_v(genes: dict[str, object], build_cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """INTRA_WG_OVERLAP's point: tile j's exponentials run while P V of tile j-1 is on the tensor
    cores. ptxas schedules a warpgroup wait at the top of its basic block, and in family version 8
    that put the wait for P V above every exponential of the two-row softmax (above one row's of
    the other): the template now ends a block (the spin on V's barrier) between them."""
    functions = sass_by_function(genes, build_cache, monkeypatch)
    assert len(functions) == 8
    for name, body in functions.items():
        block_n = int(point(**genes)["BLOCK_N_D128" if "_d128_" in name else "BLOCK_N_D64"])  # type: ignore[call-overload]
        counts = softmax_exps_beside_pv(body)
        # a thread's BLOCK_N / 2 exponentials a tile (and its rows' two rescale factors): all but
        # a few (LAZY's conditional ones) before the wait; version 8 had none or half of them
        assert counts and all(n >= 0.9 * block_n // 2 for n in counts), (name, counts)


@pytest.mark.parametrize("genes", [
    {"WGS_D64": 3, "BLOCK_N_D64": 96, "PINGPONG3": True, "SOFTMAX_ILP": True, "Q_IN_REGS": True},
    {"WGS_D64": 3, "BLOCK_N_D64": 96, "CAUSAL_TRIM": True},
])
def test_branches_on_the_consumer_index_are_warp_uniform(genes: dict[str, object], build_cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A causal tile's consumers branch on their own rows (idle past L, CAUSAL_TRIM's last tile).
    Computed from threadIdx, that branch looked divergent to ptxas, which bracketed the GEMM regions
    with reconvergence barriers: 30 BSSY per causal kernel against 10 in the full one, and every
    causal case 4-7 % slower (family version 10's first build). The consumer index is broadcast
    from lane 0 now, so a causal kernel carries no more of them than its full twin."""
    functions = sass_by_function(genes, build_cache, monkeypatch)
    bssy = {name: sum(_unpredicated(ins).split()[0] == "BSSY" for ins in _code(body)) for name, body in functions.items()}
    for name, n in bssy.items():
        if "_causal" in name:
            assert n <= bssy[name.replace("_causal", "_full")] + 1, bssy


def test_pack_gqa_needs_producer_registers_where_they_are_reallocated() -> None:
    assert not is_valid(FAMILY, point(PACK_GQA=True))                       # PRODUCER_REGS 24, two consumers
    assert is_valid(FAMILY, point(PACK_GQA=True, PRODUCER_REGS=32))
    assert is_valid(FAMILY, point(PACK_GQA=True, WGS_D64=1, WGS_D96=1, WGS_D128=1, WGS_D256=1, PINGPONG=False))
    assert FAMILY.defaults()["PACK_GQA"] is False


@pytest.mark.parametrize("genes", [{}, {"CAUSAL_TRIM": True, "Q_IN_REGS": True}])
def test_pack_gqa_is_rendered_only_where_it_is_on(genes: dict[str, object]) -> None:
    # the other candidates render the text they had before the gene (no cp.async, TMA both ways)
    plain = render(make_candidate(FAMILY, point(**genes))).source
    packed = render(make_candidate(FAMILY, point(**genes, PACK_GQA=True, PRODUCER_REGS=32))).source
    assert "cp_async_16" not in plain and "Q_LOADERS" not in plain
    assert "cp_async_16" in packed and "tma_store_3d(&tm_o" not in packed.split("flash_wgmma_cta", 1)[1]


def test_pack_gqa_loads_q_by_cp_async_and_stores_o_itself(build_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PACK_GQA: a tile's rows come from several query heads, no TMA box: Q by cp.async (LDGSTS,
    zero-filled past the rows), O by 16-byte stores (STG.E.128), K and V still by TMA; no spill
    (sass_by_function checks) and the GEMMs are those of the unpacked kernel."""
    plain = sass_by_function({"PRODUCER_REGS": 32}, build_cache, monkeypatch)
    packed = sass_by_function({"PACK_GQA": True, "PRODUCER_REGS": 32}, build_cache, monkeypatch)
    assert plain.keys() == packed.keys() and len(packed) == 8
    for name, body in packed.items():
        assert "LDGSTS" in body and "STG.E.128" in body and "UTMALDG" in body, name
        assert "UTMASTG" not in body and "UTMASTG" in plain[name] and "LDGSTS" not in plain[name], name
        assert body.count("HGMMA.") == plain[name].count("HGMMA."), name


def test_the_early_rescale_needs_the_overlapped_two_row_softmax() -> None:
    assert is_valid(FAMILY, point(RESCALE_EARLY=True, SOFTMAX_ILP=True))
    assert not is_valid(FAMILY, point(RESCALE_EARLY=True, SOFTMAX_ILP=False))
    assert not is_valid(FAMILY, point(RESCALE_EARLY=True, SOFTMAX_ILP=True, INTRA_WG_OVERLAP=False))


@pytest.mark.parametrize("genes", [{"SOFTMAX_ILP": True}, {"SOFTMAX_ILP": True, "Q_IN_REGS": True, "LAZY_D128": True},
                                   {"SOFTMAX_ILP": True, "PACK_GQA": True, "PRODUCER_REGS": 32, "ROWSUM_MMA": True}])
def test_the_early_rescale_leaves_every_stored_candidate_as_it_was(genes: dict[str, object]) -> None:
    # RESCALE_EARLY came after candidates were stored: off, it is neither in the source nor in its
    # header's params, so their ids (and what was measured under them) stay valid
    off = render(make_candidate(FAMILY, point(**genes)))
    assert "RESCALE_EARLY" not in off.source and "after_max" not in off.source
    on = render(make_candidate(FAMILY, point(**genes, RESCALE_EARLY=True)))
    assert '"RESCALE_EARLY": true' in on.source.splitlines()[1] and on.source_hash != off.source_hash


def test_q_from_shared_memory_for_three_consumers_needs_q_in_registers_elsewhere() -> None:
    three = {"WGS_D64": 3, "BLOCK_N_D64": 128, "PINGPONG3": True, "Q_IN_REGS": True}
    assert not is_valid(FAMILY, point(**three))                     # Q's 16 registers do not fit 160
    assert is_valid(FAMILY, point(**three, Q_SMEM_WG3=True))
    assert not is_valid(FAMILY, point(**three | {"Q_IN_REGS": False}, Q_SMEM_WG3=True))   # nothing to change
    assert not is_valid(FAMILY, point(Q_IN_REGS=True, Q_SMEM_WG3=True))                   # no three consumers


def test_q_from_shared_memory_for_three_consumers_leaves_every_stored_candidate_as_it_was() -> None:
    genes = {"WGS_D64": 3, "BLOCK_N_D64": 96, "PINGPONG3": True, "SOFTMAX_ILP": True, "Q_IN_REGS": True}
    off = render(make_candidate(FAMILY, point(**genes)))
    assert "Q_SMEM_WG3" not in off.source
    on = render(make_candidate(FAMILY, point(**genes, Q_SMEM_WG3=True)))
    assert '"Q_SMEM_WG3": true' in on.source.splitlines()[1] and on.source_hash != off.source_hash


def test_three_consumers_read_q_from_shared_memory_and_two_from_registers(build_cache: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Q_SMEM_WG3 with three D=64 consumers: their S = Q K^T takes A from shared memory (a descriptor),
    while the two-consumer D=128 kernels of the same candidate keep Q in registers."""
    genes = {"WGS_D64": 3, "BLOCK_N_D64": 128, "PINGPONG3": True, "Q_IN_REGS": True, "Q_SMEM_WG3": True}
    functions = sass_by_function(genes, build_cache, monkeypatch)
    assert len(functions) == 8
    for name, body in functions.items():
        smem_a = re.search(r"HGMMA\.64x128x16\.F32\S* R\d+, gdesc", body)
        regs_a = re.search(r"HGMMA\.64x128x16\.F32\S* R\d+, R\d+, gdesc", body)
        if "_d64_" in name:
            assert smem_a, name
        else:
            assert regs_a and not smem_a, name


SASS_COUNTS = importlib.util.spec_from_file_location(
    "sass_counts", Path(__file__).resolve().parents[1] / "scripts" / "sass_counts.py")
assert SASS_COUNTS and SASS_COUNTS.loader
STEPS = importlib.util.module_from_spec(SASS_COUNTS)
SASS_COUNTS.loader.exec_module(STEPS)


def exps_around_the_p_v_wait(body: str) -> tuple[int, int]:
    """Of the K/V step (scripts/sass_counts.py's step_path: the innermost loop with wgmma and exponentials,
    its masking off the path): the exponentials (MUFU.EX2) before the wait for P V of the tile before
    (``gsb0, 0x0``), and the instructions after the last exponential."""
    found = STEPS.step_path(body)
    assert found is not None
    step = [_unpredicated(o) for o in found[1]]
    wait = next(k for k, o in enumerate(step) if o.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    exps = [k for k, o in enumerate(step) if o.startswith("MUFU.EX2")]
    return sum(k < wait for k in exps), len(step) - 1 - exps[-1]


@pytest.mark.parametrize("genes", [{"SOFTMAX_ILP": True}, {"SOFTMAX_ILP": True, "LAZY_D64": True, "ROWSUM_MMA": True}])
def test_the_early_rescale_waits_for_p_v_before_the_exponentials(genes: dict[str, object], build_cache: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """RESCALE_EARLY's point (FlashAttention-4's order): the wait for P V of the tile before comes after the
    row maxima, ahead of all but a few exponentials, and O's rescale and P's conversion go between the
    exponentials, so that the step ends soon after its last one. Without it the wait follows them all."""
    early = sass_by_function(genes | {"RESCALE_EARLY": True}, build_cache, monkeypatch, head_dims=(128,))
    late = sass_by_function(genes, build_cache, monkeypatch, head_dims=(128,))
    for name in early:
        step, before = exps_around_the_p_v_wait(early[name]), exps_around_the_p_v_wait(late[name])
        # 64 exponentials a 128-key step (and the rows' two rescale factors): at most a quarter before the
        # wait, where version 9's order has them all; the tail after the last one a few instructions, not
        # the rescale's 64 multiplies and the conversion's 32
        assert step[0] <= 16 and step[1] <= 24, (name, step)
        assert before[0] >= 60 and before[1] >= 64, (name, before)


def test_the_split_mask_needs_the_overlap_and_leaves_every_stored_candidate_as_it_was() -> None:
    assert is_valid(FAMILY, point(SPLIT_MASK=True))
    assert not is_valid(FAMILY, point(SPLIT_MASK=True, INTRA_WG_OVERLAP=False))
    off = render(make_candidate(FAMILY, point(SOFTMAX_ILP=True, RESCALE_EARLY=True)))
    assert "SPLIT_MASK" not in off.source and "MayMask" not in off.source
    on = render(make_candidate(FAMILY, point(SOFTMAX_ILP=True, RESCALE_EARLY=True, SPLIT_MASK=True)))
    assert '"SPLIT_MASK": true' in on.source.splitlines()[1] and on.source_hash != off.source_hash


@pytest.mark.parametrize("genes", [{"SOFTMAX_ILP": True, "RESCALE_EARLY": True, "Q_IN_REGS": True},
                                   {"PACK_GQA": True, "PRODUCER_REGS": 32, "CAUSAL_TRIM": True}])
def test_the_split_mask_leaves_no_masking_in_the_unmasked_loop(genes: dict[str, object], build_cache: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """SPLIT_MASK's point (FlashAttention-3/4's peeled masked tiles): the innermost loop with wgmma and
    exponentials skips nothing but the prescale's BLOCK_N / 2 multiplies (no masking code to branch
    over, its scores' FSELs gone), where one loop for both kinds of tile branches over its masking."""
    split = sass_by_function(genes | {"SPLIT_MASK": True}, build_cache, monkeypatch, head_dims=(128,))
    plain = sass_by_function(genes, build_cache, monkeypatch, head_dims=(128,))
    for name, body in split.items():
        loop, path = STEPS.step_path(body)
        plain_loop, plain_path = STEPS.step_path(plain[name])
        assert loop - len(path) <= 64 < plain_loop - len(plain_path), name   # BLOCK_N_D128 = 128
        assert len(path) <= len(plain_path), name


def test_the_l2_section_size_leaves_every_stored_candidate_as_it_was_and_sizes_the_sections() -> None:
    """L2_SECTION_MB at 32 renders the text every stored candidate has (no key in its header); another
    size changes only the section constant, and only for the orders that have sections."""
    assert is_valid(FAMILY, point(L2_SECTION_MB=16, CAUSAL_ORDER="sections"))
    assert not is_valid(FAMILY, point(L2_SECTION_MB=16, CAUSAL_ORDER="natural"))
    at32 = render(make_candidate(FAMILY, point()))
    assert "L2_SECTION_MB" not in at32.source.splitlines()[1] and "L2_SECTION = 32ll << 20;" in at32.source
    at16 = render(make_candidate(FAMILY, point(L2_SECTION_MB=16)))
    assert '"L2_SECTION_MB": 16' in at16.source.splitlines()[1] and "L2_SECTION = 16ll << 20;" in at16.source
    body = [line for line in at16.source.splitlines()[2:] if "L2_SECTION = " not in line]
    assert body == [line for line in at32.source.splitlines()[2:] if "L2_SECTION = " not in line]


def test_section_deal_restart_leaves_every_stored_candidate_as_it_was_and_the_others_swap_only_the_walker() -> None:
    """SECTION_DEAL restart renders the text every stored candidate has (no key in its header); rotate and
    even are valid only under the sections order and change the Tiles walker alone (even: its sections too)."""
    assert is_valid(FAMILY, point(SECTION_DEAL="even", CAUSAL_ORDER="sections"))
    assert not is_valid(FAMILY, point(SECTION_DEAL="rotate", CAUSAL_ORDER="global"))
    off = render(make_candidate(FAMILY, point(CAUSAL_ORDER="sections")))
    rotate = render(make_candidate(FAMILY, point(CAUSAL_ORDER="sections", SECTION_DEAL="rotate")))
    even = render(make_candidate(FAMILY, point(CAUSAL_ORDER="sections", SECTION_DEAL="even")))
    assert "SECTION_DEAL" not in off.source.splitlines()[1] and '"SECTION_DEAL": "even"' in even.source.splitlines()[1]
    assert "in_section(" in off.source and "in_section(" not in rotate.source and "before(lo, r, c, G)" in rotate.source
    assert "sec(even(BH, " in even.source and "sec(even(" not in rotate.source and "before(lo, r, c, G)" in even.source

    def outside_tiles(source: str) -> list[str]:
        lines = source.splitlines()[2:]
        start = next(i for i, line in enumerate(lines) if line.startswith("struct Tiles"))
        end = next(i for i in range(start, len(lines)) if lines[i] == "};")
        return lines[:start] + lines[end:]

    assert outside_tiles(rotate.source) == outside_tiles(off.source) == outside_tiles(even.source)


def test_tile_sched_static_leaves_every_stored_candidate_as_it_was_and_dynamic_takes_a_counter_where_persistent() -> None:
    """TILE_SCHED static renders the text every stored candidate has; dynamic is valid on a persistent grid
    without PACK_GQA (and a producer of 32 registers or more where they are reallocated), and gives the
    persistent entries (D=64, 96, 128) one more kernel parameter, the tile counter, that the launch passes
    (LaunchConfig.tile_counter), and D=256 (never persistent) none: the two must agree, or a launch would
    pass an argument the kernel does not take."""
    dyn = point(TILE_SCHED="dynamic", PRODUCER_REGS=32)
    assert is_valid(FAMILY, dyn)
    assert not is_valid(FAMILY, point(TILE_SCHED="dynamic"))                      # 24 registers: spilled
    assert not is_valid(FAMILY, dyn | {"PERSISTENT": False})
    assert not is_valid(FAMILY, dyn | {"PACK_GQA": True})
    off = render(make_candidate(FAMILY, point()))
    on = render(make_candidate(FAMILY, dyn))
    assert "TILE_SCHED" not in off.source.splitlines()[1] and '"TILE_SCHED": "dynamic"' in on.source.splitlines()[1]
    assert "atomicAdd" not in off.source and "tile_counter" not in off.source
    assert "atomicAdd(counter, 1u)" in on.source and "atomicExch(counter, 0u)" in on.source
    for e in on.entries:
        assert e.launch.tile_counter == (e.head_dim != 256)
        signature = next(line for line in on.source.splitlines() if line.startswith(f"{e.name}("))
        params = on.source[on.source.index(signature):].split("{", 1)[0]
        assert ("unsigned int* tile_counter" in params) == e.launch.tile_counter, e.name
    assert not any(e.launch.tile_counter for e in off.entries)
