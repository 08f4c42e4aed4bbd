"""Render a candidate to CUDA source: Jinja2 with StrictUndefined, deterministic, hashed.

The template gets the candidate's parameters as top-level names, plus ``family``,
``family_version`` and ``entries``: one record per exported kernel (head dim x dtype x
causal), each with its ``extern "C"`` name and launch config. Same family + params + family
version + evo render version -> byte-identical source -> the same ``source_hash``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache

import jinja2

from evo import paths
from evo.errors import EvoError
from evo.manifest import Family, load_family
from evo.space import Candidate, LaunchConfig, launch_config, make_candidate

RENDER_VERSION = 1
CTYPES = {"fp16": "__half", "bf16": "__nv_bfloat16"}


@dataclass(frozen=True)
class Entry:
    """One exported kernel of a candidate: ``evo_attn_d{D}_{dtype}_{causal|full}``."""

    name: str
    head_dim: int
    dtype: str
    causal: bool
    launch: LaunchConfig


def entry_name(head_dim: int, dtype: str, causal: bool) -> str:
    return f"evo_attn_d{head_dim}_{dtype}_{'causal' if causal else 'full'}"


@dataclass(frozen=True)
class Rendered:
    candidate: Candidate
    family_version: int
    source: str
    source_hash: str
    entries: tuple[Entry, ...]

    def entry(self, head_dim: int, dtype: str, causal: bool) -> Entry:
        name = entry_name(head_dim, dtype, causal)
        for e in self.entries:
            if e.name == name:
                return e
        raise EvoError(f"{self.candidate.family} has no kernel for D={head_dim} {dtype}")


def build_id(source_hash: str, flags: tuple[str, ...], arch: str) -> str:
    """Identity of a built kernel: rendered source + compile flags + arch (DESIGN.md, Storage)."""
    blob = "\0".join([source_hash, arch, *flags])
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


def entries_for(family: Family, cand: Candidate) -> tuple[Entry, ...]:
    return tuple(
        Entry(entry_name(d, dt, c), d, dt, c, launch_config(family, cand, d))
        for d in family.head_dims for dt in family.dtypes for c in (False, True)
    )


def render(cand: Candidate, family: Family | None = None) -> Rendered:
    """Render ``cand`` (re-validated first) to source; template errors become EvoError."""
    fam = family or load_family(cand.family)
    cand = make_candidate(fam, cand.p)
    entries = entries_for(fam, cand)
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
    header = (f"// evo family={fam.name} version={fam.version} render={RENDER_VERSION}\n"
              f"// params: {cand.key()}\n")
    source = header + body
    return Rendered(cand, fam.version, source, hashlib.sha256(source.encode()).hexdigest(), entries)
