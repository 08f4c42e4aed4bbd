"""scripts/llm_bars.py reads issue 33's bars from bench records: within-row ratios, geomean and floor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("llm_bars", Path(__file__).resolve().parents[1] / "scripts" / "llm_bars.py")
assert SPEC and SPEC.loader
BARS = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(BARS)


def _case(name: str, causal: bool, dtype: str, **us: float) -> dict:
    return {"case": name, "causal": causal, "dtype": dtype, "us": us}


def test_an_llm_record_passes_only_when_its_mean_and_its_lowest_case_both_do() -> None:
    record = {"clocks": "burst", "cases": [_case("L1", True, "bf16", evo=100.0, fa4=112.0, sdpa_default=140.0),
                                           _case("L3", True, "bf16", evo=100.0, fa4=90.0, sdpa_default=250.0)]}
    fa4, sdpa = BARS.report([("r.json", record)])
    assert fa4.startswith("r.json (burst clocks) vs fa4: geomean 1.004 (bar 1.05), lowest 0.900 at L3c bf16")
    assert fa4.endswith("FAIL")
    assert "geomean 1.871" in sdpa and "lowest 1.400 at L1c bf16" in sdpa and sdpa.endswith("pass")


def test_the_fast_bars_pool_the_fast_records_and_leave_burst_records_out() -> None:
    fp16 = {"cases": [_case("F1", False, "fp16", evo=10.0, sdpa_cudnn=13.0),
                      _case("F7", True, "fp16", evo=100.0, sdpa_cudnn=96.0)]}
    bf16 = {"cases": [_case("F7", False, "bf16", evo=100.0, sdpa_cudnn=121.0)]}
    burst = {"clocks": "burst", "cases": [_case("F7", False, "bf16", evo=1.0, sdpa_cudnn=9.0)]}
    long, short = BARS.report([("a.json", fp16), ("b.json", bf16), ("c.json", burst)])
    assert long == ("FAST long cases F4-F8 vs sdpa_cudnn (2 cases): geomean 1.078 (bar 1.1), lowest 0.960 at F7c fp16: "
                    "FAIL")
    assert short.startswith("FAST F1-F3 vs sdpa_cudnn (1 cases): geomean 1.300 (bar 1.2)") and short.endswith("pass")


def test_repeated_benches_of_one_package_are_also_read_on_each_cases_median_ratio() -> None:
    """Three benches of one commit: every record keeps its own lines, and the bars are read again on
    each case's median ratio; a record of another commit is not pooled with them."""
    def bench(l1: float, l3: float, sha: str = "abc") -> dict:
        return {"git_sha": sha, "package": "p", "cases": [_case("L1", True, "bf16", evo=100.0, fa4=l1, sdpa_default=140.0),
                                                          _case("L3", True, "bf16", evo=100.0, fa4=l3, sdpa_default=200.0)]}
    records = [("a.json", bench(110.0, 94.0)), ("b.json", bench(104.0, 97.0)), ("c.json", bench(108.0, 99.0)),
               ("d.json", bench(50.0, 50.0, sha="other"))]
    lines = BARS.report(records)
    assert len(lines) == 2 * 4 + 2
    fa4 = next(x for x in lines if x.startswith("median of 3 benches (abc, bf16)") and "vs fa4" in x)
    assert "geomean 1.024 (bar 1.05), lowest 0.970 at L3c bf16 (floor 0.95)" in fa4 and fa4.endswith("FAIL")
    sdpa = next(x for x in lines if x.startswith("median of 3 benches") and "vs sdpa_default" in x)
    assert "geomean 1.673" in sdpa and sdpa.endswith("pass")


def test_an_unreadable_record_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file and a file that is not JSON each end the script with one line on stderr and 2."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (tmp_path / "missing.json", bad):
        assert BARS.main([str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("llm_bars: cannot read a record:")
