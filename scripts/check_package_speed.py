"""Compare a promoted package's measured speed with the database figures it was promoted on.

Usage: python scripts/check_package_speed.py PROVENANCE.json BENCH.json [BENCH.json ...] [--tolerance 0.05]
For every FAST case the package serves with an evo kernel, PROVENANCE.json holds the
database's median (``evo_us``) and the `evo bench --package` JSON files (one per dtype) the fresh
median (``us.evo``).
Prints one line per case with the ratio, and exits 1 if any differs by more than the tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("provenance")
    ap.add_argument("bench", nargs="+")
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()
    missing = [p for p in (args.provenance, *args.bench) if not Path(p).is_file()]
    if missing:  # e.g. a bench run that wrote nothing: the shell passed its glob unexpanded
        print(f"check_package_speed: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    prov = json.loads(Path(args.provenance).read_text())
    bench = {(c["case"], c["causal"], c["dtype"]): c
             for path in args.bench for c in json.loads(Path(path).read_text())["cases"]}
    worst, bad = 0.0, 0
    for case in prov["cases"]:
        if not case.get("served_by"):
            continue
        fresh = bench.get((case["case"], case["causal"], case["dtype"]))
        if fresh is None or fresh["us"].get("evo") is None:
            print(f"{case['case']}{'c' if case['causal'] else ''}: not in the bench file")
            bad += 1
            continue
        ratio = fresh["us"]["evo"] / case["evo_us"]
        worst = max(worst, abs(ratio - 1))
        ok = abs(ratio - 1) <= args.tolerance
        bad += not ok
        print(f"{case['case']}{'c' if case['causal'] else ''} {case['dtype']}: database {case['evo_us']:.2f} us, "
              f"package {fresh['us']['evo']:.2f} us, ratio {ratio:.3f} {'ok' if ok else 'OUTSIDE'}")
    print(f"worst deviation {worst:.1%} (tolerance {args.tolerance:.0%}); {bad} case(s) outside")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
