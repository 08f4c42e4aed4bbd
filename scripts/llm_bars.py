"""Issue 33's acceptance bars, read from `evo bench --package` records: pass or fail, with the numbers.

Usage: python scripts/llm_bars.py BENCH.json [BENCH.json ...]

Every ratio is a baseline's time over evo's within one case row of one record (the row's timings
were interleaved in one process), so rows never mix runs. For each LLM-suite record (cases L1-L8):
the geometric mean and the lowest case against FlashAttention-4 (bars 1.05 and 0.95) and against
SDPA's default (bars 1.3 and 1.0). Over the FAST-suite records of one package and commit (their
cases pooled across dtypes, as the bar reads; each commit apart when several are given): the long
cases F4-F8 against SDPA's cuDNN backend (bar 1.10) and F1-F3 (bar 1.2). Prints one line per bar;
exits 0 (it reports, it does not judge a run).

Several LLM records of one package, commit, dtype and clock protocol (benches repeated, since one
bench places a case only within about 3 %: dev/perf-notes.md, 2026-11-28 n) are also read together:
each case's ratio is its median over those records, and the bars are read on the medians, with
the count of records beside them. Each record's own lines come first, so no bench is hidden.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evo.scoring import geomean

LLM_BARS = (("fa4", 1.05, 0.95), ("sdpa_default", 1.3, 1.0))   # (baseline, geomean bar, floor)
FAST_BARS = (("long cases F4-F8", ("F4", "F5", "F6", "F7", "F8"), 1.10), ("F1-F3", ("F1", "F2", "F3"), 1.2))
FAST_BASELINE = "sdpa_cudnn"


def ratios(cases: Iterable[Mapping[str, Any]], baseline: str) -> list[tuple[str, float]]:
    """(case tag, baseline time / evo time) for every case with both timings."""
    out = []
    for c in cases:
        us = c.get("us", {})
        if us.get(baseline) and us.get("evo"):
            out.append((f"{c['case']}{'c' if c['causal'] else ''} {c['dtype']}", us[baseline] / us["evo"]))
    return out


def summary(pairs: Sequence[tuple[str, float]]) -> tuple[float, str, float]:
    """(geometric mean, lowest case's tag, its ratio) of non-empty ``pairs``."""
    tag, low = min(pairs, key=lambda p: p[1])
    return geomean(r for _, r in pairs), tag, low


def llm_lines(name: str, record: Mapping[str, Any]) -> list[str]:
    """The LLM bars of one record, a line per baseline."""
    lines = []
    for baseline, bar, floor in LLM_BARS:
        pairs = ratios(record["cases"], baseline)
        if not pairs:
            lines.append(f"{name}: no {baseline} timings")
            continue
        mean, tag, low = summary(pairs)
        ok = mean >= bar and low >= floor
        lines.append(f"{name} ({record.get('clocks', 'steady')} clocks) vs {baseline}: geomean {mean:.3f} (bar {bar}), "
                     f"lowest {low:.3f} at {tag} (floor {floor}): {'pass' if ok else 'FAIL'}")
    return lines


def median_record(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One record whose cases carry, per baseline, the median over ``records`` of the baseline's
    time over evo's (as ``us`` with evo at 1.0), for the cases every record has."""
    per: dict[tuple[str, bool, str], dict[str, list[float]]] = {}
    for record in records:
        for c in record["cases"]:
            us = c.get("us", {})
            for base, t in us.items():
                if base != "evo" and t and us.get("evo"):
                    per.setdefault((c["case"], bool(c["causal"]), c["dtype"]), {}).setdefault(base, []).append(
                        t / us["evo"])
    cases = [{"case": k[0], "causal": k[1], "dtype": k[2],
              "us": {"evo": 1.0, **{b: statistics.median(v) for b, v in bases.items() if len(v) == len(records)}}}
             for k, bases in per.items()]
    return {"clocks": records[0].get("clocks", "steady"), "cases": cases}


def _group(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes records repeats of one bench: package, commit, clocks and dtypes."""
    return (record.get("package"), record.get("git_sha"), record.get("clocks", "steady"),
            tuple(sorted({c["dtype"] for c in record["cases"]})))


def fast_lines(cases: Sequence[Mapping[str, Any]], sha: str = "") -> list[str]:
    """The FAST bars over the pooled cases of the FAST records (of commit ``sha``, named when given)."""
    lines = []
    for label, names, bar in FAST_BARS:
        pairs = ratios([c for c in cases if c["case"] in names], FAST_BASELINE)
        if not pairs:
            continue
        mean, tag, low = summary(pairs)
        lines.append(f"FAST {f'({sha}) ' if sha else ''}{label} vs {FAST_BASELINE} ({len(pairs)} cases): geomean {mean:.3f} (bar {bar}), "
                     f"lowest {low:.3f} at {tag}: {'pass' if mean >= bar else 'FAIL'}")
    return lines


def report(records: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Every bar the ``(file name, record)`` pairs can be read against."""
    lines: list[str] = []
    fast: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    repeats: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for name, record in records:
        if record["cases"] and all(c["case"].startswith("L") for c in record["cases"]):
            lines += llm_lines(name, record)
            repeats.setdefault(_group(record), []).append(record)
        elif record.get("clocks", "steady") == "steady":
            fast.setdefault((record.get("package"), record.get("git_sha")), []).extend(
                c for c in record["cases"] if c["case"].startswith("F"))
    for (_, sha, _, dtypes), group in repeats.items():
        if len(group) > 1:
            lines += llm_lines(f"median of {len(group)} benches ({sha}, {'+'.join(dtypes)})", median_record(group))
    for (_, sha), cases in fast.items():
        lines += fast_lines(cases, sha if len(fast) > 1 else "")
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("records", nargs="+", metavar="BENCH.json", help="`evo bench` records")
    paths = parser.parse_args(argv).records
    try:
        records = [(Path(p).name, json.loads(Path(p).read_text())) for p in paths]
    except (OSError, ValueError) as exc:
        print(f"llm_bars: cannot read a record: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
