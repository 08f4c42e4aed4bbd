"""``evo show`` prints what makes an evaluation reproducible and its timings attributable: the
GREEN seed (salt), how many cases were drawn, how many timed outputs were checked, the cubin and the
board (the GPU's UUID: two boards of one kind read the same kernel several % apart)."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_fixture import CHILD, FIXTURES, evaluation, populate

from evo.cli import main
from evo.store import open_store


def test_show_prints_the_seed_draws_checked_outputs_and_cubin(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.setenv("COLUMNS", "200")
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        populate(store)
        ev = evaluation(CHILD, 4.0)
        ev.device |= {"salt": "123456", "green_drawn": "12", "fast_outputs_checked": "130",
                      "cubin_sha256": "f00d" * 16, "gpu_uuid": "8a2d" * 8}
        store.record_evaluation(ev)
    assert main(["show", CHILD[:8], "--db", url]) == 0
    out = capsys.readouterr().out
    assert ("salt 123456, green_drawn 12, fast_outputs_checked 130, cubin_sha256 f00df00df00df00d, "
            "board 8a2d8a2d8a2d8a2d") in out
