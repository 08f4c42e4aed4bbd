"""Render a candidate to CUDA source: Jinja2 with StrictUndefined, deterministic, hashed.

The template gets the candidate's parameters as top-level names, plus ``family``,
``family_version`` and ``entries``: one record per exported kernel (head dim x dtype x
causal), each with its ``extern "C"`` name and launch config. Same family + params + family
version + evo render version (+ kernel subset) -> byte-identical source -> the same ``source_hash``.

A search needs only the kernels its FAST cases run: ``render(..., kernels=)`` exports only
those (head dim, dtype, causal) keys, so nvcc compiles a quarter of flash_wgmma's 16 kernels for
the default suite (11.9 s -> 3.2 s on this machine's nvcc 13.0, sm_90a). The subset is part of
the source, and so of the candidate's id: the same parameters with another subset are another
build. ``None`` (every command but a search) exports every kernel, as before subsets existed.

A build's identity (:func:`build_key`, hashed by :func:`build_id`) is more than the source: it
also covers the flags, the arch, every entry's evaluated launch config (which the cubin is
resource-checked and launched with, but which need not appear in the source), the compiler
and the headers the source includes from outside the toolkit (docs/design.md, Trust).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import jinja2

from evo import paths
from evo.family.backends import backend
from evo.errors import EvoError
from evo.family.manifest import Family, load_family
from evo.family.space import Candidate, LaunchConfig, launch_config, make_candidate

RENDER_VERSION = 1
# 1: sha256 of source hash + arch + flags (launch configs, compiler and headers were not keyed).
# 2: canonical JSON of build_key. Bump when evo changes how a key's inputs become a cubin.
BUILD_KEY_VERSION = 2
CTYPES = {"fp16": "__half", "bf16": "__nv_bfloat16"}


@dataclass(frozen=True)
class Entry:
    """One exported kernel of a candidate: ``evo_attn_d{D}_{dtype}_{causal|full}``."""

    name: str
    head_dim: int
    dtype: str
    causal: bool
    launch: LaunchConfig

    @property
    def names(self) -> tuple[str, ...]:
        """Every kernel this entry exports: its own and one per cache layout of its launch
        (``NAME_lens``, ``NAME_paged``: docs/kernel-abi.md, "Ragged and paged caches")."""
        return (self.name, *(layout_name(self.name, x) for x in self.launch.layouts))


def layout_name(name: str, layout: str) -> str:
    """The kernel of entry ``name`` for a cache ``layout`` (``contiguous``: the entry itself)."""
    return name if layout == "contiguous" else f"{name}_{layout}"


def entry_name(head_dim: int, dtype: str, causal: bool) -> str:
    return f"evo_attn_d{head_dim}_{dtype}_{'causal' if causal else 'full'}"


@dataclass(frozen=True)
class Rendered:
    """A candidate rendered to source: the source, its hash and the kernel entries it exports."""

    candidate: Candidate
    family_version: int
    source: str
    source_hash: str
    entries: tuple[Entry, ...]

    @property
    def body(self) -> str:
        """The source below the two comment lines :func:`render` writes first (family, version and
        params): what the compiler turns into code. Candidates that differ only in genes the code
        never reads (a launch-only gene such as a split-KV family's SPLIT_MIN) have the same body."""
        return self.source.split("\n", 2)[2]

    def entry(self, head_dim: int, dtype: str, causal: bool) -> Entry:
        name = entry_name(head_dim, dtype, causal)
        for e in self.entries:
            if e.name == name:
                return e
        raise EvoError(f"{self.candidate.family} has no kernel for D={head_dim} {dtype}")


def build_key(rendered: Rendered, flags: tuple[str, ...], arch: str, compiler: str,
              headers: Mapping[str, str]) -> dict[str, Any]:
    """Everything that determines the cubin of ``rendered`` and how it is launched, as plain JSON.

    ``entries`` is every Entry as :func:`dataclasses.asdict` gives it, so a field added to
    :class:`~evo.family.space.LaunchConfig` is keyed without touching this function. ``compiler``
    names the nvcc (version and build), ``headers`` maps each included header root or file
    outside the toolkit to its version or content hash (:mod:`evo.family.headers`).
    """
    return {"version": BUILD_KEY_VERSION, "source_hash": rendered.source_hash, "flags": list(flags),
            "arch": arch, "entries": [_entry_key(e) for e in rendered.entries], "compiler": compiler,
            "headers": dict(headers)}


def _entry_key(entry: Entry) -> dict[str, Any]:
    """``entry`` as :func:`dataclasses.asdict` gives it, less a launch's ``split`` and ``layouts``
    where it has none (only split-KV families have them) and its ``tile_counter`` where it is False
    (only some TMA kernels take one): the keys of every other build stay as they were."""
    key = asdict(entry)
    if key["launch"]["split"] is None:
        del key["launch"]["split"]
    if not key["launch"]["layouts"]:
        del key["launch"]["layouts"]
    if not key["launch"]["tile_counter"]:
        del key["launch"]["tile_counter"]
    return key


def build_id(key: Mapping[str, Any]) -> str:
    """Identity of a built kernel (= candidate id): sha256 of the key's canonical JSON."""
    blob = json.dumps(key, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


@cache
def _env(search: tuple[str, ...]) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(search)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


Kernel = tuple[int, str, bool]   # a kernel entry's key: (head dim, dtype, causal)


def family_kernels(family: Family) -> list[Kernel]:
    """Every (head dim, dtype, causal) key of ``family``, in the order its entries are exported."""
    return [(d, dt, c) for d in family.head_dims for dt in family.dtypes for c in (False, True)]


def entries_for(family: Family, cand: Candidate, kernels: Collection[Kernel] | None = None) -> tuple[Entry, ...]:
    """The entries ``cand`` exports: every (head dim, dtype, causal) of ``family``, or those of
    them in ``kernels`` (all of them when ``kernels`` names none of the family's)."""
    keys = family_kernels(family)
    chosen = [k for k in keys if kernels is None or k in kernels] or keys
    return tuple(Entry(entry_name(d, dt, c), d, dt, c, launch_config(family, cand, d)) for d, dt, c in chosen)


def subset(family: Family, entries: Iterable[Entry]) -> list[list[Any]] | None:
    """``entries``' keys as the store keeps them (sorted [head dim, dtype, causal] lists), or None
    when they are all of ``family``'s kernels."""
    keys = {(e.head_dim, e.dtype, e.causal) for e in entries}
    return None if keys >= set(family_kernels(family)) else [list(k) for k in sorted(keys)]


def render(cand: Candidate, family: Family | None = None, kernels: Collection[Kernel] | None = None) -> Rendered:
    """Render ``cand`` (re-validated first) to source, exporting ``kernels`` only when given
    (module docstring); template errors become EvoError."""
    fam = family or load_family(cand.family)
    cand = make_candidate(fam, cand.p)
    entries = entries_for(fam, cand, kernels)
    search = (str(fam.path), *(str(d) for d in paths.template_dirs()))
    context = cand.p | {
        "family": fam.name,
        "family_version": fam.version,
        "render_version": RENDER_VERSION,
        "params": cand.p,
        "entries": [e.__dict__ | {"ctype": CTYPES[e.dtype], "launch": e.launch} for e in entries],
        "ctypes": CTYPES,
    }
    try:
        body = _env(search).get_template(fam.template).render(context)
    except jinja2.TemplateError as exc:
        raise EvoError(f"template error in {fam.name}/{fam.template}: {exc}") from None
    c = backend(fam.backend).comment   # "//" for CUDA, "#" for a Python module
    unkeyed = {n for n, spec in fam.params.items() if not spec.keyed_at_default and cand.p[n] == spec.default}
    header = (f"{c} evo family={fam.name} version={fam.version} render={RENDER_VERSION}\n"
              f"{c} params: {cand.key(omit=unkeyed)}\n")
    source = header + body
    return Rendered(cand, fam.version, source, hashlib.sha256(source.encode()).hexdigest(), entries)
