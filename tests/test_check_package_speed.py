"""scripts/check_package_speed.py judges a package by its speedup against the database's, not
by its kernel time (which moves with the clock state of the whole run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "check_package_speed", Path(__file__).resolve().parents[1] / "scripts" / "check_package_speed.py")
assert SPEC and SPEC.loader
CHECK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(CHECK)


def _case(name: str, evo_us: float, speedup: float | None, served: bool = True) -> dict:
    return {"case": name, "causal": False, "dtype": "fp16", "served_by": "abc" if served else None,
            "evo_us": evo_us, "speedup": speedup}


def test_a_run_slower_for_both_kernels_is_ok_and_a_lost_lead_is_not() -> None:
    prov = {"baseline": "sdpa_default", "cases": [_case("F4", 229.8, 1.057), _case("F5", 426.1, 1.094),
                                                  _case("F1", 6.8, None, served=False)]}
    bench = {("F4", False, "fp16"): {"us": {"evo": 240.7, "sdpa_default": 254.4}},    # both 5 % slower
             ("F5", False, "fp16"): {"us": {"evo": 445.3, "sdpa_default": 430.0}}}    # the lead is gone
    lines, worst, bad = CHECK.compare(prov, bench, 0.05)
    assert bad == 1 and len(lines) == 2                     # the SDPA-served case is not checked
    assert lines[0].startswith("F4 fp16: x1.057 in the database, x1.057 in the package") and " ok; " in lines[0]
    assert "OUTSIDE" in lines[1] and worst > 0.1


def test_a_case_missing_from_the_bench_counts_as_outside() -> None:
    prov = {"cases": [_case("F4", 229.8, 1.057)]}
    lines, _, bad = CHECK.compare(prov, {}, 0.05)
    assert bad == 1 and "not in the bench file" in lines[0]


def test_a_one_suite_bench_leaves_the_other_suites_out_but_not_an_untimed_route() -> None:
    """At 2026-11-28q bench-fast checked the FAST files alone against a package that also serves the
    LLM suite, and F7c was served by a kernel the database had never timed on it."""
    prov = {"cases": [_case("F4", 229.8, 1.057), _case("L1", 240.0, 1.2), _case("F7", 1000.0, None)]}
    bench = {("F4", False, "fp16"): {"us": {"evo": 229.8, "sdpa_default": 242.9}},
             ("F7", False, "fp16"): {"us": {"evo": 1000.0, "sdpa_default": 990.0}}}
    lines, _, bad = CHECK.compare(prov, bench, 0.05, only_benched=True)
    assert bad == 1 and len(lines) == 2 and " ok; " in lines[0]
    assert lines[1] == "F7 fp16: served by abc, which the database never timed on it"
    assert CHECK.compare(prov, bench, 0.05)[2] == 2                       # L1 missing counts without the flag
