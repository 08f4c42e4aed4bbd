"""A study's stored settings name the FAST cases its lineage is scored on."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from evo.errors import EvoError
from evo.search.study import SETTINGS, read_storage, study_cases
from evo.store import open_store


def test_study_cases_come_from_the_stored_settings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    open_store(url).close()
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.set_user_attr(SETTINGS, {"cases": ["F1-fp16", "F3c-fp16"]})
    assert [(s.case, s.causal) for s in study_cases(url, "s")] == [("F1", False), ("F3", True)]
    assert study_cases(url, "no-such-study") is None


def test_reading_a_database_without_studies_creates_no_optuna_tables(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, inspect

    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    open_store(url).close()
    assert study_cases(url, "s") is None and read_storage(url) is None
    assert not inspect(create_engine(url)).has_table("studies")
    assert read_storage(f"sqlite:///{tmp_path / 'absent.sqlite'}") is None
    assert not (tmp_path / "absent.sqlite").exists()


def test_a_database_that_cannot_be_read_is_an_error_not_no_study(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-database.sqlite"
    bad.write_bytes(b"this is not an SQLite file" * 100)
    with pytest.raises(EvoError, match="cannot read the studies"):
        study_cases(f"sqlite:///{bad}", "s")
