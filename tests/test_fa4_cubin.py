"""scripts/fa4_cubin.py builds FlashAttention-4's kernel where FA4 is installed (Python 3.12 and its DSL:
not evo's test environment); where it is not, it says so in one line and exits 2 instead of a traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fa4_cubin.py"


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="FlashAttention-4 is installed here")
def test_without_flash_attention_4_it_says_so_and_exits_2(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "fa4"), "1", "32", "8", "512", "8192",
                          "128", "--causal"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.startswith("fa4_cubin: ") and len(run.stderr.strip().splitlines()) == 1
    assert "Traceback" not in run.stderr and not list((tmp_path / "fa4").glob("*.cubin"))
