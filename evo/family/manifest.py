"""Kernel families: a folder with ``manifest.toml`` (the parameter space) and Jinja2 sources.

A manifest declares each parameter's domain and default, the constraints between
parameters, the supported head dims / dtypes / arches, the nvcc flags, and the launch
formulas (threads per CTA, query rows per CTA, dynamic shared memory as a function of the
head dim ``D``). Everything the rest of evo needs to know about a family is read from here,
so adding a family or a feature flag is a manifest edit plus template code.

``[family]`` may also name the ``backend`` (``cuda``, the default: the template renders CUDA
for nvcc; ``triton``: it renders a Python module, see :mod:`evo.family.backends`), the
``successors`` a candidate may switch to in a search (the evolutionary sampler's switch-family
mutation, which keeps the genes both families share), ``search_default = false`` for a
family that `evo run` searches only when ``--families`` names it (the seed families), and the
families it is ``superseded_by``: where one of those is searched by default on the run's arch,
this one is not (:func:`default_families`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from evo import paths
from evo.errors import EvoError
from evo.family.expr import evaluate, names_in
from evo.vocab import KERNEL_BACKENDS, value_text

Value = int | str | bool
LAUNCH_FORMULAS = ("threads", "rows_per_cta", "smem_bytes")  # [launch] entries every manifest gives
SPLIT_FORMULAS = ("key_tile", "split_min", "waves")  # and those of abi = "split_kv" (docs/kernel-abi.md)
SPLIT_OPTIONAL = {"ragged_splits": "1"}              # split_kv formulas a family may leave out, and their default
CACHE_LAYOUTS = ("lens", "paged")  # [launch] layouts: the entries a split_kv family also exports (NAME_lens, ...)
LAUNCH_ABIS = ("ptr", "tma", "split_kv")


@dataclass(frozen=True)
class Param:
    """One gene: a name, its finite ordered domain, its default, and whether it is a feature flag."""

    name: str
    values: tuple[Value, ...]
    default: Value
    kind: str = "tile"  # "tile" (sizes, warps, stages) or "feature" (on/off or variant switches)
    doc: str = ""
    # False for a gene added to a family that already has stored candidates: the rendered source's
    # header names it only where it differs from its default, so that (with a template that renders
    # the old text at the default) every stored candidate keeps its source, its id and its measurements.
    keyed_at_default: bool = True
    # Which kernels read the gene: an expression over a kernel's head dim D, its dtype and causal
    # ("" for every kernel). A kernel that does not read a gene compiles to the same machine code
    # whatever its value, so a search of other kernels leaves it alone (evo.search.sampler_evo).
    reads: str = ""

    def parse(self, text: str) -> Value:
        """Turn CLI text into a domain value, or raise naming what is allowed."""
        for v in self.values:
            if value_text(v).lower() == text.strip().lower():
                return v
        raise EvoError(f"parameter {self.name}={text!r} is not allowed; allowed: {self.allowed()}")

    def allowed(self) -> str:
        return ", ".join(value_text(v) for v in self.values)


@dataclass(frozen=True)
class Constraint:
    """A manifest's ``[[constraints]]`` entry: a boolean expression over the parameters, and the
    message a candidate that violates it is ``invalid`` with."""

    expr: str
    message: str


@dataclass(frozen=True)
class Family:
    """A parsed manifest."""

    name: str
    version: int
    description: str
    path: Path
    template: str
    params: dict[str, Param]
    constraints: tuple[Constraint, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    arches: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    launch: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    backend: str = "cuda"                 # "cuda": nvcc -> cubin; "triton": a Python module (evo/family/backends.py)
    successors: tuple[str, ...] = ()      # families a candidate may switch to (the switch-family mutation)
    search_default: bool = True           # searched by `evo run` when --families is not given
    superseded_by: tuple[str, ...] = ()   # default families that, where they build, leave this one out of the default

    def defaults(self) -> dict[str, Value]:
        return {n: p.default for n, p in self.params.items()}

    def read_by(self, gene: str, kernels: Collection[tuple[int, str, bool]]) -> bool:
        """Whether any of ``kernels`` (head dim, dtype, causal) reads ``gene``: its ``reads``
        expression (none: every kernel reads it)."""
        reads = self.params[gene].reads
        return not reads or any(bool(evaluate(reads, {"D": d, "dtype": dt, "causal": c})) for d, dt, c in kernels)


def _param(name: str, spec: dict[str, Any], where: Path) -> Param:
    values = tuple(spec.get("values", ()))
    if not values:
        raise EvoError(f"{where}: parameter {name} has no values")
    default = spec.get("default", values[0])
    if default not in values:
        raise EvoError(f"{where}: default of {name} ({default!r}) is not in its values")
    return Param(name, values, default, spec.get("kind", "tile"), spec.get("doc", ""),
                 bool(spec.get("keyed_at_default", True)), spec.get("reads", ""))


def load_family_dir(folder: Path) -> Family:
    """Parse ``folder/manifest.toml`` into a Family; EvoError, one line naming the file, when it
    cannot be read or used (a missing or malformed entry, a constraint or launch formula that
    does not parse or reads a name it cannot have)."""
    mf = folder / "manifest.toml"
    try:
        data = tomllib.loads(mf.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise EvoError(f"cannot read manifest {mf}: {exc}") from None
    try:
        fam = _parse(folder, mf, data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EvoError(f"{mf}: malformed manifest ({type(exc).__name__}: {exc})") from None
    _check_expressions(fam, mf)
    return fam


def _parse(folder: Path, mf: Path, data: dict[str, Any]) -> Family:
    """The Family a manifest's TOML describes (EvoError for what a manifest must hold; a wrong
    type surfaces as the KeyError, TypeError, ValueError or AttributeError it raises here)."""
    fam = data.get("family", {})
    missing = [k for k in ("name", "version", "template") if k not in fam]
    if missing:
        raise EvoError(f"{mf}: [family] lacks {', '.join(missing)}")
    launch = data.get("launch", {})
    for key in LAUNCH_FORMULAS:
        if key not in launch:
            raise EvoError(f"{mf}: [launch] lacks {key}")
    backend = fam.get("backend", "cuda")
    if backend not in KERNEL_BACKENDS:
        raise EvoError(f"{mf}: [family] backend = {backend!r}; known: {', '.join(KERNEL_BACKENDS)}")
    abi = launch.get("abi", "ptr")
    if abi not in LAUNCH_ABIS:
        raise EvoError(f"{mf}: [launch] abi = {abi!r}; known: {', '.join(LAUNCH_ABIS)}")
    if abi == "split_kv" and any(key not in launch for key in SPLIT_FORMULAS):
        raise EvoError(f"{mf}: [launch] abi = 'split_kv' needs {', '.join(SPLIT_FORMULAS)}")
    _check_layouts(launch.get("layouts", []), abi, mf)
    if abi == "tma" and sorted(launch.get("tma_rows", {})) != ["k", "o", "q", "v"]:
        raise EvoError(f"{mf}: [launch] abi = 'tma' needs tma_rows = {{ q, k, v, o }} (box rows)")
    if "tile_counter" in launch and abi != "tma":
        raise EvoError(f"{mf}: [launch] tile_counter is an argument of TMA kernels only (abi = 'tma'; "
                       "docs/kernel-abi.md, 'The TMA variant')")
    return Family(
        name=fam["name"],
        version=int(fam["version"]),
        description=fam.get("description", ""),
        path=folder,
        template=fam["template"],
        params={n: _param(n, s, mf) for n, s in data.get("params", {}).items()},
        constraints=tuple(Constraint(c["expr"], c.get("message", c["expr"]))
                          for c in data.get("constraints", [])),
        head_dims=tuple(fam.get("head_dims", (64, 128))),
        dtypes=tuple(fam.get("dtypes", ("fp16", "bf16"))),
        arches=tuple(fam.get("arches", ("sm_80", "sm_90a"))),
        nvcc_flags=tuple(fam.get("nvcc_flags", ())),
        launch=dict(data["launch"]),
        extra={k: v for k, v in data.items() if k not in ("family", "params", "constraints", "launch")},
        backend=backend,
        successors=_names(fam, "successors", mf),
        search_default=bool(fam.get("search_default", True)),
        superseded_by=_names(fam, "superseded_by", mf),
    )


def _names(fam: dict[str, Any], key: str, mf: Path) -> tuple[str, ...]:
    """``[family] key``: a list of other families' names (EvoError otherwise)."""
    names = fam.get(key, [])
    if not (isinstance(names, list) and all(isinstance(x, str) and x for x in names)) or fam["name"] in names:
        raise EvoError(f"{mf}: [family] {key} must be a list of other families' names")
    return tuple(names)


def _check_layouts(layouts: Any, abi: str, mf: Path) -> None:
    """``[launch] layouts``: distinct cache layouts of :data:`CACHE_LAYOUTS`, of a split_kv family only
    (its entries then also export NAME_lens, NAME_paged: docs/kernel-abi.md, "Ragged and paged caches")."""
    if not (isinstance(layouts, list) and set(layouts) <= set(CACHE_LAYOUTS) and len(set(layouts)) == len(layouts)) \
            or (layouts and abi != "split_kv"):
        raise EvoError(f"{mf}: [launch] layouts must list distinct cache layouts of {', '.join(CACHE_LAYOUTS)}, "
                       "and only a split_kv family has them (docs/kernel-abi.md, 'Ragged and paged caches')")


def _check_expressions(fam: Family, mf: Path) -> None:
    """Every constraint parses and reads only parameters; every launch formula parses and reads
    only parameters and the head dim ``D`` (what :mod:`evo.family.space` binds); a gene's ``reads``
    only a kernel's ``D``, ``dtype`` and ``causal``."""
    allowed = set(fam.params) | {"min", "max"}
    formulas = [(f"[launch] {k}", fam.launch[k])
                for k in (*LAUNCH_FORMULAS, *SPLIT_FORMULAS, *SPLIT_OPTIONAL, "tile_counter") if k in fam.launch]
    formulas += [(f"[launch] tma_rows.{k}", v) for k, v in fam.launch.get("tma_rows", {}).items()]
    kernel = {"D", "dtype", "causal"}
    checks = [("constraint", c.expr, allowed, "a parameter") for c in fam.constraints]
    checks += [(what, text, allowed | {"D"}, "a parameter") for what, text in formulas]
    checks += [(f"[params.{n}] reads", p.reads, kernel, "D, dtype or causal") for n, p in fam.params.items() if p.reads]
    for what, text, names, noun in checks:
        if not isinstance(text, str):
            raise EvoError(f"{mf}: {what} must be an expression in a string, not {text!r}")
        try:
            unknown = sorted(names_in(text) - names)
        except EvoError as exc:
            raise EvoError(f"{mf}: {what}: {exc}") from None
        if unknown:
            raise EvoError(f"{mf}: {what} {text!r} reads {unknown[0]!r}, which is not {noun}")


@cache
def _load_cached(folder: str, mtime: float) -> Family:
    return load_family_dir(Path(folder))


def list_families() -> list[str]:
    """Names of all families found on the template path (folders with a manifest)."""
    names: list[str] = []
    for d in paths.template_dirs():
        if d.is_dir():
            names += [p.name for p in sorted(d.iterdir()) if (p / "manifest.toml").is_file()]
    return sorted(set(names))


def default_families(arch: str) -> list[str]:
    """The families `evo run` searches on ``arch`` when ``--families`` names none: those whose
    manifest says ``search_default`` and that build for ``arch``, less each one that a family
    among them supersedes (``superseded_by``). flash_mma is superseded by flash_wgmma: on an H200
    its best of 332 measured points (``data/sweep-h200.json.gz``) reads x0.79 against SDPA's default,
    flash_wgmma's default x1.05, so in a default search on sm_90a its screens were 37 s of 523 GPU
    seconds and never led a bucket (dev/perf-notes.md, 2026-11-28 l); on sm_80, where flash_wgmma
    does not build, it is the family searched."""
    fams = {n: load_family(n) for n in list_families()}
    chosen = {n for n, f in fams.items() if f.search_default and arch in f.arches}
    return sorted(n for n in chosen if not chosen.intersection(fams[n].superseded_by))


def family_dirs(name: str) -> list[Path]:
    """Every folder on the template path (:func:`evo.paths.template_dirs`) that holds a family
    called ``name``, in priority order: the first is the one used, the others are shadowed."""
    return [d / name for d in paths.template_dirs() if (d / name / "manifest.toml").is_file()]


def load_family(name: str) -> Family:
    """Find and parse the family called ``name``; unknown names list the known ones. A copy
    that the first one shadows (a folder of the same name further along the template path) is
    parsed too: a broken one is an error naming it, never silently passed over."""
    found = family_dirs(name)
    if not found:
        known = ", ".join(list_families()) or "none"
        raise EvoError(f"unknown family {name!r}; known families: {known}")
    for shadowed in found[1:]:
        try:
            _load(shadowed)
        except EvoError as exc:
            raise EvoError(f"{exc} (this copy of family {name!r} is shadowed by {found[0]}, which is used "
                           "instead: fix it, or remove or rename it)") from None
    return _load(found[0])


def _load(folder: Path) -> Family:
    return _load_cached(str(folder), (folder / "manifest.toml").stat().st_mtime)
