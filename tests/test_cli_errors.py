"""How the CLI ends a command that did not finish: Ctrl-C is 130, an evo bug is one line and
exit 1 (a traceback only with EVO_DEBUG=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.cli import main
from evo.store import open_store


@pytest.fixture
def db(tmp_path: Path) -> str:
    open_store(f"sqlite:///{tmp_path / 'evo.sqlite'}").close()
    return str(tmp_path / "evo.sqlite")


def _raise(exc: BaseException):  # noqa: ANN202 - a stand-in for any API function
    def fail(*args: object, **kwargs: object) -> None:
        raise exc
    return fail


def test_ctrl_c_exits_130(db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("evo.api.lineage_graph", _raise(KeyboardInterrupt()))
    assert main(["lineage", "--db", db]) == 130
    assert capsys.readouterr().err.strip() == "evo: interrupted"  # click ends the ^C line first


def test_a_bug_is_one_line_unless_debugging(db: str, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("evo.api.lineage_graph", _raise(ZeroDivisionError("oops")))
    monkeypatch.delenv("EVO_DEBUG", raising=False)
    assert main(["lineage", "--db", db]) == 1
    assert capsys.readouterr().err == "evo: internal error: ZeroDivisionError: oops (EVO_DEBUG=1 for a traceback)\n"
    monkeypatch.setenv("EVO_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["lineage", "--db", db])
