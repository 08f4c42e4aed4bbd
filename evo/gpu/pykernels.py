"""Load a Triton-backend candidate (a rendered Python module) and launch it like a cubin.

The module (:mod:`evo.family.backends`, backend ``triton``) defines
``launch(q, k, v, o, causal, scale, shift)`` (kernel ABI v2, docs/kernel-abi.md: q and o
``(B, Hq, Lq, D)``, k and v ``(B, Hkv, Lk, D)``, causal key ``j <= i + shift``);
:class:`ModuleKernels` gives it the interface of
:class:`evo.gpu.runtime.CandidateKernels` (``launch``, ``__call__``, ``supports``), so GREEN and
FAST run it unchanged: same tensor checks, same entries (head dim x dtype x causal) from the
renderer. Triton compiles a kernel the first time it is launched for a new specialization, so
the first GREEN launch of each entry pays for compiling; Triton's own cache (keyed by the source)
makes the next worker's load free. A kernel Triton cannot fit on the device (shared memory or
registers) is :class:`~evo.errors.LaunchRejected`, as a cubin's over-limit launch is.

Tests run the same modules on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from evo.errors import EvoError, LaunchRejected
from evo.family.render import Entry
from evo.gpu.runtime import DTYPE_NAMES, check_tensors

# Triton raises these (by class name, so this module needs no triton import) before any
# kernel runs when a compiled kernel does not fit the device.
REFUSALS = ("OutOfResources",)
LAUNCH = "launch(q, k, v, o, causal, scale, shift)"   # the module ABI (v2)


def launch_problem(launch: Any) -> str:
    """Why ``launch`` cannot be called as the module ABI's ``launch(q, k, v, o, causal, scale,
    shift)`` ("" when it can): e.g. a module of the first ABI, without ``shift``."""
    try:
        inspect.signature(launch).bind(*range(7))
    except TypeError as exc:
        return f"its launch{_signature(launch)} cannot be called as {LAUNCH} ({exc})"
    except ValueError:      # no signature to inspect (a builtin): let the call tell
        return ""
    return ""


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def import_module(path: str | Path) -> ModuleType:
    """Import the module at ``path`` under a name unique to its content (two candidates never
    share module state; the same file imported twice is the same module)."""
    path = Path(path)
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise EvoError(f"cannot read candidate module {path}: {exc}") from None
    name = f"evo_candidate_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EvoError(f"cannot import candidate module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # Triton's JIT looks functions' globals up through their module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    if not callable(getattr(module, "launch", None)):
        del sys.modules[name]
        raise EvoError(f"{path.name} defines no {LAUNCH}")
    if problem := launch_problem(module.launch):
        del sys.modules[name]
        raise EvoError(f"{path.name}: {problem}")
    return module


class ModuleKernels:
    """The kernels of one Triton-backend candidate, ready to launch on one device."""

    def __init__(self, module_path: str | Path, entries: Sequence[Entry], device: int | str = 0) -> None:
        if not entries:
            raise EvoError(f"{Path(module_path).name}: no kernel entries to load")
        self.entries = tuple(entries)
        self.device = device
        self._torch_device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        self.module = import_module(module_path)
        self._keys = {(e.head_dim, e.dtype, e.causal) for e in self.entries}

    def supports(self, q: torch.Tensor, causal: bool) -> bool:
        """Whether an entry exists for ``q``'s head dim and dtype in this causal mode."""
        return (q.shape[-1], DTYPE_NAMES.get(q.dtype), causal) in self._keys

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, *,
               causal: bool, scale: float | None = None, shift: int = 0) -> None:
        """o = softmax(scale * q k^T [causal: key j <= query i + shift]) v for contiguous q, o
        (B, Hq, Lq, D) and k, v (B, Hkv, Lk, D); full (non-causal) launches ignore ``shift``."""
        check_tensors(q, k, v, o, self._torch_device)
        if not self.supports(q, causal):
            have = ", ".join(e.name for e in self.entries)
            raise EvoError(f"no kernel for D={q.shape[-1]} {DTYPE_NAMES[q.dtype]} "
                           f"{'causal' if causal else 'full'}; have {have}")
        s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        try:
            self.module.launch(q, k, v, o, causal, s, int(shift) if causal else 0)
        except Exception as exc:
            if type(exc).__name__ in REFUSALS:
                raise LaunchRejected(f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
            raise

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 causal: bool, scale: float, shift: int = 0) -> None:
        """The gate's and timer's launch signature: ``launch(q, k, v, o, causal, scale, shift)``."""
        self.launch(q, k, v, o, causal=causal, scale=scale, shift=shift)

    def kernel_attributes(self) -> dict[str, dict[str, Any]]:
        """Nothing before Triton has compiled (a cubin's driver attributes have no equivalent)."""
        return {}
