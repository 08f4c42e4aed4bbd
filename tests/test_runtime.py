"""evo/gpu/runtime.py without a GPU: the kernel ABI's input checks on CPU and meta tensors, and the
loading and launching logic against a recording stand-in for cuda.core and cuda.bindings (what is
loaded, which entry a launch picks, with which grid, scale and arguments). That cuda.core itself
loads and launches is tests/test_runtime_gpu.py's job."""

from __future__ import annotations

import ctypes
import math
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from evo.gpu import runtime
from evo.errors import EvoError, LaunchRejected
from evo.family.render import Entry, entry_name
from evo.gpu.kernels import load_kernels
from evo.gpu.runtime import CandidateKernels, check_tensors
from evo.family.space import LaunchConfig

CPU = torch.device("cpu")


def qkvo(B: int = 1, H: int = 2, L: int = 8, D: int = 64, dtype: torch.dtype = torch.float16) -> list[torch.Tensor]:
    return [torch.zeros(B, H, L, D, dtype=dtype) for _ in range(4)]


def spoil(case: str) -> tuple[list[Any], torch.device]:
    q, k, v, o = qkvo()
    device = CPU
    if case == "not_a_tensor":
        k = k.numpy()
    elif case == "device":
        device = torch.device("meta")
    elif case == "float32":
        q, k, v, o = (t.float() for t in (q, k, v, o))
    elif case == "mixed":
        v = v.to(torch.bfloat16)
    elif case == "shape":
        k = k[:, :, :4].contiguous()                      # a shorter key cache is fine; v must match it
    elif case == "groups":
        q, o = (torch.zeros(1, 3, 8, 64, dtype=torch.float16) for _ in range(2))
    elif case == "batch":
        k, v = (torch.zeros(2, 2, 8, 64, dtype=torch.float16) for _ in range(2))
    elif case == "three_d":
        q, k, v, o = (t[0] for t in (q, k, v, o))
    elif case == "transposed":
        q = q.transpose(2, 3).contiguous().transpose(2, 3)
    elif case == "misaligned":  # contiguous, but one element into its storage
        q = torch.zeros(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    elif case == "empty":
        q, k, v, o = qkvo(L=0)
    elif case == "grid":
        q, k, v, o = qkvo(B=256, H=257, L=1, D=1)
    elif case == "int32":  # 2^31 elements: on the meta device, which allocates nothing
        device = torch.device("meta")
        q, k, v, o = (torch.empty(2**15, 1, 2**10, 64, dtype=torch.float16, device=device) for _ in range(4))
    return [q, k, v, o], device


@pytest.mark.parametrize(("case", "message"), [
    ("not_a_tensor", "k is a ndarray, not a tensor"), ("device", "q is on cpu; the kernels are loaded on meta"),
    ("float32", "need float16 or bfloat16"), ("mixed", "v is torch.bfloat16; need float16 or bfloat16, the same"),
    ("shape", r"v has shape \(1, 2, 8, 64\); need q and o \(B, Hq, Lq, D\), k and v \(B, Hkv, Lk, D\)"),
    ("three_d", r"need q and o \(B, Hq, Lq, D\)"), ("groups", "3 query heads are not a multiple of 2 key/value heads"),
    ("batch", r"k has shape \(2, 2, 8, 64\); need q's batch 1 and head dim 64"),
    ("transposed", "q is not contiguous"), ("misaligned", "q is not 16-byte aligned"),
    ("empty", r"empty problem \(B, Hq, Hkv, Lq, Lk, D\) = \(1, 2, 2, 0, 0, 64\)"),
    ("grid", "B \\* Hq = 65792 is over the grid limit"),
    ("int32", "2147483648 elements per tensor: the kernel ABI indexes with 32-bit ints"),
])
def test_the_abi_refuses_what_it_does_not_take(case: str, message: str) -> None:
    tensors, device = spoil(case)
    with pytest.raises(EvoError, match=message):
        check_tensors(*tensors, device)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_abi_takes_contiguous_aligned_half_tensors(dtype: torch.dtype) -> None:
    check_tensors(*qkvo(dtype=dtype), CPU)  # no error


# ----------------------------------------------------------------------------- a recording cuda-python

SUCCESS, FAILURE = "CUDA_SUCCESS", SimpleNamespace(name="CUDA_ERROR_INVALID_VALUE")


class FakeKernel:
    def __init__(self, name: str, static_smem: int, max_threads: int) -> None:
        self.name, self.handle = name, f"handle:{name}"
        self.attributes = SimpleNamespace(num_regs=lambda: 96, local_size_bytes=0, shared_size_bytes=static_smem,
                                          const_size_bytes=0, max_threads_per_block=max_threads,
                                          max_dynamic_shared_size_bytes=0, binary_version=90, ptx_version=90)


class FakeCuda:
    """cuda.core and cuda.bindings.driver as far as runtime.py uses them, recording every call."""

    def __init__(self, *, optin: int = 227 * 1024, static_smem: int = 0, max_threads: int = 1024,
                 missing: str = "", set_attr: Any = SUCCESS) -> None:
        self.calls: list[tuple[Any, ...]] = []
        fake = self

        class Device:
            def __init__(self, index: int) -> None:
                fake.calls.append(("Device", index))

            def set_current(self) -> None:
                pass

            def create_stream(self, torch_stream: Any) -> str:
                fake.calls.append(("create_stream", torch_stream.cuda_stream))
                return f"stream:{torch_stream.cuda_stream}"

        class ObjectCode:
            @staticmethod
            def from_cubin(data: bytes) -> Any:
                def get_kernel(name: str) -> FakeKernel:
                    if name == missing:
                        raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: {name}")
                    return FakeKernel(name, static_smem, max_threads)
                return SimpleNamespace(get_kernel=get_kernel)

        self.core = SimpleNamespace(Device=Device, ObjectCode=ObjectCode, LaunchConfig=lambda **kw: kw,
                                    launch=lambda *args: self.calls.append(("launch", *args)))
        self.driver = SimpleNamespace(
            CUresult=SimpleNamespace(CUDA_SUCCESS=SUCCESS),
            CUdevice_attribute=SimpleNamespace(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="optin"),
            CUfunction_attribute=SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dynamic"),
            cuDeviceGetAttribute=lambda attr, dev: (SUCCESS, optin),
            cuKernelSetAttribute=lambda attr, value, handle, dev: self.calls.append(("set", attr, value, handle))
            or set_attr,
            cuKernelGetFunction=lambda handle: (SUCCESS, 4096 + len(handle)))


def entries(smem: int = 1024, abi: str = "ptr", D: int = 64, tile_counter: bool = False) -> list[Entry]:
    launch = LaunchConfig(128, 64, smem, abi, (64, 64, 64, 64) if abi == "tma" else (), tile_counter=tile_counter)
    return [Entry(entry_name(D, "fp16", c), D, "fp16", c, launch) for c in (False, True)]


@pytest.fixture
def cubin(tmp_path: Path) -> Path:
    path = tmp_path / "kernel.cubin"
    path.write_bytes(b"\x7fELF not really")
    return path


def load(monkeypatch: pytest.MonkeyPatch, cubin: Path, fake: FakeCuda, es: list[Entry]) -> CandidateKernels:
    monkeypatch.setattr(runtime, "_cuda", lambda: (fake.core, fake.driver))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: SimpleNamespace(cuda_stream=77))
    kernels = CandidateKernels(cubin, es)
    kernels._torch_device = CPU  # the launches below pass CPU tensors through the ABI checks
    return kernels


def test_loading_checks_every_entry_and_raises_only_the_shared_memory_it_needs(monkeypatch, cubin) -> None:
    fake = FakeCuda()
    small = load(monkeypatch, cubin, fake, entries(smem=1024))
    assert [c for c in fake.calls if c[0] == "set"] == []
    assert set(small.kernel_attributes()) == {e.name for e in entries()}
    assert small.kernel_attributes()[entries()[0].name]["num_regs"] == 96  # a method before cuda.core 0.3
    big = load(monkeypatch, cubin, fake, entries(smem=100 * 1024))
    assert [c for c in fake.calls if c[0] == "set"] == [("set", "max_dynamic", 100 * 1024, f"handle:{e.name}")
                                                        for e in entries()]
    assert big.supports(torch.zeros(1, 1, 1, 64, dtype=torch.float16), causal=True)
    assert not big.supports(torch.zeros(1, 1, 1, 96, dtype=torch.float16), causal=True)
    assert not big.supports(torch.zeros(1, 1, 1, 64, dtype=torch.float32), causal=False)


@pytest.mark.parametrize(("fake", "error", "message"), [
    (FakeCuda(optin=48 * 1024, static_smem=4096), LaunchRejected,
     r"needs 69632 B shared memory \(4096 static \+ 65536 dynamic\) > 49152 B per CTA"),
    (FakeCuda(max_threads=64), LaunchRejected, "128 threads per CTA > 64, the most"),
    (FakeCuda(set_attr=(FAILURE,)), LaunchRejected, "raising dynamic shared memory to 65536 bytes: "
                                                    "CUDA_ERROR_INVALID_VALUE"),
    (FakeCuda(missing=entry_name(64, "fp16", True)), EvoError, "cannot load kernel evo_attn_d64_fp16_causal"),
])
def test_what_the_device_cannot_launch_is_refused_at_load(monkeypatch, cubin, fake, error, message) -> None:
    with pytest.raises(error, match=message):
        load(monkeypatch, cubin, fake, entries(smem=64 * 1024))


def test_nothing_to_load_is_an_error(monkeypatch, cubin, tmp_path: Path) -> None:
    with pytest.raises(EvoError, match="no kernel entries"):
        load(monkeypatch, cubin, FakeCuda(), [])
    with pytest.raises(EvoError, match="cubin not found"):
        load_kernels(tmp_path / "absent.cubin", entries())


def test_a_launch_picks_its_entry_grid_scale_and_arguments(monkeypatch, cubin) -> None:
    fake = FakeCuda()
    kernels = load(monkeypatch, cubin, fake, entries())
    q, k, v, o = qkvo(B=2, H=3, L=100, D=64)
    kernels(q, k, v, o, True, 0.5)
    kernels.launch(q, k, v, o, causal=False)
    (_, stream, config, kernel, *args), (_, _, _, full, *args2) = [c for c in fake.calls if c[0] == "launch"]
    assert stream == "stream:77" and config == {"grid": (2, 6, 1), "block": (128, 1, 1), "shmem_size": 1024}
    assert kernel.name == "evo_attn_d64_fp16_causal" and full.name == "evo_attn_d64_fp16_full"
    # (B, Hq, Hkv, Lq, Lk, shift, scale): self-attention, the shift 0 however it is given when full
    assert args[:4] == [t.data_ptr() for t in (q, k, v, o)] and [int(a) for a in args[4:10]] == [2, 3, 3, 100, 100, 0]
    assert float(args[10]) == 0.5 and float(args2[10]) == pytest.approx(1 / math.sqrt(64))
    assert [c for c in fake.calls if c[0] == "create_stream"] == [("create_stream", 77)]  # cached per stream
    with pytest.raises(EvoError, match="no kernel for D=32 fp16 causal; have evo_attn_d64_fp16_full"):
        kernels.launch(*qkvo(D=32), causal=True)


def test_a_grouped_launch_passes_both_head_counts_both_lengths_and_the_shift(monkeypatch, cubin) -> None:
    fake = FakeCuda()
    kernels = load(monkeypatch, cubin, fake, entries())
    q, o = (torch.zeros(2, 8, 100, 64, dtype=torch.float16) for _ in range(2))
    k, v = (torch.zeros(2, 2, 300, 64, dtype=torch.float16) for _ in range(2))
    kernels(q, k, v, o, True, 0.5, 200)
    kernels.launch(q, k, v, o, causal=False, shift=200)
    (_, _, config, _, *args), (_, _, _, _, *args2) = [c for c in fake.calls if c[0] == "launch"]
    assert config["grid"] == (2, 16, 1)                       # query tiles x (B * Hq)
    assert [int(a) for a in args[4:10]] == [2, 8, 2, 100, 300, 200]
    assert [int(a) for a in args2[4:10]] == [2, 8, 2, 100, 300, 0]   # a full kernel gets shift 0


def test_a_tma_launch_encodes_a_map_per_tensor_then_passes_pointers_and_sizes(monkeypatch, cubin) -> None:
    encoded: list[tuple[Any, ...]] = []
    launched: list[tuple[Any, ...]] = []
    monkeypatch.setattr(runtime.tma, "encode", lambda *a: encoded.append(a) or f"map{len(encoded)}")
    monkeypatch.setattr(runtime.tma, "launch", lambda *a: launched.append(a))
    kernels = load(monkeypatch, cubin, FakeCuda(), entries(abi="tma"))
    q, k, v, o = qkvo(B=1, H=2, L=130, D=64)
    kernels.launch(q, k, v, o, causal=False, scale=0.25)
    assert encoded == [(t.data_ptr(), (1, 2, 130, 64), "fp16", 64) for t in (q, k, v, o)]
    ((function, grid, threads, smem, stream, args),) = launched
    assert function == kernels._functions["evo_attn_d64_fp16_full"] and grid == (3, 2, 1)
    assert (threads, smem, stream) == (128, 1024, 77) and args[:4] == ["map1", "map2", "map3", "map4"]
    assert [a.value for a in args[4:8]] == [t.data_ptr() for t in (q, k, v, o)]
    assert [a.value for a in args[8:14]] == [1, 2, 2, 130, 130, 0] and args[14].value == 0.25


def test_a_tma_launch_maps_k_and_v_with_their_own_heads_and_length(monkeypatch, cubin) -> None:
    encoded: list[tuple[Any, ...]] = []
    monkeypatch.setattr(runtime.tma, "encode", lambda *a: encoded.append(a) or f"map{len(encoded)}")
    monkeypatch.setattr(runtime.tma, "launch", lambda *a: None)
    kernels = load(monkeypatch, cubin, FakeCuda(), entries(abi="tma"))
    q, o = (torch.zeros(1, 4, 70, 64, dtype=torch.float16) for _ in range(2))
    k, v = (torch.zeros(1, 1, 500, 64, dtype=torch.float16) for _ in range(2))
    kernels.launch(q, k, v, o, causal=False)
    assert [e[1] for e in encoded] == [(1, 4, 70, 64), (1, 1, 500, 64), (1, 1, 500, 64), (1, 4, 70, 64)]


def test_a_tile_counter_launch_passes_its_streams_word_allocated_once_and_never_in_a_capture(monkeypatch,
                                                                                            cubin) -> None:
    launched: list[list[Any]] = []
    capturing = [False]
    monkeypatch.setattr(runtime.tma, "encode", lambda *a: "map")
    monkeypatch.setattr(runtime.tma, "launch", lambda *a: launched.append(a[-1]))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    plain = load(monkeypatch, cubin, FakeCuda(), entries(abi="tma"))
    kernels = load(monkeypatch, cubin, FakeCuda(), entries(abi="tma", tile_counter=True))
    q, k, v, o = qkvo(B=1, H=2, L=130, D=64)

    def counter(stream: int) -> int | None:
        """The tile counter a launch on ``stream`` passes (None: NULL), after the scale."""
        monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: SimpleNamespace(cuda_stream=stream))
        kernels.launch(q, k, v, o, causal=bool(len(launched) % 2))
        assert len(launched[-1]) == 16 and launched[-1][14].value == pytest.approx(1 / 8)
        return launched[-1][15].value

    plain.launch(q, k, v, o, causal=False)
    assert len(launched[-1]) == 15 and plain._tile_counters == {}          # the kernel takes none
    word = counter(77)
    assert counter(77) == word and set(kernels._tile_counters) == {77}    # one word per stream, for every entry
    assert kernels._tile_counters[77].tolist() == [0] and kernels._tile_counters[77].data_ptr() == word
    capturing[0] = True
    assert counter(88) is None and set(kernels._tile_counters) == {77}    # none allocated while capturing: NULL
    assert counter(77) == word                                            # an existing word goes into the graph
    capturing[0] = False
    assert counter(88) not in (None, word) and set(kernels._tile_counters) == {77, 88}


def test_driver_results_and_handles() -> None:
    driver = FakeCuda().driver
    assert runtime._check(driver, (SUCCESS, 1, 2), "x") == (1, 2) and runtime._check(driver, SUCCESS, "x") == ()
    with pytest.raises(LaunchRejected, match="loading: CUDA_ERROR_INVALID_VALUE"):
        runtime._check(driver, (FAILURE,), "loading", LaunchRejected)
    assert runtime._handle_value(1234) == 1234
    stored = ctypes.c_void_p(5678)  # older bindings: getPtr() is the address of the stored handle
    assert runtime._handle_value(SimpleNamespace(getPtr=lambda: ctypes.addressof(stored))) == 5678


def _module(name: str, **attrs: Any) -> ModuleType:
    m = ModuleType(name)
    m.__dict__.update(attrs)
    return m


def test_cuda_core_is_found_where_it_lives_or_named_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    api = {a: object() for a in ("Device", "ObjectCode", "LaunchConfig", "launch")}
    monkeypatch.setitem(sys.modules, "cuda", _module("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", _module("cuda.bindings"))
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", _module("cuda.bindings.driver"))
    monkeypatch.setitem(sys.modules, "cuda.core", _module("cuda.core"))  # pre-1.0: the API lives in .experimental
    monkeypatch.setitem(sys.modules, "cuda.core.experimental", _module("cuda.core.experimental", **api))
    core, driver = runtime._cuda()
    assert core is sys.modules["cuda.core.experimental"] and driver is sys.modules["cuda.bindings.driver"]
    monkeypatch.setitem(sys.modules, "cuda.core.experimental", _module("cuda.core.experimental", Device=1))
    with pytest.raises(EvoError, match="cuda.core is not installed or too old"):
        runtime.import_cuda()
