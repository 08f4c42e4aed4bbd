"""Ask ``nvidia-smi`` about the GPUs without initialising CUDA in this process.

The search process must never touch the GPU (docs/design.md, crash isolation), so the arch, the
GPU's name and the driver version are read from nvidia-smi rather than from torch.
"""

from __future__ import annotations

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
