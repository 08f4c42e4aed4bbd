"""Regenerate BENCHMARKS.md from benchmarks/*.json without a GPU (evo bench does it after each run).

Usage: python scripts/gen_benchmarks_md.py [BENCHMARKS_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from evo import paths
from evo.bench import regenerate

if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else paths.root() / "benchmarks"
    print(regenerate(folder))
