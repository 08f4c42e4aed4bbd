"""Issue 33's acceptance bars, read from `evo bench --package` records: pass or fail, with the numbers.

Usage: python scripts/llm_bars.py BENCH.json [BENCH.json ...]

Every ratio is a baseline's time over evo's within one case row of one record (the row's timings
were interleaved in one process), so rows never mix runs. For each LLM-suite record (cases L1-L8):
the geometric mean and the lowest case against FlashAttention-4 (bars 1.05 and 0.95) and against
SDPA's default (bars 1.3 and 1.0). Over the FAST-suite records given (their cases pooled across
dtypes, as the bar reads): the long cases F4-F8 against SDPA's cuDNN backend (bar 1.10) and F1-F3
(bar 1.2). Prints one line per bar; exits 0 (it reports, it does not judge a run).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
    return math.exp(sum(math.log(r) for _, r in pairs) / len(pairs)), tag, low


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


def fast_lines(cases: Sequence[Mapping[str, Any]]) -> list[str]:
    """The FAST bars over the pooled cases of the FAST records."""
    lines = []
    for label, names, bar in FAST_BARS:
        pairs = ratios([c for c in cases if c["case"] in names], FAST_BASELINE)
        if not pairs:
            continue
        mean, tag, low = summary(pairs)
        lines.append(f"FAST {label} vs {FAST_BASELINE} ({len(pairs)} cases): geomean {mean:.3f} (bar {bar}), "
                     f"lowest {low:.3f} at {tag}: {'pass' if mean >= bar else 'FAIL'}")
    return lines


def report(records: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Every bar the ``(file name, record)`` pairs can be read against."""
    lines: list[str] = []
    fast: list[Mapping[str, Any]] = []
    for name, record in records:
        if record["cases"] and all(c["case"].startswith("L") for c in record["cases"]):
            lines += llm_lines(name, record)
        elif record.get("clocks", "steady") == "steady":
            fast += [c for c in record["cases"] if c["case"].startswith("F")]
    return lines + fast_lines(fast)


def main(paths: Sequence[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    records = [(Path(p).name, json.loads(Path(p).read_text())) for p in paths]
    print("\n".join(report(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
