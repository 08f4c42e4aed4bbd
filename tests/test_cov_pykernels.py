"""evo/gpu/pykernels.py on CPU with hand-written candidate modules: what cannot be imported, a
module without ``launch``, the launch errors that are and are not the device refusing it, and
that a module is imported once per content. tests/test_triton_families.py runs real Triton
modules under Triton's interpreter; tests/test_api.py drives the pytiny family end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from evo.errors import EvoError, LaunchRejected
from evo.gpu.pykernels import ModuleKernels, import_module
from evo.family.render import Entry, entry_name
from evo.family.space import LaunchConfig

ENTRIES = [Entry(entry_name(64, "fp16", c), 64, "fp16", c, LaunchConfig(64, 64, 0)) for c in (False, True)]


def module(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_a_module_is_imported_once_per_content_under_a_name_of_its_own(tmp_path: Path) -> None:
    body = "def launch(q, k, v, o, causal, scale, shift):\n    o.zero_()\n"
    a = import_module(module(tmp_path, "a.py", body))
    b = import_module(module(tmp_path, "b.py", body))          # same bytes elsewhere: the same module
    c = import_module(module(tmp_path, "c.py", body + "# another candidate\n"))
    assert a is b and a is not c and a.__name__.startswith("evo_candidate_") and a.__name__ != c.__name__
    assert sys.modules[a.__name__] is a


def test_what_cannot_be_imported_is_not_left_behind(tmp_path: Path) -> None:
    before = set(sys.modules)
    with pytest.raises(EvoError, match="cannot read candidate module .*absent.py"):
        import_module(tmp_path / "absent.py")
    with pytest.raises(ImportError, match="no triton here"):
        import_module(module(tmp_path, "raises.py", "raise ImportError('no triton here')\n"))
    with pytest.raises(EvoError, match=r"no_launch.py defines no launch\(q, k, v, o, causal, scale, shift\)"):
        import_module(module(tmp_path, "no_launch.py", "launch = 3\n"))
    with pytest.raises(EvoError, match=r"v1.py: its launch\(q, k, v, o, causal, scale\) cannot be called as "
                                       r"launch\(q, k, v, o, causal, scale, shift\)"):
        import_module(module(tmp_path, "v1.py", "def launch(q, k, v, o, causal, scale):\n    pass\n"))
    assert set(sys.modules) == before  # none of the half-imported modules stays registered


def test_kernels_need_entries_and_take_only_what_they_have(tmp_path: Path) -> None:
    path = module(tmp_path, "k.py", "def launch(q, k, v, o, causal, scale, shift):\n"
                                     "    o.copy_(v if causal else q * scale)\n")
    with pytest.raises(EvoError, match="k.py: no kernel entries to load"):
        ModuleKernels(path, [], device="cpu")
    kernels = ModuleKernels(path, ENTRIES[:1], device="cpu")
    assert kernels.kernel_attributes() == {}  # nothing to report before Triton compiles
    q, k, v = (torch.full((1, 1, 4, 64), x, dtype=torch.float16) for x in (1.0, 2.0, 3.0))
    o = torch.empty_like(q)
    kernels.launch(q, k, v, o, causal=False)
    assert torch.all(o == 0.125)  # the default scale 1/sqrt(64)
    with pytest.raises(EvoError, match="no kernel for D=64 fp16 causal; have evo_attn_d64_fp16_full"):
        kernels.launch(q, k, v, o, causal=True)


def test_only_tritons_out_of_resources_is_a_launch_the_device_refuses(tmp_path: Path) -> None:
    path = module(tmp_path, "r.py", "class OutOfResources(Exception):\n    pass\n"
                                     "def launch(q, k, v, o, causal, scale, shift):\n"
                                     "    if causal:\n"
                                     "        raise OutOfResources('out of resource: shared memory,\\n  Required: 300000')\n"
                                     "    raise RuntimeError('illegal memory access')\n")
    kernels = ModuleKernels(path, ENTRIES, device="cpu")
    q = torch.zeros(1, 1, 4, 64, dtype=torch.float16)
    with pytest.raises(LaunchRejected, match=r"^OutOfResources: out of resource: shared memory, Required: 300000$"):
        kernels(q, q, q, torch.empty_like(q), True, 0.1)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        kernels(q, q, q, torch.empty_like(q), False, 0.1)


def test_shift_is_passed_to_causal_launches_only(tmp_path: Path) -> None:
    path = module(tmp_path, "s.py", "def launch(q, k, v, o, causal, scale, shift):\n"
                                     "    o.fill_(shift + (100 if causal else 0))\n")
    kernels = ModuleKernels(path, ENTRIES, device="cpu")
    q = torch.zeros(1, 4, 3, 64, dtype=torch.float16)
    o = torch.empty_like(q)
    kernels(q, q, q, o, True, 0.1, -2)
    assert torch.all(o == 98)
    kernels(q, q, q, o, False, 0.1, 7)   # a full launch ignores the shift: the module gets 0
    assert torch.all(o == 0)
