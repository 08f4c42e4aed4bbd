"""A cubin's SASS, through cuobjdump: from the CUDA toolkit on PATH, or from the
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels (the ``test`` extra), so that the
tests of the compiled kernels' machine code run wherever nvcc does, a CPU machine included.

cuobjdump disassembles through nvdisasm, which it looks for on PATH; the wheels put both in
``nvidia/cu13/bin`` inside site-packages, so :func:`dump_sass` puts that folder on the child's PATH.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from evo.errors import EvoError


def _wheel_bin() -> Path | None:
    """``nvidia/cu13/bin`` of the NVIDIA wheels, if one of them is installed."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(root) / "cu13" / "bin"
        if (folder / "cuobjdump").is_file():
            return folder
    return None


def _search_path() -> str:
    wheel = _wheel_bin()
    path = os.environ.get("PATH", "")
    return f"{path}{os.pathsep}{wheel}" if wheel else path


def cuobjdump() -> str | None:
    """cuobjdump's path, if it can disassemble here (nvdisasm beside it or on PATH), else None."""
    path = _search_path()
    tool = shutil.which("cuobjdump", path=path)
    return tool if tool and shutil.which("nvdisasm", path=path) else None


def _run(option: str, cubin: str | Path) -> str:
    """``cuobjdump <option> cubin``'s output (EvoError: no cuobjdump; CalledProcessError: it failed)."""
    tool = cuobjdump()
    if tool is None:
        raise EvoError("cuobjdump and nvdisasm not found: install the CUDA toolkit or pip install 'evo-kernels[test]'")
    env = {**os.environ, "PATH": _search_path()}
    return subprocess.run([tool, option, str(cubin)], check=True, capture_output=True, text=True, env=env).stdout


def dump_sass(cubin: str | Path) -> str:
    """``cuobjdump --dump-sass`` of ``cubin``."""
    return _run("--dump-sass", cubin)


def dump_resource_usage(cubin: str | Path) -> str:
    """``cuobjdump --dump-resource-usage`` of ``cubin``: per function, ``REG:168 STACK:0 SHARED:1024
    LOCAL:0 ...`` (registers per thread at launch; stack, static shared and local bytes)."""
    return _run("--dump-resource-usage", cubin)
