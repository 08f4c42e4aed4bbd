"""Ask ``nvidia-smi`` about the GPUs without initialising CUDA in this process.

The search process must never touch the GPU (docs/design.md, crash isolation), so the arch, the
GPU's name, the driver version and the boards' UUIDs are read from nvidia-smi rather than from torch.
"""

from __future__ import annotations

import re
import shutil
import subprocess


def query(field: str) -> list[str] | None:
    """One value per GPU for ``nvidia-smi --query-gpu=FIELD``; None when nvidia-smi is missing
    or fails (an empty list when it runs and sees no GPU)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def gpu_name(index: int = 0) -> str | None:
    """The name nvidia-smi gives GPU ``index``; None when it cannot tell."""
    names = query("name") or []
    return names[index] if len(names) > index else None


def board(uuid: str) -> str:
    """A GPU's UUID as 32 hex digits, however it was written (nvidia-smi's ``GPU-8a2d...``, torch's
    dashed form): one key for one physical board; "" for none."""
    return re.sub(r"[^0-9a-f]", "", uuid.lower().removeprefix("gpu-"))


def boards() -> frozenset[str]:
    """The boards of this host (:func:`board` of each GPU's UUID); empty when nvidia-smi cannot tell."""
    return frozenset(b for b in (board(u) for u in query("uuid") or []) if b)
