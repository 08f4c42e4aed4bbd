"""Load a built candidate's kernels by its artifact: a cubin or a rendered Triton module.

The two loaders (:class:`evo.gpu.runtime.CandidateKernels`, :class:`evo.gpu.pykernels.ModuleKernels`)
share one interface (``launch``, ``__call__``, ``supports``); GREEN and FAST take whichever this picks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evo.errors import EvoError
from evo.family.render import Entry
from evo.gpu.pykernels import ModuleKernels
from evo.gpu.runtime import CandidateKernels


def load_kernels(artifact: str | Path, entries: Sequence[Entry], device: int | str = 0) -> Any:
    """The launchable kernels of a built candidate, by its artifact (:mod:`evo.family.backends`): a cubin
    (:class:`CandidateKernels`, on CUDA device ``device``) or a Python module
    (:class:`evo.gpu.pykernels.ModuleKernels`, which also takes ``"cpu"``)."""
    if Path(artifact).suffix == ".py":
        return ModuleKernels(artifact, entries, device)
    if not isinstance(device, int):
        raise EvoError(f"a cubin's kernels run on a CUDA device index, not {device!r}")
    return CandidateKernels(artifact, entries, device)
