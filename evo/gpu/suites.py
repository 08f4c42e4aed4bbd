"""The acceptance suites as data: GREEN cases + gate settings, and FAST cases with selection.

``acceptance/green.toml`` and ``acceptance/fast.toml`` are the single source of the shapes,
causal modes, dtypes, seeds, tolerances and GREEN's draw ranges; this module turns them into
:class:`Shape` lists, a :class:`GreenSettings` and the drawn :class:`GreenCase` s of one
evaluation (:mod:`evo.gpu.draws`), and parses FAST selections such as ``F1``, ``F3c`` (causal
only), ``F3f`` (full only) and ``F1-F4`` (a range in suite order), each optionally in another
dtype than the suite's (``F6-bf16``, ``F6c-bf16``, ``F6-F7-bf16``: the case tags' own spelling).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evo import paths
from evo.errors import EvoError
from evo.results import Shape

DTYPES = ("fp16", "bf16")
_SELECT = re.compile(r"^(?P<first>[^-\s]+?)(?:-(?P<last>[^-\s]+?))?(?P<mode>[cf])?$")
_IN_DTYPE = re.compile(rf"^(?P<select>.+)-(?P<dtype>{'|'.join(DTYPES)})$")


DRAW_KINDS = ("one", "short", "edge", "odd", "long", "spiked", "long_spiked", "wide",
              "flat", "mixed", "heavy", "equal_keys", "placed", "many_heads")
"""The kinds of check GREEN draws (:mod:`evo.gpu.draws`). New kinds go last: a stored salt then still
draws the same cases for the kinds it had."""


@dataclass(frozen=True)
class DrawSettings:
    """The ranges GREEN draws from, per evaluation, on top of the fixed core (``[draws]``)."""

    kinds: tuple[str, ...] = DRAW_KINDS
    tile: int = 64                           # "short" lengths lie below it
    long: tuple[int, int] = (2049, 4608)     # "long" lengths
    max_heads: int = 8                       # B * H of a drawn case (long ones: 2)
    wide_heads: tuple[int, int] = (96, 192)  # B * H of a "wide" case: more tiles than a GPU has SMs
    many_heads: tuple[int, int] = (4096, 16384)  # B * H of a "many_heads" case (a serving batch), one short tile
    scale: tuple[float, float] = (0.1, 3.0)  # drawn scales, in units of 1/sqrt(D)
    std: tuple[float, float] = (1.0, 4.0)    # input standard deviations
    spike: float = 200.0                     # score size a spiked key reaches


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
    draws: DrawSettings | None = None        # None: the fixed core only

    def tolerance(self, ref_err: float, dtype: str) -> float:
        return self.multiplier * ref_err + self.floors[dtype]

    def share(self, fraction: float) -> GreenSettings:
        """These settings with every tolerance ``fraction`` as wide (multiplier and floors)."""
        return replace(self, multiplier=self.multiplier * fraction,
                       floors={d: f * fraction for d, f in self.floors.items()})


INPUTS = {  # GreenCase.inputs -> the tag its drawn case's name carries (evo.gpu.gate.make_inputs draws them)
    "normal": "",        # independent normal q, k, v
    "flat": "flat",      # queries near zero (1e-4 of std): every row's softmax almost uniform over all its keys
    "mixed": "mix",      # flat and ordinary query rows alternating within each head
    "heavy": "t3",       # Student-t (3 degrees of freedom) entries, scaled to std: rare huge values
    "equal_keys": "eqk",  # every key of a head the same row: scores tie, softmax exactly uniform
    "placed": "ofs",     # q, k, v as views into one allocation at 256-byte offsets, in reverse order
}


@dataclass(frozen=True)
class GreenCase:
    """One GREEN case: a shape and the inputs it is checked on.

    ``scale`` None is the default ``1/sqrt(D)``; q, k, v are normal with standard deviation
    ``std``; ``spike`` > 0 multiplies one key row per head by it (scores far beyond exp's
    float32 range unless the kernel subtracts the row maximum). ``seeds`` None runs every seed
    of the settings (the fixed core); a drawn case runs once.
    """

    shape: Shape
    scale: float | None = None
    std: float = 1.0
    spike: float = 0.0
    seeds: tuple[int, ...] | None = None
    inputs: str = "normal"                   # one of INPUTS: how q, k, v are drawn and placed

    def scale_for(self) -> float:
        return self.scale if self.scale is not None else self.shape.D ** -0.5


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
        draws=_draw_settings(d["draws"], suite.path) if "draws" in d else None,
        seeds=seeds,
        multiplier=float(tol.get("multiplier", 2.0)),
        floors=floors,
        dtypes=dtypes,
        gate_dtypes=_check_dtypes(d.get("gate_dtypes", dtypes), str(suite.path)),
        guard_elements=guard,
        float64_below=int(d.get("float64_below", 1 << 22)),
    )


def _pair(value: Any, key: str, where: Path) -> tuple[float, float]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(x, (int, float)) for x in value)
            and 0 < value[0] <= value[1]):
        raise EvoError(f"{where}: [draws] {key} must be [low, high] with 0 < low <= high")
    return float(value[0]), float(value[1])


def _draw_settings(d: Mapping[str, Any], where: Path) -> DrawSettings:
    """``[draws]`` of green.toml, checked: unknown kinds and impossible ranges are errors."""
    default = DrawSettings()
    kinds = tuple(str(k) for k in d.get("kinds", default.kinds))
    bad = [k for k in kinds if k not in DRAW_KINDS]
    if bad:
        raise EvoError(f"{where}: unknown [draws] kind {', '.join(bad)}; known: {', '.join(DRAW_KINDS)}")
    long = _pair(d.get("long", list(default.long)), "long", where)
    wide = _pair(d.get("wide_heads", list(default.wide_heads)), "wide_heads", where)
    many = _pair(d.get("many_heads", list(default.many_heads)), "many_heads", where)
    tile, heads = int(d.get("tile", default.tile)), int(d.get("max_heads", default.max_heads))
    if tile < 4 or heads < 2 or long[0] < 2:
        raise EvoError(f"{where}: [draws] needs tile >= 4, max_heads >= 2 and long lengths >= 2")
    return DrawSettings(kinds=kinds, tile=tile, long=(int(long[0]), int(long[1])), max_heads=heads,
                        wide_heads=(int(wide[0]), int(wide[1])), many_heads=(int(many[0]), int(many[1])),
                        scale=_pair(d.get("scale", list(default.scale)), "scale", where),
                        std=_pair(d.get("std", list(default.std)), "std", where),
                        spike=float(d.get("spike", default.spike)))


def green_cases(dtypes: Sequence[str] | None = None, path: Path | None = None) -> list[Shape]:
    """Every GREEN shape x causal mode, for ``dtypes`` (default: the suite's own list)."""
    suite = _load("green.toml", path)
    dts = _check_dtypes(dtypes if dtypes is not None else suite.data.get("dtypes", DTYPES),
                        "green_cases")
    names = [n for n, _ in suite.cases]
    return _shapes(suite, names, {n: suite.causal for n in names}, dts)


def fast_cases(select: Sequence[str] | None = None, dtype: str | None = None,
               path: Path | None = None) -> list[Shape]:
    """FAST shapes, all or ``select``ed (``F1``, ``F3c``, ``F3f``, ``F1-F4``, ``F6-bf16``; commas
    allowed), in ``dtype`` (default: the suite's) where an item names none."""
    suite = _load("fast.toml", path)
    (dt,) = _check_dtypes([dtype or suite.data.get("dtype", "fp16")], "fast_cases")
    names = [n for n, _ in suite.cases]
    if select is None:
        return _shapes(suite, names, {n: suite.causal for n in names}, [dt])
    modes: dict[str, dict[str, set[bool]]] = {}       # dtype -> case -> causal modes
    for item in (t.strip() for s in select for t in s.split(",")):
        if not item:
            continue
        m = _IN_DTYPE.match(item)
        chosen, mode = _parse_one(m["select"] if m else item, names, suite.path)
        for n in chosen:
            modes.setdefault(m["dtype"] if m else dt, {}).setdefault(n, set()).update(mode)
    if not modes:
        raise EvoError(f"empty FAST selection; cases: {', '.join(names)}")
    out: list[Shape] = []
    for d in (d for d in DTYPES if d in modes):
        picked = [n for n in names if n in modes[d]]
        out += _shapes(suite, picked, {n: tuple(modes[d][n]) for n in picked}, [d])
    return out


def fast_cases_by_tag() -> dict[str, Shape]:
    """Every FAST case of the suite in every dtype, by tag (``F4c-fp16``): what a stored tag
    (a study's settings, a trial's speedups) names."""
    return {s.tag: s for dtype in DTYPES for s in fast_cases(dtype=dtype)}


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
                   f"use NAME, NAMEc (causal only), NAMEf (full only) or FIRST-LAST, each optionally "
                   f"followed by -{' or -'.join(DTYPES)}")
