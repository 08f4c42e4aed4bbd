"""nvidia-smi queries: one value per GPU, None when the tool is missing or fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from evo.toolchain import smi


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + body + "\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")


def test_one_value_per_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, 'echo "NVIDIA H200"; echo "NVIDIA H100 80GB HBM3"')
    assert smi.query("name") == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]


def test_a_failing_tool_gives_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert smi.query("driver_version") is None


def test_a_missing_tool_gives_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert smi.query("name") is None
