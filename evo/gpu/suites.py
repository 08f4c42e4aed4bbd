"""The acceptance suites as data: GREEN cases + gate settings, and FAST cases with selection.

``acceptance/green.toml``, ``acceptance/fast.toml`` and ``acceptance/llm.toml`` are the single
source of the shapes, causal modes, dtypes, seeds, tolerances and GREEN's draw ranges; this module
turns them into :class:`Shape` lists, a :class:`GreenSettings` and the drawn :class:`GreenCase` s of
one evaluation (:mod:`evo.gpu.draws`), and parses FAST selections such as ``F1``, ``F3c`` (causal
only), ``F3f`` (full only) and ``F1-F4`` (a range in suite order), each optionally in another
dtype than the suite's (``F6-bf16``, ``F6c-bf16``, ``F6-F7-bf16``: the case tags' own spelling).

The FAST cases come from three suites: ``fast.toml`` (multi-head self-attention, the default
selection), ``llm.toml`` (attention as language models run it: grouped key/value heads,
a query chunk against a longer key cache, cross-attention; bf16 first) and ``decode.toml`` (1-16
query rows against a long K/V cache, docs/decode.md). Their case names are
distinct, so a selection may mix them; a suite's name (``fast``, ``llm``) selects all of it.
A case's ``shape`` is ``[B, H, L, D]`` or ``[B, Hq, Hkv, Lq, Lk, D]``; it may set its own
``causal`` modes and ``align = "bottom_right"`` (the causal mask's corner), and a cache layout
(``layout = "lens"`` or ``"paged"``, ``lens = [shortest, longest]``, ``lens_seed``, ``page_size``:
sequences of their own lengths, :meth:`evo.results.Shape.seqlens`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evo import paths
from evo.errors import EvoError
from evo.vocab import DTYPES
from evo.results import ALIGNS, LAYOUTS, Shape

_SELECT = re.compile(r"^(?P<first>[^-\s]+?)(?:-(?P<last>[^-\s]+?))?(?P<mode>[cf])?$")
_IN_DTYPE = re.compile(rf"^(?P<select>.+)-(?P<dtype>{'|'.join(DTYPES)})$")


DRAW_KINDS = ("one", "short", "edge", "odd", "long", "spiked", "long_spiked", "wide",
              "flat", "mixed", "heavy", "equal_keys", "placed", "many_heads",
              "gqa", "mqa", "chunk", "q_longer", "cross", "long_kv",
              "decode", "decode_spikes", "decode_masked", "decode_lens", "decode_paged")
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
    decode_keys: tuple[int, int] = (1, 32768)  # key lengths of the decode kinds (docs/decode.md)


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
    "spikes": "2spk",    # two spiked keys per K/V head far apart: one in the first eighth, a larger one among the last 32
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


FAST_SUITES = ("fast", "llm", "decode")
"""The FAST suites (acceptance/NAME.toml); the first is the default selection."""


@dataclass(frozen=True)
class _Case:
    """One ``[[case]]``: its problem (``Shape`` fields but the dtype and causal mode) and modes."""

    name: str
    dims: dict[str, Any]                 # B, H, L, D and, where given, Hkv, Lk, align, the cache layout
    causal: tuple[bool, ...]


@dataclass(frozen=True)
class _Suite:
    path: Path
    data: dict[str, Any]
    cases: tuple[_Case, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cases]


def _dims(c: Mapping[str, Any], path: Path) -> dict[str, Any]:
    shape = c.get("shape")
    if "name" not in c or not (isinstance(shape, list) and len(shape) in (4, 6)
                               and all(isinstance(x, int) and x >= 1 for x in shape)):
        raise EvoError(f"{path}: each [[case]] needs a name and shape = [B, H, L, D] or "
                       "[B, Hq, Hkv, Lq, Lk, D] of positive ints")
    if len(shape) == 4:
        dims = dict(zip("BHLD", shape, strict=True))
    else:
        dims = dict(zip(("B", "H", "Hkv", "L", "Lk", "D"), shape, strict=True))
        if dims["H"] % dims["Hkv"]:
            raise EvoError(f"{path}: case {c['name']}: {dims['H']} query heads are not a multiple of "
                           f"{dims['Hkv']} key/value heads")
    align = c.get("align", "top_left")
    if align not in ALIGNS:
        raise EvoError(f"{path}: case {c['name']}: align must be one of {', '.join(ALIGNS)}")
    return dims | {"align": align} | _cache(c, dims, path)


def _cache(c: Mapping[str, Any], dims: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """A case's cache layout (docs/kernel-abi.md, "Ragged and paged caches"): ``layout = "lens"``
    or ``"paged"`` with ``lens = [shortest, longest]`` (the longest is the shape's Lk, the capacity),
    ``lens_seed`` and, paged, ``page_size``; nothing for a contiguous cache."""
    layout = c.get("layout", "contiguous")
    if layout == "contiguous":
        return {}
    lens, seed, page = c.get("lens"), c.get("lens_seed", 0), c.get("page_size", 0)
    if layout not in LAYOUTS or not (isinstance(lens, list) and len(lens) == 2 and all(isinstance(x, int) for x in lens)
                                     and 0 <= lens[0] <= lens[1] == dims["Lk" if "Lk" in dims else "L"]):
        raise EvoError(f"{path}: case {c['name']}: layout must be one of {', '.join(LAYOUTS)}, with "
                       "lens = [shortest, longest] and the longest the shape's key length")
    if not isinstance(seed, int) or not isinstance(page, int) or (page >= 1) != (layout == "paged"):
        raise EvoError(f"{path}: case {c['name']}: lens_seed is an int, and page_size (>= 1) is a paged cache's")
    return {"layout": layout, "lens_min": lens[0], "lens_seed": seed, "page_size": page}


def _load(name: str, path: Path | None) -> _Suite:
    path = path or paths.acceptance_dir() / name
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise EvoError(f"cannot read suite {path}: {exc}") from None
    modes = tuple(bool(c) for c in data.get("causal", [False, True]))
    cases = [_Case(str(c.get("name")), _dims(c, path), tuple(bool(x) for x in c.get("causal", modes)))
             for c in data.get("case", [])]
    if not cases:
        raise EvoError(f"{path}: no [[case]] entries")
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise EvoError(f"{path}: duplicate case names in {', '.join(names)}")
    return _Suite(path, data, tuple(cases))


def _check_dtypes(dtypes: Sequence[str], where: str) -> tuple[str, ...]:
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise EvoError(f"{where}: unknown dtype {', '.join(bad)}; known: {', '.join(DTYPES)}")
    return tuple(dtypes)


def _shapes(suite: _Suite, names: Sequence[str], modes: Mapping[str, Collection[bool]],
            dtypes: Sequence[str]) -> list[Shape]:
    """Shapes ordered by dtype, then suite order, then causal mode (full first)."""
    by_name = {c.name: c for c in suite.cases}
    return [Shape(n, causal=c, dtype=dt, **by_name[n].dims)
            for dt in dtypes for n in names for c in sorted(by_name[n].causal) if c in modes[n]]


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
    decode = _pair(d.get("decode_keys", list(default.decode_keys)), "decode_keys", where)
    tile, heads = int(d.get("tile", default.tile)), int(d.get("max_heads", default.max_heads))
    if tile < 4 or heads < 2 or long[0] < 2:
        raise EvoError(f"{where}: [draws] needs tile >= 4, max_heads >= 2 and long lengths >= 2")
    if decode[1] < 64:
        raise EvoError(f"{where}: [draws] decode_keys must reach at least 64 keys")
    return DrawSettings(kinds=kinds, tile=tile, long=(int(long[0]), int(long[1])), max_heads=heads,
                        wide_heads=(int(wide[0]), int(wide[1])), many_heads=(int(many[0]), int(many[1])),
                        scale=_pair(d.get("scale", list(default.scale)), "scale", where),
                        std=_pair(d.get("std", list(default.std)), "std", where),
                        spike=float(d.get("spike", default.spike)),
                        decode_keys=(int(decode[0]), int(decode[1])))


def green_cases(dtypes: Sequence[str] | None = None, path: Path | None = None) -> list[Shape]:
    """Every GREEN shape x causal mode, for ``dtypes`` (default: the suite's own list)."""
    suite = _load("green.toml", path)
    dts = _check_dtypes(dtypes if dtypes is not None else suite.data.get("dtypes", DTYPES),
                        "green_cases")
    return _shapes(suite, suite.names, {c.name: c.causal for c in suite.cases}, dts)


def _fast_suites(path: Path | None) -> list[tuple[str, _Suite]]:
    """(name, suite) of each FAST suite; ``path`` replaces the default one (tests), alone."""
    if path is not None:
        return [(FAST_SUITES[0], _load("", path))]
    suites = [(name, _load(f"{name}.toml", None)) for name in FAST_SUITES]
    seen: dict[str, str] = {}
    for name, suite in suites:
        for case in suite.names:
            if case in seen:
                raise EvoError(f"FAST case {case} is in both {seen[case]}.toml and {name}.toml")
            seen[case] = name
    return suites


def fast_cases(select: Sequence[str] | None = None, dtype: str | None = None,
               path: Path | None = None) -> list[Shape]:
    """FAST shapes, the default suite's or those ``select``ed (``F1``, ``F3c``, ``F3f``, ``F1-F4``,
    ``F6-bf16``, ``llm``; commas allowed), in ``dtype`` (default: each suite's own) where an item
    names none."""
    suites = _fast_suites(path)
    if dtype is not None:
        _check_dtypes([dtype], "fast_cases")
    if select is None:
        _, suite = suites[0]
        return _shapes(suite, suite.names, {c.name: c.causal for c in suite.cases},
                       [dtype or suite.data.get("dtype", "fp16")])
    modes: dict[tuple[str, str], dict[str, set[bool]]] = {}   # (suite, dtype) -> case -> causal modes
    for item in (t.strip() for s in select for t in s.split(",")):
        if not item:
            continue
        m = _IN_DTYPE.match(item)
        name, chosen, mode = _parse_one(m["select"] if m else item, suites)
        suite = dict(suites)[name]
        dt = m["dtype"] if m else dtype or suite.data.get("dtype", "fp16")
        for n in chosen:
            modes.setdefault((name, dt), {}).setdefault(n, set()).update(mode)
    if not modes:
        raise EvoError(f"empty FAST selection; cases: {', '.join(n for _, s in suites for n in s.names)}")
    out: list[Shape] = []
    for d in DTYPES:
        for name, suite in suites:
            if (name, d) in modes:
                chosen_modes = modes[(name, d)]
                picked = [n for n in suite.names if n in chosen_modes]
                out += _shapes(suite, picked, chosen_modes, [d])
    return out


def suites_of(cases: Collection[str]) -> set[str]:
    """The FAST suites that hold the cases named ``cases`` (``F4`` -> fast, ``L3`` -> llm), each
    suite read once; a name no suite has is an error."""
    by_case = {case: name for name, suite in _fast_suites(None) for case in suite.names}
    if unknown := sorted(set(cases) - by_case.keys()):
        raise EvoError(f"unknown FAST case {', '.join(map(repr, unknown))}")
    return {by_case[c] for c in cases}


def fast_cases_by_tag() -> dict[str, Shape]:
    """Every FAST case of every suite in every dtype, by tag (``F4c-fp16``): what a stored tag
    (a study's settings, a trial's speedups) names."""
    return {s.tag: s for dtype in DTYPES for s in fast_cases(list(FAST_SUITES), dtype=dtype)}


def _parse_one(item: str, suites: Sequence[tuple[str, _Suite]]) -> tuple[str, list[str], tuple[bool, ...]]:
    """(suite, case names, causal modes) that one selection item names."""
    for name, suite in suites:
        if item == name:
            return name, suite.names, (False, True)
    m = _SELECT.match(item)
    for name, suite in suites:
        names = suite.names
        if m and m["first"] in names and (m["last"] or m["first"]) in names:
            i, j = names.index(m["first"]), names.index(m["last"] or m["first"])
            if i <= j:
                return name, names[i:j + 1], {"c": (True,), "f": (False,), None: (False, True)}[m["mode"]]
            raise EvoError(f"FAST range {item!r} runs backwards; cases in order: {', '.join(names)}")
    every = "; ".join(f"{name}: {', '.join(s.names)}" for name, s in suites)
    raise EvoError(f"unknown FAST case {item!r}; cases ({every}); use NAME, NAMEc (causal only), NAMEf "
                   f"(full only), FIRST-LAST or a suite's name, each optionally followed by "
                   f"-{' or -'.join(DTYPES)}")
