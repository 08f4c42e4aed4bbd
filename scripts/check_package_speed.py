"""Compare a promoted package's measured speed with the database figures it was promoted on.

Usage: python scripts/check_package_speed.py PROVENANCE.json BENCH.json [BENCH.json ...] [--tolerance 0.05]
For every FAST case the package serves with an evo kernel, PROVENANCE.json holds the database's
median (``evo_us``) and speedup over the baseline it routed on (``speedup``), and the
`evo bench --package` JSON files (one per dtype) the fresh medians (``us``). Prints one line per
case and exits 1 if any case's speedup in the package differs from the database's by more than
the tolerance.

Why the speedup and not the time: at the power limit a long kernel's clock depends on what ran
before it, and a whole run can sit a few percent faster or slower than another (on an H100 a
search read the F4 winner at 229.8 us and SDPA at 243.0, the package bench 240.7 and 246.1):
the times moved 5 % while the ratio moved 3 %. The routing rests on the ratio; the time is shown
beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def compare(prov: dict[str, Any], bench: dict[tuple[str, bool, str], dict[str, Any]],
            tolerance: float, only_benched: bool = False) -> tuple[list[str], float, int]:
    """Lines to print, the worst speedup deviation and how many cases are outside or missing: a
    case served by a kernel the database never timed on it counts as outside, and so does one the
    bench files lack unless ``only_benched`` (the files bench one suite of the package's)."""
    baseline = prov.get("baseline", "sdpa_default")
    lines, worst, bad = [], 0.0, 0
    for case in prov["cases"]:
        if not case.get("served_by"):
            continue
        tag = f"{case['case']}{'c' if case['causal'] else ''} {case['dtype']}"
        fresh = bench.get((case["case"], case["causal"], case["dtype"]))
        if fresh is None and only_benched:
            continue
        us = fresh["us"] if fresh else {}
        if not case.get("speedup"):
            lines.append(f"{tag}: served by {case['served_by'][:12]}, which the database never timed on it")
            bad += 1
            continue
        if us.get("evo") is None or us.get(baseline) is None:
            lines.append(f"{tag}: not in the bench file (or no {baseline} there)")
            bad += 1
            continue
        now = us[baseline] / us["evo"]
        dev = now / case["speedup"] - 1
        worst = max(worst, abs(dev))
        ok = abs(dev) <= tolerance
        bad += not ok
        lines.append(f"{tag}: x{case['speedup']:.3f} in the database, x{now:.3f} in the package "
                     f"({dev:+.1%}) {'ok' if ok else 'OUTSIDE'}; evo {case['evo_us']:.2f} -> {us['evo']:.2f} us")
    return lines, worst, bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("provenance")
    ap.add_argument("bench", nargs="+")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--only-benched", action="store_true",
                    help="leave out the package's cases that no bench file holds (a bench of one of its suites)")
    args = ap.parse_args()
    missing = [p for p in (args.provenance, *args.bench) if not Path(p).is_file()]
    if missing:  # e.g. a bench run that wrote nothing: the shell passed its glob unexpanded
        print(f"check_package_speed: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    prov = json.loads(Path(args.provenance).read_text())
    bench = {(c["case"], c["causal"], c["dtype"]): c
             for path in args.bench for c in json.loads(Path(path).read_text())["cases"]}
    lines, worst, bad = compare(prov, bench, args.tolerance, args.only_benched)
    print("\n".join(lines))
    print(f"worst speedup deviation {worst:.1%} (tolerance {args.tolerance:.0%}); {bad} case(s) outside")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
