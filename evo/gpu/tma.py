"""Tensor maps and raw kernel launches for the TMA kernel ABI (docs/kernel-abi.md, TMA variant).

Hopper families (``[launch] abi = "tma"``) read Q, K, V and write O through the tensor-memory
accelerator, which needs a 128-byte ``CUtensorMap`` per tensor, encoded on the host and passed
by value as a ``__grid_constant__`` kernel parameter. ``cuda.core``'s launcher takes scalars and
pointers only, so these kernels are launched with the driver's ``cuLaunchKernel`` through ctypes
(the C API is stable across driver versions, unlike the Python bindings' argument conventions).

Every tensor is a contiguous ``(B, H, L, D)`` array seen as a 3-D tensor ``(D, L, B*H)``: a box
is 64 columns (128 bytes, the 128-byte swizzle span) by ``rows`` rows of one head, so rows past
``L`` (and, where D is no multiple of 64, as D=96, columns past ``D``) read as zeros and a store
clips them, and no box ever crosses into another head.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from evo.errors import EvoError

MAP_BYTES = 128
BOX_COLS = 64                      # 64 16-bit elements = 128 bytes = one swizzle row
ROW_ALIGN = 8                      # a row of D 16-bit elements must be a multiple of 16 bytes
_DTYPES = {"fp16": 6, "bf16": 9}   # CU_TENSOR_MAP_DATA_TYPE_FLOAT16 / _BFLOAT16
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
_ELEMENT_BYTES = 2


@dataclass(frozen=True)
class MapGeometry:
    """What ``cuTensorMapEncodeTiled`` is told about one (B, H, L, D) tensor (innermost first)."""

    dims: tuple[int, int, int]
    strides_bytes: tuple[int, int]
    box: tuple[int, int, int]

    @classmethod
    def of(cls, shape: tuple[int, int, int, int], rows: int) -> MapGeometry:
        B, H, L, D = shape
        if D % ROW_ALIGN:   # the driver wants every stride a multiple of 16 bytes
            raise EvoError(f"TMA kernels need the head dim to be a multiple of {ROW_ALIGN}; got {D}")
        if not 1 <= rows <= 256:
            raise EvoError(f"TMA box rows must be in 1..256; got {rows}")
        return cls(dims=(D, L, B * H), strides_bytes=(D * _ELEMENT_BYTES, L * D * _ELEMENT_BYTES),
                   box=(BOX_COLS, rows, 1))


class TensorMap:
    """One encoded 128-byte tensor map in host memory, 64-byte aligned as the driver wants it."""

    def __init__(self) -> None:
        self._buf = ctypes.create_string_buffer(MAP_BYTES + 64)
        self.address = (ctypes.addressof(self._buf) + 63) & ~63


@cache
def _libcuda() -> Any:
    """The CUDA driver library with the two entry points used here typed."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        raise EvoError("the CUDA driver (libcuda) is not available: TMA kernels need a GPU") from None
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
    lib.cuTensorMapEncodeTiled.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                                           u64p, u64p, u32p, u32p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_int]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    return lib


@lru_cache(maxsize=1024)
def encode(address: int, shape: tuple[int, int, int, int], dtype: str, rows: int) -> TensorMap:
    """The tensor map of a contiguous (B, H, L, D) tensor at ``address`` with boxes of ``rows``
    rows x 64 columns, 128-byte swizzle, zero fill out of bounds. A map is a function of these
    arguments alone and is never written after it is made, so the same one is returned for the
    same arguments: the timed cases launch over the same few buffers, and encoding four maps for
    every launch took 0.06 s of the 0.15 s a screen spent launching (dev/perf-notes.md, 2026-11-28 h)."""
    if address % 16:
        raise EvoError("TMA needs 16-byte aligned tensors")
    geo = MapGeometry.of(shape, rows)
    tmap = TensorMap()
    rc = _libcuda().cuTensorMapEncodeTiled(
        tmap.address, _DTYPES[dtype], 3, address,
        (ctypes.c_uint64 * 3)(*geo.dims), (ctypes.c_uint64 * 2)(*geo.strides_bytes),
        (ctypes.c_uint32 * 3)(*geo.box), (ctypes.c_uint32 * 3)(1, 1, 1),
        0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
    if rc != 0:
        raise EvoError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for shape {shape}, box rows {rows}")
    return tmap


def launch(function: int, grid: tuple[int, int, int], threads: int, smem_bytes: int, stream: int,
           args: list[Any]) -> None:
    """``cuLaunchKernel`` with ``args``: TensorMaps (passed by value) and ctypes scalars/pointers.

    The driver copies every parameter before returning (also while a CUDA graph captures), so
    the host buffers need to live only for this call.
    """
    slots = (ctypes.c_void_p * len(args))(
        *[a.address if isinstance(a, TensorMap) else ctypes.addressof(a) for a in args])
    rc = _libcuda().cuLaunchKernel(function, *grid, threads, 1, 1, smem_bytes, stream, slots, None)
    if rc != 0:
        raise EvoError(f"cuLaunchKernel failed (CUresult {rc})")
