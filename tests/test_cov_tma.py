"""evo/gpu/tma.py without a GPU: what cuTensorMapEncodeTiled and cuLaunchKernel are handed (read
back from the ctypes arrays, as the driver would read them), their failures, and a host
without the driver. tests/test_tma.py covers the geometry; tests/test_runtime_gpu.py launches."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import pytest

from evo.gpu import tma
from evo.errors import EvoError


class Driver:
    """libcuda's two entry points: records what each call reads from its pointers."""

    def __init__(self, encode_rc: int = 0, launch_rc: int = 0) -> None:
        self.encode_rc, self.launch_rc = encode_rc, launch_rc
        self.encoded: list[dict[str, Any]] = []
        self.launched: list[dict[str, Any]] = []

    def cuTensorMapEncodeTiled(self, tmap: int, dtype: int, rank: int, address: int, dims: Any, strides: Any,
                               box: Any, element_strides: Any, interleave: int, swizzle: int, l2: int,
                               fill: int) -> int:
        self.encoded.append({"tmap": tmap, "dtype": dtype, "rank": rank, "address": address, "dims": list(dims),
                             "strides": list(strides), "box": list(box), "element_strides": list(element_strides),
                             "interleave": interleave, "swizzle": swizzle, "l2": l2, "fill": fill})
        return self.encode_rc

    def cuLaunchKernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
                       stream: int, params: Any, extra: Any) -> int:
        self.launched.append({"function": function, "grid": (gx, gy, gz), "block": (bx, by, bz), "smem": smem,
                              "stream": stream, "params": [params[i] for i in range(len(params))],
                              "extra": extra})
        return self.launch_rc


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Driver:
    d = Driver()
    monkeypatch.setattr(tma, "_libcuda", lambda: d)
    tma.encode.cache_clear()                 # maps made through another test's driver are not this one's
    return d


def test_a_map_is_one_head_per_plane_with_128_byte_swizzled_boxes(driver: Driver) -> None:
    tmap = tma.encode(0x7F0000001000, (2, 3, 100, 128), "bf16", 96)
    (call,) = driver.encoded
    assert tmap.address % 64 == 0 and call["tmap"] == tmap.address  # the driver wants 64-byte alignment
    assert call["dtype"] == 9 and call["rank"] == 3 and call["address"] == 0x7F0000001000
    assert call["dims"] == [128, 100, 6] and call["strides"] == [128 * 2, 100 * 128 * 2]
    assert call["box"] == [64, 96, 1] and call["element_strides"] == [1, 1, 1]
    assert (call["interleave"], call["swizzle"], call["l2"], call["fill"]) == (0, 3, 3, 0)
    assert tma.encode(16, (1, 1, 8, 64), "fp16", 8) is not tmap and driver.encoded[1]["dtype"] == 6


def test_the_same_arguments_give_the_same_map_without_asking_the_driver_again(driver: Driver) -> None:
    tmap = tma.encode(4096, (1, 2, 8, 64), "fp16", 8)
    assert tma.encode(4096, (1, 2, 8, 64), "fp16", 8) is tmap and len(driver.encoded) == 1
    assert tma.encode(4096, (1, 2, 8, 64), "fp16", 16) is not tmap      # another box: another map
    assert tma.encode(8192, (1, 2, 8, 64), "fp16", 8) is not tmap       # another tensor
    assert len(driver.encoded) == 3


def test_a_map_the_driver_refuses_or_a_misaligned_tensor_is_an_error(driver: Driver) -> None:
    with pytest.raises(EvoError, match="TMA needs 16-byte aligned tensors"):
        tma.encode(8, (1, 1, 8, 64), "fp16", 8)
    assert driver.encoded == []  # refused before the driver is asked
    driver.encode_rc = 1
    with pytest.raises(EvoError, match=r"cuTensorMapEncodeTiled failed \(CUresult 1\) for shape \(1, 1, 8, 64\), "
                                       r"box rows 8"):
        tma.encode(16, (1, 1, 8, 64), "fp16", 8)


def test_a_launch_passes_maps_by_their_address_and_scalars_by_theirs(driver: Driver) -> None:
    tmap = tma.encode(16, (1, 2, 8, 64), "fp16", 8)
    ptr, count, scale = ctypes.c_void_p(4096), ctypes.c_int(7), ctypes.c_float(0.125)
    tma.launch(0xF00, (3, 2, 1), 384, 200_000, 0x5EA, [tmap, ptr, count, scale])
    (call,) = driver.launched
    assert (call["function"], call["grid"], call["block"], call["smem"], call["stream"], call["extra"]) == \
        (0xF00, (3, 2, 1), (384, 1, 1), 200_000, 0x5EA, None)
    assert call["params"] == [tmap.address, ctypes.addressof(ptr), ctypes.addressof(count), ctypes.addressof(scale)]
    assert ctypes.c_float.from_address(call["params"][3]).value == 0.125  # what the driver copies


def test_a_launch_the_driver_refuses_is_an_error(driver: Driver) -> None:
    driver.launch_rc = 701
    with pytest.raises(EvoError, match=r"cuLaunchKernel failed \(CUresult 701\)"):
        tma.launch(1, (1, 1, 1), 128, 0, 0, [ctypes.c_int(1)])


def test_no_driver_is_one_line_saying_tma_needs_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    tma._libcuda.cache_clear()
    tma.encode.cache_clear()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libcuda-that-is-not-here.so.1")
    try:
        with pytest.raises(EvoError, match=r"the CUDA driver \(libcuda\) is not available: TMA kernels need a GPU"):
            tma.encode(16, (1, 1, 8, 64), "fp16", 8)
    finally:
        tma._libcuda.cache_clear()


def test_the_driver_entry_points_are_typed_for_64_bit_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Untyped, ctypes would pass Python ints as 32-bit C ints and truncate device pointers."""

    class Function:
        restype: Any = None
        argtypes: Any = None

    class Lib:
        cuTensorMapEncodeTiled = Function()
        cuLaunchKernel = Function()

    opened: list[str] = []
    tma._libcuda.cache_clear()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # falls back to the soname
    monkeypatch.setattr(ctypes, "CDLL", lambda name: opened.append(name) or Lib())
    try:
        lib = tma._libcuda()
        assert tma._libcuda() is lib and opened == ["libcuda.so.1"]  # opened once
    finally:
        tma._libcuda.cache_clear()
    enc, launch = lib.cuTensorMapEncodeTiled, lib.cuLaunchKernel
    assert enc.restype is ctypes.c_int and launch.restype is ctypes.c_int
    assert enc.argtypes[3] is ctypes.c_void_p and enc.argtypes[4] is ctypes.POINTER(ctypes.c_uint64)
    assert len(enc.argtypes) == 12 and len(launch.argtypes) == 11
    assert launch.argtypes[0] is ctypes.c_void_p and launch.argtypes[8] is ctypes.c_void_p  # function, stream
    assert launch.argtypes[9] is ctypes.POINTER(ctypes.c_void_p)
