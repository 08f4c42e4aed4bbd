"""The acceptance suites as data: GREEN cases + gate settings, and FAST cases with selection.

``acceptance/green.toml`` and ``acceptance/fast.toml`` are the single source of the shapes,
causal modes, dtypes, seeds and tolerances; this module turns them into :class:`Shape` lists
and a :class:`GreenSettings`, and parses FAST selections such as ``F1``, ``F3c`` (causal only),
``F3f`` (full only) and ``F1-F4`` (a range in suite order).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evo import paths
from evo.errors import EvoError
from evo.results import Shape

DTYPES = ("fp16", "bf16")
_SELECT = re.compile(r"^(?P<first>[^-\s]+?)(?:-(?P<last>[^-\s]+?))?(?P<mode>[cf])?$")


@dataclass(frozen=True)
class GreenSettings:
    """How GREEN decides: seeds per case, tolerance = multiplier * ref_err + floor[dtype]."""

    seeds: tuple[int, ...]
    multiplier: float
    floors: Mapping[str, float]
    dtypes: tuple[str, ...] = DTYPES
    gate_dtypes: tuple[str, ...] = DTYPES
    guard_elements: int = 4096
    float64_below: int = 1 << 22

    def tolerance(self, ref_err: float, dtype: str) -> float:
        return self.multiplier * ref_err + self.floors[dtype]


@dataclass(frozen=True)
class _Suite:
    path: Path
    data: dict[str, Any]
    cases: tuple[tuple[str, tuple[int, int, int, int]], ...]
    causal: tuple[bool, ...]


def _load(name: str, path: Path | None) -> _Suite:
    path = path or paths.acceptance_dir() / name
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise EvoError(f"cannot read suite {path}: {exc}") from None
    cases = []
    for c in data.get("case", []):
        shape = c.get("shape")
        if "name" not in c or not (isinstance(shape, list) and len(shape) == 4
                                   and all(isinstance(x, int) and x >= 1 for x in shape)):
            raise EvoError(f"{path}: each [[case]] needs a name and shape = [B, H, L, D] of positive ints")
        cases.append((str(c["name"]), tuple(shape)))
    if not cases:
        raise EvoError(f"{path}: no [[case]] entries")
    names = [n for n, _ in cases]
    if len(set(names)) != len(names):
        raise EvoError(f"{path}: duplicate case names in {', '.join(names)}")
    causal = tuple(bool(c) for c in data.get("causal", [False, True]))
    return _Suite(path, data, tuple(cases), causal)  # type: ignore[arg-type]


def _check_dtypes(dtypes: Sequence[str], where: str) -> tuple[str, ...]:
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise EvoError(f"{where}: unknown dtype {', '.join(bad)}; known: {', '.join(DTYPES)}")
    return tuple(dtypes)


def _shapes(suite: _Suite, names: Sequence[str], modes: Mapping[str, tuple[bool, ...]],
            dtypes: Sequence[str]) -> list[Shape]:
    """Shapes ordered by dtype, then suite order, then causal mode (full first)."""
    dims = dict(suite.cases)
    return [Shape(n, *dims[n], causal=c, dtype=dt)
            for dt in dtypes for n in names for c in suite.causal if c in modes[n]]


def green_settings(path: Path | None = None) -> GreenSettings:
    """Gate settings from ``acceptance/green.toml`` (or ``path``)."""
    suite = _load("green.toml", path)
    d, tol = suite.data, suite.data.get("tolerance", {})
    dtypes = _check_dtypes(d.get("dtypes", DTYPES), str(suite.path))
    floors = {k: float(v) for k, v in tol.get("floor", {}).items()}
    missing = [dt for dt in dtypes if floors.get(dt, 0.0) <= 0.0]
    if missing:
        raise EvoError(f"{suite.path}: [tolerance] floor needs a positive value for "
                       f"{', '.join(missing)}")
    seeds = tuple(int(s) for s in d.get("seeds", ()))
    if len(seeds) < 1 or len(set(seeds)) != len(seeds):
        raise EvoError(f"{suite.path}: seeds must be a non-empty list of distinct ints")
    guard = int(d.get("guard_elements", 4096))
    if guard < 64 or guard % 64:
        raise EvoError(f"{suite.path}: guard_elements must be a positive multiple of 64 "
                       "(keeps the output view 128-byte aligned)")
    return GreenSettings(
        seeds=seeds,
        multiplier=float(tol.get("multiplier", 2.0)),
        floors=floors,
        dtypes=dtypes,
        gate_dtypes=_check_dtypes(d.get("gate_dtypes", dtypes), str(suite.path)),
        guard_elements=guard,
        float64_below=int(d.get("float64_below", 1 << 22)),
    )


def green_cases(dtypes: Sequence[str] | None = None, path: Path | None = None) -> list[Shape]:
    """Every GREEN shape x causal mode, for ``dtypes`` (default: the suite's own list)."""
    suite = _load("green.toml", path)
    dts = _check_dtypes(dtypes if dtypes is not None else suite.data.get("dtypes", DTYPES),
                        "green_cases")
    names = [n for n, _ in suite.cases]
    return _shapes(suite, names, {n: suite.causal for n in names}, dts)


def fast_cases(select: Sequence[str] | None = None, dtype: str | None = None,
               path: Path | None = None) -> list[Shape]:
    """FAST shapes, all or ``select``ed (``F1``, ``F3c``, ``F3f``, ``F1-F4``; commas allowed)."""
    suite = _load("fast.toml", path)
    (dt,) = _check_dtypes([dtype or suite.data.get("dtype", "fp16")], "fast_cases")
    names = [n for n, _ in suite.cases]
    if select is None:
        return _shapes(suite, names, {n: suite.causal for n in names}, [dt])
    modes: dict[str, set[bool]] = {}
    for item in (t.strip() for s in select for t in s.split(",")):
        if not item:
            continue
        chosen, mode = _parse_one(item, names, suite.path)
        for n in chosen:
            modes.setdefault(n, set()).update(mode)
    if not modes:
        raise EvoError(f"empty FAST selection; cases: {', '.join(names)}")
    picked = [n for n in names if n in modes]
    return _shapes(suite, picked, {n: tuple(modes[n]) for n in picked}, [dt])


def _parse_one(item: str, names: list[str], where: Path) -> tuple[list[str], tuple[bool, ...]]:
    m = _SELECT.match(item)
    if m:
        first, last, mode = m["first"], m["last"] or m["first"], m["mode"]
        if first in names and last in names:
            i, j = names.index(first), names.index(last)
            if i <= j:
                modes = {"c": (True,), "f": (False,), None: (False, True)}[mode]
                return names[i:j + 1], modes
            raise EvoError(f"FAST range {item!r} runs backwards; cases in order: {', '.join(names)}")
    raise EvoError(f"unknown FAST case {item!r} (in {where.name}); cases: {', '.join(names)}; "
                   f"use NAME, NAMEc (causal only), NAMEf (full only) or FIRST-LAST")
