"""Load a candidate's cubin and launch its kernels on torch tensors, on torch's current stream.

cuda-python's ``cuda.core`` loads the cubin (a CUDA library: context-independent ``CUkernel``
handles) and launches with ``cuLaunchKernelEx`` on a wrapper of ``torch.cuda.current_stream()``,
so launches order with torch's own work and can be captured in a ``torch.cuda.CUDAGraph``: a
launch checks its tensors and picks the entry for (head dim, dtype, causal) from the renderer's
:class:`~evo.family.render.Entry` records, with no host sync and no allocation. cuda-python is needed
only on the GPU host, so it is imported when kernels are first loaded (or by
:func:`import_cuda`). An entry whose launch the device cannot set up (threads or shared memory
over its limits) raises :class:`~evo.errors.LaunchRejected` at load, before any kernel runs.
"""

from __future__ import annotations

import ctypes
import importlib
import math
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from evo.gpu import tma
from evo.errors import EvoError, LaunchRejected
from evo.family.render import Entry, layout_name
from evo.family.space import split_plan

DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
DEFAULT_SMEM_LIMIT = 48 * 1024  # dynamic shared memory above this needs the kernel's limit raised
ALIGNMENT = 16  # bytes: base pointers of q, k, v, o (16-byte vector loads)
MAX_GRID_Y = 65535              # grid.y = B * Hq
ATTRIBUTES = ("num_regs", "local_size_bytes", "shared_size_bytes", "const_size_bytes",
              "max_threads_per_block", "max_dynamic_shared_size_bytes", "binary_version",
              "ptx_version")


def _cuda() -> tuple[ModuleType, ModuleType]:
    """``cuda.core`` (or its pre-1.0 home ``cuda.core.experimental``) and ``cuda.bindings.driver``."""
    try:
        driver = importlib.import_module("cuda.bindings.driver")
    except ImportError:
        raise EvoError("cuda-python is not installed; it loads and launches compiled kernels: "
                       "pip install 'evo-kernels[gpu]'") from None
    for name in ("cuda.core", "cuda.core.experimental"):
        try:
            core = importlib.import_module(name)
        except ImportError:
            continue
        if all(hasattr(core, a) for a in ("Device", "ObjectCode", "LaunchConfig", "launch")):
            return core, driver
    raise EvoError("cuda.core is not installed or too old (needs Device, ObjectCode, LaunchConfig, "
                   "launch): pip install 'evo-kernels[gpu]'")


def import_cuda() -> None:
    """Import cuda-python now (a GPU worker does at start-up, outside any request's budget)."""
    _cuda()


def _check(driver: ModuleType, result: Any, what: str, error: type[EvoError] = EvoError) -> tuple[Any, ...]:
    """Raise ``error`` unless a cuda.bindings call returned CUDA_SUCCESS; return its other outputs."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise error(f"{what}: {getattr(err, 'name', err)}")
    return tuple(rest)


def _handle_value(obj: Any) -> int:
    """The raw pointer value of a cuda.bindings handle object (CUfunction, ...)."""
    try:
        return int(obj)
    except TypeError:  # older bindings: getPtr() is the address of the stored handle
        return int(ctypes.c_void_p.from_address(obj.getPtr()).value or 0)


def _attribute(kernel: Any, name: str) -> int:
    v = getattr(kernel.attributes, name)
    return int(v() if callable(v) else v)  # methods before cuda.core 0.3


def _setup_problem(entry: Entry, kernel: Any, smem_optin: int) -> str:
    """Why the device cannot launch ``entry`` as configured ("" when it can)."""
    threads, most = entry.launch.threads, _attribute(kernel, "max_threads_per_block")
    if threads > most:
        return f"{threads} threads per CTA > {most}, the most this kernel can be launched with"
    static, dynamic = _attribute(kernel, "shared_size_bytes"), entry.launch.smem_bytes
    if static + dynamic > smem_optin:
        return (f"needs {static + dynamic} B shared memory ({static} static + {dynamic} dynamic) "
                f"> {smem_optin} B per CTA on this GPU")
    return ""


class CandidateKernels:
    """The kernels of one built candidate, loaded on one device and ready to launch."""

    def __init__(self, cubin_path: str | Path, entries: Sequence[Entry], device: int = 0) -> None:
        path = Path(cubin_path)
        if not path.is_file():
            raise EvoError(f"cubin not found: {path}")
        if not entries:
            raise EvoError(f"{path.name}: no kernel entries to load")
        core, driver = _cuda()
        self.device = device
        self.entries = tuple(entries)
        self._core = core
        self._torch_device = torch.device("cuda", device)
        self._dev = core.Device(device)
        self._dev.set_current()
        self._code = core.ObjectCode.from_cubin(path.read_bytes())
        self._kernels: dict[tuple[int, str, bool], tuple[Entry, Any]] = {}
        self._layout_kernels: dict[tuple[str, str], Any] = {}   # (entry, layout) -> its lens / paged kernel
        self._streams: dict[int, Any] = {}
        (smem_optin,) = _check(driver, driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
            "shared memory per block (opt-in)")
        self._functions: dict[str, int] = {}   # CUfunction handles, for raw (TMA ABI) launches
        self._sms = torch.cuda.get_device_properties(device).multi_processor_count  # persistent grids
        self._scratch: list[torch.Tensor] = []   # split-KV workspaces, newest (largest) last
        self._tile_counters: dict[int, torch.Tensor] = {}   # per CUDA stream handle: its tile counter word
        for e in self.entries:
            for layout in ("contiguous", *e.launch.layouts):   # the entry, then its cache layouts' kernels
                name = layout_name(e.name, layout)
                kernel = self._load(path, driver, e, name, int(smem_optin))
                if layout == "contiguous":
                    self._kernels[(e.head_dim, e.dtype, e.causal)] = (e, kernel)
                else:
                    self._layout_kernels[(e.name, layout)] = kernel

    def _load(self, path: Path, driver: ModuleType, e: Entry, name: str, smem_optin: int) -> Any:
        """Kernel ``name`` of entry ``e``, checked against the device, its shared memory limit
        raised where needed and loaded into this context (not lazily at a first launch that may be
        captured in a graph)."""
        try:
            kernel = self._code.get_kernel(name)
        except Exception as exc:  # cuda.core reports a missing symbol or bad cubin its own way
            raise EvoError(f"{path.name}: cannot load kernel {name}: {exc}") from None
        problem = _setup_problem(e, kernel, smem_optin)
        if problem:
            raise LaunchRejected(f"{name}: {problem}")
        if _attribute(kernel, "shared_size_bytes") + e.launch.smem_bytes > DEFAULT_SMEM_LIMIT:
            _check(driver, driver.cuKernelSetAttribute(
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                e.launch.smem_bytes, kernel.handle, self.device),
                f"{name}: raising dynamic shared memory to {e.launch.smem_bytes} bytes", LaunchRejected)
        (function,) = _check(driver, driver.cuKernelGetFunction(kernel.handle), f"{name}: loading")
        self._functions[name] = _handle_value(function)
        return kernel

    def supports(self, q: torch.Tensor, causal: bool, layout: str = "contiguous") -> bool:
        """Whether a kernel exists for ``q``'s head dim and dtype in this causal mode and cache
        ``layout`` (``contiguous``, ``lens``, ``paged``)."""
        found = self._kernels.get((q.shape[-1], DTYPE_NAMES.get(q.dtype, ""), causal))
        return found is not None and (layout == "contiguous" or (found[0].name, layout) in self._layout_kernels)

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, *,
               causal: bool, scale: float | None = None, shift: int = 0,
               seqlens: torch.Tensor | None = None, block_table: torch.Tensor | None = None) -> None:
        """o = softmax(scale * q k^T [causal mask]) v: q and o contiguous (B, Hq, Lq, D), k and v
        (B, Hkv, Lk, D); query i sees keys j <= i + shift when causal (docs/kernel-abi.md).

        With ``seqlens`` (int32 (B,) on the device) sequence b holds its first seqlens[b] keys of
        the Lk and its causal mask is at their bottom right (``shift`` is not read); with
        ``block_table`` too (int32 (B, pages_per_seq)), k and v are a pool (pages, Hkv, page_size,
        D) and key j of sequence b is row j % page_size of page block_table[b, j // page_size]
        (docs/kernel-abi.md, "Ragged and paged caches"). The lengths stay on the device: the
        caller keeps each within the capacity (Lk, or pages_per_seq x page_size)."""
        layout = "paged" if block_table is not None else "lens" if seqlens is not None else "contiguous"
        self._validate(q, k, v, o, layout == "paged")
        B, H, L, D = q.shape
        Hkv, Lk = k.shape[1], k.shape[2]
        shift = shift if causal else 0
        found = self._kernels.get((D, DTYPE_NAMES[q.dtype], causal))
        if found is None:
            have = ", ".join(e.name for e in self.entries)
            raise EvoError(f"no kernel for D={D} {DTYPE_NAMES[q.dtype]} "
                           f"{'causal' if causal else 'full'}; have {have}")
        entry, kernel = found
        s = 1.0 / math.sqrt(D) if scale is None else scale
        extra: tuple[Any, ...] = ()
        if layout != "contiguous":
            kernel = self._layout_kernels.get((entry.name, layout))
            if kernel is None:
                raise EvoError(f"{entry.name} has no {layout} kernel ({layout_name(entry.name, layout)}); "
                               "its family does not declare that cache layout")
            assert seqlens is not None
            check_cache(q, seqlens, block_table, self._torch_device)
            extra = (seqlens.data_ptr(),)
            if block_table is not None:
                page_size, pages = k.shape[2], block_table.shape[1]
                Lk = page_size * pages                  # the capacity: the split plan's length
                extra += (block_table.data_ptr(), np.int32(page_size), np.int32(pages))
        dims = (np.int32(B), np.int32(H), np.int32(Hkv), np.int32(L), np.int32(Lk), np.int32(shift))
        if entry.launch.abi == "tma":
            self._launch_tma(entry, (q, k, v, o), dims, s)
            return
        if entry.launch.abi == "split_kv":
            self._launch_split(entry, kernel, (q, k, v, o), dims, s, extra)
            return
        config = self._core.LaunchConfig(grid=entry.launch.grid(B, H, L, self._sms),
                                         block=(entry.launch.threads, 1, 1),
                                         shmem_size=entry.launch.smem_bytes)
        self._core.launch(self._stream(), config, kernel,
                          q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), *dims, np.float32(s))

    def _launch_tma(self, entry: Entry, qkvo: tuple[torch.Tensor, ...], dims: tuple[np.int32, ...],
                    scale: float) -> None:
        """TMA ABI: a tensor map per tensor (its own shape; box rows from the manifest), then the
        plain arguments, then the stream's tile counter where the entry takes one."""
        B, H, L, _ = qkvo[0].shape
        maps = [tma.encode(t.data_ptr(), (t.shape[0], t.shape[1], t.shape[2], t.shape[3]), entry.dtype, rows)
                for t, rows in zip(qkvo, entry.launch.tma_rows, strict=True)]
        args = [*maps, *(ctypes.c_void_p(t.data_ptr()) for t in qkvo),
                *(ctypes.c_int(int(d)) for d in dims), ctypes.c_float(scale)]
        stream = torch.cuda.current_stream(self.device).cuda_stream
        if entry.launch.tile_counter:
            args.append(self._tile_counter(stream))
        tma.launch(self._functions[entry.name], entry.launch.grid(B, H, L, self._sms), entry.launch.threads,
                   entry.launch.smem_bytes, stream, args)

    def _tile_counter(self, stream: int) -> ctypes.c_void_p:
        """The tile counter of ``stream``, torch's current one (docs/kernel-abi.md, "The TMA variant"): a
        4-byte device word, zeroed once when it is allocated (on that stream, before the launch that
        first needs it) and left zero again by every launch, so no launch pays for a memset. One
        word per stream: launches on one stream run in order and may share it, but two streams'
        concurrent launches on one word would take each other's tiles. None is allocated during
        CUDA graph capture: a stream without a word yet gets NULL, and its kernels then deal their
        tiles statically. Words live as long as these kernels (a captured graph may hold one)."""
        word = self._tile_counters.get(stream)
        if word is None:
            if torch.cuda.is_current_stream_capturing():
                return ctypes.c_void_p(0)
            word = self._tile_counters[stream] = torch.zeros(1, dtype=torch.int32, device=self._torch_device)
        return ctypes.c_void_p(word.data_ptr())

    def _launch_split(self, entry: Entry, kernel: Any, qkvo: tuple[torch.Tensor, ...],
                      dims: tuple[np.int32, ...], scale: float, extra: tuple[Any, ...] = ()) -> None:
        """Split-KV ABI (docs/kernel-abi.md): the grid and split length of
        :func:`evo.family.space.split_plan` (on ``dims``' Lk: a lens or paged cache's capacity, its
        plan a ragged one), then the workspace pointer, the split length and ``extra``, a cache layout's arguments."""
        assert entry.launch.split is not None
        B, Hq, Hkv, Lq, Lk = (int(d) for d in dims[:5])
        plan = split_plan(entry.launch.split, entry.launch.rows_per_cta, B, Hq, Hkv, Lq, Lk, self._sms,
                          ragged=bool(extra))
        ws = self._workspace(plan.workspace_bytes(entry.launch.rows_per_cta, entry.head_dim))
        if ws is not None:
            # This launch's counters, zeroed on its stream before it (inside a captured graph too): the
            # kernels set their own counters back to zero, but another problem's plan lays its parts
            # over the bytes this one counts in (found on an H100: tiles never combined, o unwritten).
            ws[: plan.counter_bytes()].zero_()
        config = self._core.LaunchConfig(grid=plan.grid(B, Hkv), block=(entry.launch.threads, 1, 1),
                                         shmem_size=entry.launch.smem_bytes)
        self._core.launch(self._stream(), config, kernel, *(t.data_ptr() for t in qkvo), *dims, np.float32(scale),
                          0 if ws is None else ws.data_ptr(), np.int32(plan.split_len), *extra)

    def _workspace(self, nbytes: int) -> torch.Tensor | None:
        """A device buffer of at least ``nbytes`` (None: none needed), kept for the life of these
        kernels. A larger one is allocated beside the old ones, never in their place, so a CUDA
        graph captured with an older one stays valid; none may be allocated while a graph is being
        captured (the timer's eager warm-up launches come first)."""
        if nbytes == 0:
            return None
        if not self._scratch or self._scratch[-1].numel() < nbytes:
            if torch.cuda.is_current_stream_capturing():
                raise EvoError(f"a split-KV launch needs a {nbytes}-byte workspace, and none may be allocated "
                               "during CUDA graph capture: launch the same problem once before capturing")
            size = max(nbytes, 2 * self._scratch[-1].numel() if self._scratch else 0)
            # uninitialized: each launch zeroes its counters first, and a split writes its part before
            # the combine reads it
            self._scratch.append(torch.empty(size, dtype=torch.uint8, device=self._torch_device))
        return self._scratch[-1]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 causal: bool, scale: float, shift: int = 0, *, seqlens: torch.Tensor | None = None,
                 block_table: torch.Tensor | None = None) -> None:
        """The gate's launch signature: ``launch(q, k, v, o, causal, scale, shift)``, with a cache
        layout's ``seqlens`` and ``block_table`` where the problem has them."""
        self.launch(q, k, v, o, causal=causal, scale=scale, shift=shift, seqlens=seqlens, block_table=block_table)

    def kernel_attributes(self) -> dict[str, dict[str, int]]:
        """Per entry: registers, local/static/const memory, limits and versions, from the driver."""
        out = {}
        for entry, kernel in self._kernels.values():
            out[entry.name] = {name: _attribute(kernel, name) for name in ATTRIBUTES}
        return out

    def _stream(self) -> Any:
        """A cuda.core wrapper of torch's current stream on this device (cached per handle)."""
        ts = torch.cuda.current_stream(self.device)
        wrapped = self._streams.get(ts.cuda_stream)
        if wrapped is None:
            wrapped = self._streams[ts.cuda_stream] = self._dev.create_stream(ts)
        return wrapped

    def _validate(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, pool: bool) -> None:
        check_tensors(q, k, v, o, self._torch_device, pool=pool)


def check_cache(q: torch.Tensor, seqlens: torch.Tensor, block_table: torch.Tensor | None,
                device: torch.device) -> None:
    """Refuse (EvoError) a lens or paged cache's index tensors the kernels do not take: int32,
    contiguous, on ``device``; ``seqlens`` (B,), ``block_table`` (B, pages_per_seq). Their values stay on the device (no sync): each length must be
    within the capacity, each page number within the pool."""
    B = q.shape[0]
    for name, t, dims in (("seqlens", seqlens, 1), ("block_table", block_table, 2)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.device != device or not t.is_contiguous():
            raise EvoError(f"{name} must be a contiguous int32 tensor on {device}")
        if t.dim() != dims or t.shape[0] != B or t.numel() < 1:
            raise EvoError(f"{name} has shape {tuple(t.shape)}; need {'(B,)' if dims == 1 else '(B, pages_per_seq)'} "
                           f"with B = {B}")


def check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  device: torch.device, *, pool: bool = False) -> None:
    """Refuse (EvoError) what the kernel ABI does not take: see docs/kernel-abi.md. With ``pool``
    k and v are a paged cache's pool (pages, Hkv, page_size, D): any number of pages."""
    for name, t in zip("qkvo", (q, k, v, o), strict=True):
        if not isinstance(t, torch.Tensor):
            raise EvoError(f"{name} is a {type(t).__name__}, not a tensor")
        if t.device != device:
            raise EvoError(f"{name} is on {t.device}; the kernels are loaded on {device}")
        if t.dtype not in DTYPE_NAMES or t.dtype != q.dtype:
            raise EvoError(f"{name} is {t.dtype}; need float16 or bfloat16, the same for q, k, v, o")
        want = q.shape if name in "qo" else k.shape
        if t.dim() != 4 or t.shape != want:
            raise EvoError(f"{name} has shape {tuple(t.shape)}; need q and o (B, Hq, Lq, D), "
                           f"k and v (B, Hkv, Lk, D), k and v alike")
        if not t.is_contiguous():
            raise EvoError(f"{name} is not contiguous (strides {t.stride()})")
        if t.data_ptr() % ALIGNMENT:  # the families load 16-byte vectors (docs/kernel-abi.md)
            raise EvoError(f"{name} is not {ALIGNMENT}-byte aligned (a view with a storage offset?)")
    B, H, L, D = q.shape
    Bk, Hkv, Lk, Dk = k.shape
    if Dk != D or (Bk != B and not pool):
        raise EvoError(f"k has shape {tuple(k.shape)}; need q's batch {B} and head dim {D}")
    if min(B, H, L, D, Hkv, Lk) < 1:
        raise EvoError(f"empty problem (B, Hq, Hkv, Lq, Lk, D) = {(B, H, Hkv, L, Lk, D)}")
    if H % Hkv:
        raise EvoError(f"{H} query heads are not a multiple of {Hkv} key/value heads")
    if B * H > MAX_GRID_Y:
        raise EvoError(f"B * Hq = {B * H} is over the grid limit {MAX_GRID_Y}")
    if max(q.numel(), k.numel()) >= 2**31:
        raise EvoError(f"{max(q.numel(), k.numel())} elements per tensor: the kernel ABI indexes with 32-bit ints")
