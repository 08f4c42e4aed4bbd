"""Regenerate BENCHMARKS.md from benchmarks/*.json without a GPU (evo bench does it after each run).

Usage: python scripts/gen_benchmarks_md.py [BENCHMARKS_DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evo import paths
from evo.products.bench import regenerate

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=paths.root() / "benchmarks",
                        help="the folder of benchmark JSON (default: the repository's benchmarks/)")
    folder = parser.parse_args().folder
    if not folder.is_dir() or not any(folder.glob("*.json")):
        parser.error(f"{folder}: no benchmark JSON there")
    print(regenerate(folder))
