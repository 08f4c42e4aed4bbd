"""Candidate validation, enumeration and mutation against the real family manifests."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evo.errors import EvoError, InvalidCandidate
from evo.family.expr import MAX_BITS, evaluate
from evo.family.manifest import load_family
from evo.family.space import (all_candidates, combinations, diff, launch_config, listable, make_candidate, mutations,
                       parse_assignments, random_candidates, sample_valid, violations)

FAMILIES = ["flash_mma", "flash_scalar"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("family", FAMILIES)
def test_default_is_valid(family: str) -> None:
    fam = load_family(family)
    assert violations(fam, fam.defaults()) == []


def test_constraint_violation_names_the_rule() -> None:
    with pytest.raises(InvalidCandidate, match=r"16 or 32 query rows.*BLOCK_M=32.*NUM_WARPS=8"):
        make_candidate("flash_mma", {"BLOCK_M": 32, "NUM_WARPS": 8})


def test_out_of_domain_value_lists_allowed_values() -> None:
    with pytest.raises(InvalidCandidate, match=r"BLOCK_N=48 is not allowed; allowed: 32, 64, 128"):
        make_candidate("flash_mma", {"BLOCK_N": 48})


def test_unknown_parameter_is_rejected() -> None:
    with pytest.raises(InvalidCandidate, match="unknown parameter 'TILE'"):
        make_candidate("flash_scalar", {"TILE": 4})


def test_wrong_type_is_rejected() -> None:
    # True == 1 in Python: a bool must not pass for an int gene, nor an int for a bool one.
    with pytest.raises(InvalidCandidate, match="EXP2=1 is not allowed"):
        make_candidate("flash_mma", {"EXP2": 1})


def test_unknown_family_lists_known_ones() -> None:
    with pytest.raises(EvoError, match="unknown family 'nope'.*flash_mma"):
        make_candidate("nope")


def test_cli_assignments_parse_against_domains() -> None:
    fam = load_family("flash_mma")
    assert parse_assignments(fam, ["BLOCK_M=64", "SWIZZLE=none", "EXP2=False"]) == {
        "BLOCK_M": 64, "SWIZZLE": "none", "EXP2": False}
    with pytest.raises(EvoError, match="STAGES='9' is not allowed; allowed: 1, 2, 3"):
        parse_assignments(fam, ["STAGES=9"])
    with pytest.raises(EvoError, match="expected KEY=VALUE"):
        parse_assignments(fam, ["STAGES"])


@pytest.mark.parametrize("family", FAMILIES)
def test_enumeration_yields_only_valid_distinct_points(family: str) -> None:
    fam = load_family(family)
    pts = list(all_candidates(fam))
    assert len(pts) == len(set(pts)) > 10
    assert all(violations(fam, c.p) == [] for c in pts)


@pytest.mark.parametrize("family", ["flash_mma", "flash_scalar", "triton_flash", "seed_pipeline", "seed_wmma"])
def test_enumeration_is_the_product_filtered_in_manifest_order(family: str) -> None:
    """The depth-first enumeration that checks each constraint once its parameters are bound
    gives exactly the filtered itertools.product, in its order."""
    import itertools

    fam = load_family(family)
    names = list(fam.params)
    brute = [tuple(zip(names, combo, strict=True)) for combo in itertools.product(*(fam.params[n].values for n in names))
             if not violations(fam, dict(zip(names, combo, strict=True)))]
    assert [c.params for c in all_candidates(fam)] == brute


def test_a_space_too_large_to_list_is_sampled_uniformly_and_validly() -> None:
    fam = load_family("flash_wgmma")
    assert not listable(fam) and combinations(fam) > 1_000_000
    picked = random_candidates(fam, 40, random.Random(5))
    assert picked == random_candidates(fam, 40, random.Random(5)) and len(set(picked)) == 40
    assert all(violations(fam, c.p) == [] for c in picked)
    pinned = random_candidates(fam, 10, random.Random(1), {"WGS_D64": 3, "ROWSUM_MMA": True})
    assert len(pinned) == 10 and all(c.p["WGS_D64"] == 3 and c.p["ROWSUM_MMA"] for c in pinned)
    first = sample_valid(fam, random.Random(2))
    assert first is not None and sample_valid(fam, random.Random(2), lambda c: c != first) != first
    assert sample_valid(fam, random.Random(2), lambda c: False) is None       # gives up after its tries


def test_random_candidates_are_seeded_and_distinct() -> None:
    fam = load_family("flash_mma")
    a = random_candidates(fam, 12, random.Random(3))
    assert a == random_candidates(fam, 12, random.Random(3))
    assert len(set(a)) == 12


def test_mutations_change_exactly_the_named_genes() -> None:
    fam = load_family("flash_mma")
    base = make_candidate(fam)
    for child, mut in mutations(fam, base, genes=1):
        assert len(mut) == 1 and diff(base, child) == mut
    assert all(len(m) == 2 for _, m in mutations(fam, base, genes=2))


def test_launch_config_follows_the_manifest() -> None:
    fam = load_family("flash_mma")
    cfg = launch_config(fam, make_candidate(fam), 128)
    assert (cfg.threads, cfg.rows_per_cta, cfg.smem_bytes) == (128, 128, 2 * 128 * (128 + 2 * 2 * 64))
    assert cfg.grid(2, 4, 1531) == (12, 8, 1)


@pytest.mark.parametrize("expr,names,want", [
    ("A % (16 * B) == 0 and A // (16 * B) <= 2", {"A": 128, "B": 4}, True),
    ("max(A, B) if C else min(A, B)", {"A": 3, "B": 5, "C": False}, 3),
    ("X in ('a', 'b') and not Y", {"X": "b", "Y": False}, True),
])
def test_expression_evaluator(expr: str, names: dict, want: object) -> None:
    assert evaluate(expr, names) == want


@pytest.mark.parametrize("expr", ["__import__('os')", "A.__class__", "[x for x in A]", "A +"])
def test_expression_evaluator_refuses_code(expr: str) -> None:
    with pytest.raises(EvoError):
        evaluate(expr, {"A": 1})


def test_a_power_that_never_ends_is_an_error_at_once() -> None:
    """``9**9**9**9`` in a constraint used to compute for ever; in a child process, so that a
    regression fails here instead of hanging the suite."""
    code = ("from evo.errors import EvoError\nfrom evo.family.expr import evaluate\n"
            "try:\n    evaluate('9**9**9**9 > A', {'A': 1})\nexcept EvoError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=os.environ | {"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    said = f"manifest expression '9**9**9**9 > A': the power's result would exceed {MAX_BITS} bits"
    assert out.stdout.strip() == said


@pytest.mark.parametrize(("expr", "said"), [
    ("A ** (8 * MAX)", "power's result would exceed"),
    ("(-A) ** (4 * MAX + 1)", "power's result would exceed"),
    ("(A ** (MAX - 1)) * (A ** (MAX - 1)) * A", "product would exceed"),
    ("'x' * 10 ** 9", "repeated sequence would exceed"),
    ("[A] * (MAX * MAX)", "repeated sequence would exceed"),
    ("'%0999999999d' % A", "% on a string"),
    ("A << 10 ** 9", "unsupported syntax"),
])
def test_a_result_too_large_to_compute_is_refused(expr: str, said: str) -> None:
    with pytest.raises(EvoError, match=re.escape(f"manifest expression {expr!r}") + ".*" + re.escape(said)):
        evaluate(expr, {"A": 2, "MAX": MAX_BITS})


@pytest.mark.parametrize(("expr", "want"), [
    ("A ** (MAX - 1)", 2 ** (MAX_BITS - 1)),        # MAX_BITS bits: the largest power allowed
    ("(A ** (MAX // 2)) * (A ** (MAX // 2 - 1))", 2 ** (MAX_BITS - 1)),
    ("1 ** 10 ** 100 + 0 ** 10 ** 100", 1),         # no growth, whatever the exponent
    ("A ** -2 + 2.0 ** 3", 8.25),
    ("S * 3 == 'abab' + S", True),                   # a short repetition is fine
])
def test_large_but_bounded_results_are_computed(expr: str, want: object) -> None:
    assert evaluate(expr, {"A": 2, "MAX": MAX_BITS, "S": "ab"}) == want
