"""One BENCHMARKS.md throughput record from the parts of a resumed `evo run` (issue 35).

A 10-minute run does not fit one call of a lent GPU machine, so scripts/gpu-throughput.sh runs it as
parts that resume one study (``TP_RESUME``). This writes their ``--summary-json`` documents, in
order, as one record (:func:`evo.products.throughput.combine`): each part's start-up (a fresh worker,
the first batch's builds) stays in the wall time, so the rate is no better than one run's would be.

    python3 scripts/throughput_parts.py PART1.json PART2.json [--note TEXT] --out benchmarks/throughput/NAME.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evo.errors import EvoError
from evo.products.throughput import combine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", type=Path, help="evo run --summary-json documents, in order")
    ap.add_argument("--note", default="", help="a line shown beside the record in BENCHMARKS.md")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        record = combine([json.loads(p.read_text()) for p in args.parts])
    except (OSError, json.JSONDecodeError, KeyError, EvoError) as exc:
        print(f"throughput_parts: {exc}", file=sys.stderr)
        return 1
    if args.note:
        record["note"] = args.note
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{record['measured']} candidates in {record['wall_s']:.0f} s over {len(args.parts)} parts: "
          f"{record['candidates_per_gpu_hour']:.0f} per GPU-hour")
    return 0


if __name__ == "__main__":
    sys.exit(main())
