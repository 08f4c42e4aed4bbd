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


def test_a_board_is_its_uuid_as_32_hex_digits_however_written() -> None:
    """nvidia-smi writes GPU-<uuid>, torch the bare dashed form: both name one board."""
    assert smi.board("GPU-8A2D1c3e-0b6f-4a1e-9c2d-5e6f7a8b9c0d") == "8a2d1c3e0b6f4a1e9c2d5e6f7a8b9c0d"
    assert smi.board("8a2d1c3e-0b6f-4a1e-9c2d-5e6f7a8b9c0d") == smi.board("GPU-8a2d1c3e-0b6f-4a1e-9c2d-5e6f7a8b9c0d")
    assert smi.board("") == ""


def test_the_hosts_boards_come_from_nvidia_smi_and_none_without_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, 'echo "GPU-00000000-0000-0000-0000-00000000000a"; '
                                     'echo "GPU-00000000-0000-0000-0000-00000000000b"')
    assert smi.boards() == {"0" * 31 + "a", "0" * 31 + "b"}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert smi.boards() == frozenset()


@pytest.mark.gpu
def test_a_workers_device_info_names_a_board_of_this_host() -> None:
    """What promote recalls a confirmation by (evo.products.confirm.stored): the UUID torch gives the
    worker's GPU, read the way nvidia-smi writes this host's."""
    from evo.gpu.evaluate import device_info

    info = device_info()
    assert len(info["gpu_uuid"]) == 32 and info["gpu_uuid"] in smi.boards()
