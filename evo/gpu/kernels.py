"""Load a built candidate's kernels by its artifact: a cubin or a rendered Triton module.

The two loaders (:class:`evo.gpu.runtime.CandidateKernels`, :class:`evo.gpu.pykernels.ModuleKernels`)
share one interface (``launch``, ``__call__``, ``supports``); GREEN and FAST take whichever this picks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evo.family.render import Entry
from evo.gpu.pykernels import ModuleKernels
from evo.gpu.runtime import CandidateKernels


def load_kernels(artifact: str | Path, entries: Sequence[Entry], device: int = 0) -> Any:
    """The launchable kernels of a built candidate, by its artifact (:mod:`evo.family.backends`): a cubin
    (:class:`CandidateKernels`) or a Python module (:class:`evo.gpu.pykernels.ModuleKernels`)."""
    if Path(artifact).suffix == ".py":
        return ModuleKernels(artifact, entries, device)
    return CandidateKernels(artifact, entries, device)
