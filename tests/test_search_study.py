"""A study's stored settings name the FAST cases its lineage is scored on."""

from __future__ import annotations

from pathlib import Path

import optuna

from evo.search.study import SETTINGS, study_cases
from evo.store import open_store


def test_study_cases_come_from_the_stored_settings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    open_store(url).close()
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.set_user_attr(SETTINGS, {"cases": ["F1-fp16", "F3c-fp16"]})
    assert [(s.case, s.causal) for s in study_cases(url, "s")] == [("F1", False), ("F3", True)]
    assert study_cases(url, "no-such-study") is None
