"""The expected outputs of FAST's timed-output checks, computed once per case in a worker.

Why: a long case's check recomputes its reference (SDPA's math backend in float32 over every
input set, plus PyTorch's own SDPA for the tolerance) on inputs regenerated from the case's
seed, which are the same for every candidate a worker times. On an H200 that was about 64 ms
of each long case's check, a quarter of a second of every screen (dev/perf-notes.md,
2026-11-28 h). The inputs are still regenerated and compared bit for bit with the ones the
kernel read on every check; only what they are compared against is kept.

Why host memory: nothing a kernel does can change it. A reference kept on the GPU would sit
beside the buffers of every later candidate, and one that writes out of bounds could change it
and so the verdicts of the candidates after it. Copying it back costs a few milliseconds
(pinned memory, about 25 GB/s), against tens of milliseconds to compute it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable

import torch

from evo.gpu.gate import Expected

MAX_BYTES = 2 << 30       # host memory per worker process: the default suite's long cases take about 1.3 GB


class ReferenceCache:
    """:class:`~evo.gpu.gate.Expected` per key in host memory, the least recently used dropped
    first once they pass ``max_bytes`` (one larger than that alone is not kept)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._kept: collections.OrderedDict[Hashable, Expected] = collections.OrderedDict()
        self.hits = self.misses = 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._kept.values())

    def get(self, key: Hashable, make: Callable[[], Expected], device: str | torch.device) -> Expected:
        """The expected outputs of ``key`` on ``device``: from the cache, or ``make()`` kept."""
        kept = self._kept.get(key)
        if kept is not None:
            self.hits += 1
            self._kept.move_to_end(key)
            return kept.to(device)
        self.misses += 1
        made = make()
        if made.nbytes <= self.max_bytes:
            self._kept[key] = Expected(_to_host(made.ref), made.own_errs)
            while self.nbytes > self.max_bytes:
                self._kept.popitem(last=False)
        return made

    def clear(self) -> None:
        self._kept.clear()
        self.hits = self.misses = 0


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in host memory, pinned when it comes from a GPU (so it goes back fast)."""
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
    host.copy_(t)
    return host


REFERENCES = ReferenceCache()
"""The worker process's cache (:meth:`evo.gpu.timing.CaseRun.check_outputs` reads it)."""
