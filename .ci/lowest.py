"""Print pip pins for the lower bound of every dependency in pyproject.toml (``name==low``),
so CI can test the bottom of each declared range; torch is left out (CI pins its CPU build).

Usage: python .ci/lowest.py [EXTRA ...] > lowest.txt
"""

import re
import sys
import tomllib
from pathlib import Path

LOWER = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)")


def pins(extras: list[str]) -> list[str]:
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    out = []
    for spec in specs:
        m = LOWER.match(spec)
        if m is None:
            raise SystemExit(f"{spec!r} has no lower bound: every dependency needs one")
        if m.group(1) != "torch":
            out.append(f"{m.group(1)}=={m.group(3)}")
    return out


if __name__ == "__main__":
    print("\n".join(pins(sys.argv[1:])))
