"""Backends: how a family's rendered source becomes the artifact a GPU worker loads.

A family's manifest names its backend (``[family] backend``, default ``cuda``):

- ``cuda``: the template renders CUDA C++; nvcc compiles it to a cubin (:mod:`evo.toolchain.build`),
  :class:`evo.gpu.runtime.CandidateKernels` loads it with cuda-python.
- ``triton``: the template renders a Python module that defines
  ``launch(q, k, v, o, causal, scale, shift)`` (Triton kernels, and torch calls where a family wants
  them, e.g. cuBLAS GEMMs). "Building" checks that it parses and caches it under its build id
  like a cubin; Triton compiles each kernel on first use in the worker and keeps its own
  on-disk cache keyed by the source. :class:`evo.gpu.pykernels.ModuleKernels` loads it.

Everything else (render, GREEN, FAST, store, search) is the same for both: a candidate is a
rendered source with entries, a build id and an artifact path.
"""

from __future__ import annotations

import ast
import importlib.metadata
from dataclasses import dataclass

from evo.errors import EvoError


@dataclass(frozen=True)
class Backend:
    """What differs between backends, as data: the artifact's file name in the build cache and
    the line-comment prefix of the rendered source's header."""

    name: str
    artifact: str
    comment: str


BACKENDS = {
    "cuda": Backend("cuda", "kernel.cubin", "//"),
    "triton": Backend("triton", "kernel.py", "#"),
}


def backend(name: str) -> Backend:
    """The backend called ``name`` (a manifest has been validated against these names)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise EvoError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


def triton_identity() -> str:
    """The compiler a Triton build id names: the installed triton (and torch, whose cuBLAS a
    module may call) versions; "not installed" still gives a stable key on a machine without it."""
    parts = []
    for dist in ("triton", "torch"):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return "; ".join(parts)


def module_problem(source: str, filename: str = "kernel.py") -> str:
    """Why a rendered Python module cannot be loaded ("" when it parses and defines ``launch``
    at top level)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        return f"python: {filename}:{exc.lineno}: {exc.msg}"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "launch" for n in tree.body):
        return f"python: {filename} defines no top-level launch(q, k, v, o, causal, scale, shift)"
    return ""
