"""The read-bandwidth ceiling of ``evo bench``'s decode report, and the bytes a decode problem moves
(issue 34; docs/decode.md, "GB/s").

A decode kernel is as fast as its K/V cache streams, so its measure is GB/s: the bytes the problem
must move (:func:`evo.gpu.timing.io_bytes`: Q, K and V read once, O written once; K and V are
:func:`kv_bytes`) over its median time. Two yardsticks stand beside it:

- **The read ceiling**, measured in the same worker as the decode cases, before them
  (:func:`read_ceiling`): ``evo_read_sum``, a CUDA C++ kernel that reads every byte of a buffer once
  and writes one 8-byte atomic add per CTA. It is compiled by nvcc to a cubin and launched through
  cuda.core on torch's current stream, as the candidates are, and timed by the candidates' harness
  (:class:`evo.gpu.timing.GraphTimer`: CUDA-graph replays bracketed by CUDA events, after
  ``STEADY_WARM_MS`` of its own replays, the rule of a long FAST case). Every buffer is at least as
  large as the largest decode case's K+V and at least ``L2_FACTOR`` L2 sizes, so, as the rotation of
  FAST's input sets ensures for a case, no byte is still in L2 when it is read again. The best of a
  few sizes is the ceiling.

  Why a kernel of its own and not a torch op whose only work is reading (``torch.sum`` over the
  buffer): the ceiling must be what a plain stream of loads reaches, and this kernel's machine code
  is checked to be exactly that (tests/test_bandwidth.py: 16-byte ``LDG.E.128`` loads, four in flight
  per thread at full occupancy, one reduction atomic per CTA, no local memory), where a library
  reduction's vectorization, grid and passes are its own choice and may change between versions;
  and it goes through the same compile, load and launch path as the kernels it is compared with.
  It sums the buffer's 32-bit words (modulo 2^64), so a test can check that every word was read.
- **The HBM peak** of the GPU (:func:`hbm_peak`): the datasheet figure for the GPU's name, where it
  is one of :data:`HBM_PEAKS` (an H100 SXM5 is 3350 GB/s, an H200 4800 GB/s), else unknown.

Only the pure parts (bytes, sizes, peaks) are used outside a GPU worker; torch and cuda.core are
imported by the parts that run on the GPU.
"""

from __future__ import annotations

import functools
import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evo.errors import EvoError
from evo.results import Shape
from evo.gpu.timing import ELEMENT_BYTES, L2_FACTOR, STEADY_WARM_MS, GraphTimer, Stats, l2_bytes

if TYPE_CHECKING:
    import torch

KERNEL = "evo_read_sum"
THREADS = 256                   # threads per CTA
UNROLL = 4                      # 16-byte loads in flight per thread: 64 KB per 1024 threads
MIB = 1 << 20
MIN_READ_BYTES = 256 * MIB      # the smallest buffer read, whatever the cases
MAX_READ_BYTES = 8 << 30        # a larger size is not tried (the first size always is)
SIZE_FACTORS = (1, 2, 4)        # buffer sizes tried: these multiples of the first
READ_REPS = 30                  # samples (graph replays) per size

SOURCE = r"""
// evo_read_sum: read every 16-byte word of src once, add its four 32-bit words into *sum (mod 2^64).
// Grid-stride over chunks of THREADS x UNROLL words, all UNROLL loads issued before any add; the
// last partial chunk goes to the CTA whose turn it is. One atomic add per CTA.
__device__ __forceinline__ unsigned long long words(uint4 w) {
    return (unsigned long long)w.x + w.y + w.z + w.w;
}

extern "C" __global__ void __launch_bounds__(THREADS, 2048 / THREADS)
evo_read_sum(const uint4* __restrict__ src, unsigned long long n, unsigned long long* __restrict__ sum)
{
    const unsigned long long chunk = (unsigned long long)THREADS * UNROLL;
    const unsigned long long full = n / chunk;
    unsigned long long acc = 0;
    for (unsigned long long c = blockIdx.x; c < full; c += gridDim.x) {
        const uint4* p = src + c * chunk + threadIdx.x;
        uint4 w[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) w[u] = __ldg(p + u * THREADS);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc += words(w[u]);
    }
    if (blockIdx.x == full % gridDim.x)
        for (unsigned long long i = full * chunk + threadIdx.x; i < n; i += THREADS) acc += words(__ldg(src + i));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    __shared__ unsigned long long part[THREADS / 32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long total = 0;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) total += part[w];
        atomicAdd(sum, total);
    }
}
"""

# Datasheet HBM bandwidth (GB/s) by GPU name (as torch and nvidia-smi spell it), first match wins.
HBM_PEAKS: tuple[tuple[str, float, str], ...] = (
    (r"\bH100\b.*\bHBM3\b", 3350.0, "H100 SXM5 80 GB HBM3"),
    (r"\bH100 NVL\b", 3900.0, "H100 NVL 94 GB HBM3"),
    (r"\bH100 PCIe\b", 2000.0, "H100 PCIe 80 GB HBM2e"),
    (r"\bH200\b", 4800.0, "H200 141 GB HBM3e"),
    (r"\bA100-SXM4-80GB\b", 2039.0, "A100 SXM4 80 GB HBM2e"),
    (r"\bA100 80GB PCIe\b", 1935.0, "A100 PCIe 80 GB HBM2e"),
    (r"\bA100-(?:SXM4|PCIE)-40GB\b", 1555.0, "A100 40 GB HBM2"),
)


# ----------------------------------------------------------------------------- pure parts


def kv_bytes(shape: Shape) -> int:
    """Bytes of K and V a problem holds and must read: 2 tensors x Hkv heads x its key rows (B x Lk,
    or each sequence's own keys) x D x the element size. Grouped-query heads read each K/V head once."""
    return 2 * shape.Hkv * shape.kv_rows * shape.D * ELEMENT_BYTES[shape.dtype]


def gbps(nbytes: float, us: float) -> float:
    """GB/s (10^9 bytes per second) of ``nbytes`` moved in ``us`` microseconds."""
    return nbytes / us / 1e3


def read_sizes(largest: int, l2: int) -> list[int]:
    """Buffer sizes to read: the first at least ``largest`` bytes (the largest decode case's K+V),
    ``L2_FACTOR`` L2 sizes and ``MIN_READ_BYTES``, in whole MiB; then its ``SIZE_FACTORS`` multiples
    up to ``MAX_READ_BYTES``."""
    first = math.ceil(max(largest, L2_FACTOR * l2, MIN_READ_BYTES) / MIB) * MIB
    return [first * f for f in SIZE_FACTORS if f == 1 or first * f <= MAX_READ_BYTES]


def hbm_peak(gpu_name: str) -> dict[str, Any] | None:
    """``{"gbps", "source"}``: the datasheet HBM bandwidth of the GPU named ``gpu_name`` (None: not
    one of :data:`HBM_PEAKS`)."""
    for pattern, peak, part in HBM_PEAKS:
        if re.search(pattern, gpu_name):
            return {"gbps": peak, "source": f"datasheet peak of the {part}, by GPU name"}
    return None


@dataclass(frozen=True)
class SizeReading:
    """One buffer size read by :func:`read_ceiling`: median and p80 - p20 microseconds per read."""

    bytes: int
    us: float
    spread_us: float

    @property
    def gbps(self) -> float:
        return gbps(self.bytes, self.us)


@dataclass(frozen=True)
class ReadCeiling:
    """The best read bandwidth of :func:`read_ceiling` over its sizes, and how it was measured."""

    method: str
    sizes: tuple[SizeReading, ...]

    @property
    def best(self) -> SizeReading:
        return max(self.sizes, key=lambda s: s.gbps)

    def as_dict(self) -> dict[str, Any]:
        """The bench record's ``read_ceiling``: GB/s and buffer bytes of the best size, the method,
        and every size's reading."""
        return {"gbps": self.best.gbps, "bytes": self.best.bytes, "method": self.method,
                "sizes": [{"bytes": s.bytes, "us": s.us, "spread_us": s.spread_us, "gbps": s.gbps}
                          for s in self.sizes]}


# ----------------------------------------------------------------------------- on the GPU


def build_reader(arch: str, out_dir: Path) -> Path:
    """Compile :data:`SOURCE` for ``arch`` (``sm_90``, ``sm_80``, ...) with nvcc to
    ``out_dir/evo_read_sum.cubin``."""
    from evo.toolchain.build import gencode, nvcc_path

    src, cubin = out_dir / f"{KERNEL}.cu", out_dir / f"{KERNEL}.cubin"
    src.write_text(SOURCE)
    cmd = [nvcc_path(), "-cubin", *gencode(arch), "-O3", f"-DTHREADS={THREADS}", f"-DUNROLL={UNROLL}",
           "-o", str(cubin), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise EvoError(f"nvcc could not build {KERNEL} for {arch}: {done.stderr.strip()}")
    return cubin


class Reader:
    """``evo_read_sum`` loaded on the current CUDA device: a call reads a whole buffer on torch's
    current stream (capturable in a CUDA graph), adding its words into :attr:`total`."""

    def __init__(self) -> None:
        import torch

        from evo.gpu.runtime import _cuda

        core, _ = _cuda()
        device = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(device)
        self.arch = f"sm_{props.major}{props.minor}"
        with tempfile.TemporaryDirectory() as tmp:
            cubin = build_reader(self.arch, Path(tmp)).read_bytes()
        self._core = core
        self._dev = core.Device(device)
        self._dev.set_current()
        self._code = core.ObjectCode.from_cubin(cubin)      # kept: the kernel lives in its library
        self._kernel = self._code.get_kernel(KERNEL)
        self.ctas = props.multi_processor_count * (props.max_threads_per_multi_processor // THREADS)
        self._config = core.LaunchConfig(grid=(self.ctas, 1, 1), block=(THREADS, 1, 1), shmem_size=0)
        self.total = torch.zeros(1, dtype=torch.int64, device=device)
        self._streams: dict[int, Any] = {}

    def __call__(self, buf: torch.Tensor) -> None:
        """Read every byte of ``buf`` (contiguous, a whole number of 16-byte words) once."""
        import numpy as np
        import torch

        nbytes = buf.numel() * buf.element_size()
        if not buf.is_contiguous() or nbytes % 16 or buf.data_ptr() % 16:
            raise EvoError(f"{KERNEL} reads contiguous, 16-byte aligned whole 16-byte words; got {nbytes} bytes")
        ts = torch.cuda.current_stream()
        stream = self._streams.get(ts.cuda_stream)
        if stream is None:
            stream = self._streams[ts.cuda_stream] = self._dev.create_stream(ts)
        self._core.launch(stream, self._config, self._kernel, buf.data_ptr(), np.uint64(nbytes // 16),
                          self.total.data_ptr())

    def sum(self, buf: torch.Tensor) -> int:
        """The sum of ``buf``'s 32-bit words, as unsigned, modulo 2^64 (one read, synchronised)."""
        self.total.zero_()
        self(buf)
        return int(self.total.item()) % (1 << 64)


def read_ceiling(largest: int, reps: int = READ_REPS) -> ReadCeiling:
    """Time :class:`Reader` on buffers of :func:`read_sizes` (``largest``: the largest decode case's
    K+V bytes) of random words on the current GPU, each by :class:`~evo.gpu.timing.GraphTimer` after
    ``STEADY_WARM_MS`` of its own replays; the memory is released before returning."""
    import torch

    reader = Reader()
    readings = []
    sizes = read_sizes(largest, l2_bytes())
    for size in sizes:
        buf = torch.empty(size // 4, dtype=torch.int32, device="cuda").random_()
        timer = GraphTimer(functools.partial(reader, buf))
        try:
            timer.warm(STEADY_WARM_MS)
            stats = Stats.of(timer.sample(reps))
        finally:
            timer.close()
        readings.append(SizeReading(size, stats.median, stats.spread))
        del buf
    torch.cuda.empty_cache()
    method = (f"{KERNEL}: CUDA C++ built by nvcc -O3 for {reader.arch}, launched through cuda.core; "
              f"{reader.ctas} CTAs of {THREADS} threads, each thread {UNROLL} 16-byte loads in flight, "
              f"one 8-byte atomic add per CTA; CUDA-graph replays after {STEADY_WARM_MS:.0f} ms of its own, "
              f"median of {reps}; one buffer of at least {L2_FACTOR} L2 sizes and the largest case's K+V; "
              f"best of {len(sizes)} sizes")
    return ReadCeiling(method, tuple(readings))
