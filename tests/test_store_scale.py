"""The store under many workers: migrations on PostgreSQL as on SQLite, workers that open a fresh
database together, claims, and a clear message when an SQLite file stays locked."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from evo.errors import EvoError
from evo.store import open_store
from evo.store import engine as engine_mod
from evo.store.engine import HEAD, alembic_config, current_revision, make_engine
from evo.store.models import PREFIX, VERSION_TABLE, Base
from pg_fixture import pg_url  # noqa: F401  (fixture)
from store_fixture import FIXTURES, populate

EVO_TABLES = {t.name for t in Base.metadata.sorted_tables}


@pytest.fixture(autouse=True)
def _templates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'evo.sqlite'}"
    return request.getfixturevalue("pg_url")


def schema_diff(url: str) -> list:
    """What the migrated schema lacks or has beyond the models (evo's tables only)."""
    engine = make_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "compare_type": True,
            "include_object": lambda o, name, kind, *_: kind != "table" or (name.startswith(PREFIX)
                                                                       and name != VERSION_TABLE)})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    return diff


def test_migrations_build_the_models_schema_and_go_down_and_up_again(url: str) -> None:
    open_store(url).close()
    engine = make_engine(url)
    assert current_revision(engine) == HEAD
    assert set(inspect(engine).get_table_names()) >= EVO_TABLES
    assert schema_diff(url) == []
    with engine.connect().execution_options(**engine_mod.WRITE) as conn, conn.begin():
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert not EVO_TABLES & set(inspect(engine).get_table_names())
    engine.dispose()
    open_store(url).close()
    assert schema_diff(url) == []


def test_a_lineage_round_trips(url: str) -> None:
    with open_store(url) as store:
        ids = populate(store)
        rec = store.get(ids["child"])
        assert [e.parent_id for e in rec.parents] == [ids["parent"]]
        assert rec.evaluations[0].checks[1].max_abs_err != rec.evaluations[0].checks[1].max_abs_err  # NaN
        assert [(t.study, t.number, t.state) for t in rec.trials] == [("s1", 0, "COMPLETE")]


def test_a_claim_is_held_once_and_taken_over_only_from_its_holder(url: str) -> None:
    with open_store(url) as store:
        assert store.claim("b" * 64, "gpu", 7, "s", 0) == (7, "s")
        assert store.claim("b" * 64, "gpu", 8, "t", 1) == (7, "s")
        assert store.claim("b" * 64, "other gpu", 8, "t", 1) == (8, "t")
        assert not store.take_over("b" * 64, "gpu", 5, 8, "t", 1)
        assert store.take_over("b" * 64, "gpu", 7, 8, "t", 1)
        assert store.claim("b" * 64, "gpu", 9, "s", 2) == (8, "t")


def test_a_run_past_its_lease_is_failed_once_and_a_renewed_or_unleased_one_never(url: str) -> None:
    with open_store(url) as store:
        dead, live = (store.start_run("evo run", study="s", lease_s=1) for _ in range(2))
        unleased = store.start_run("evo build")  # a command that does not beat
        store.renew_run(live, 60)
        assert store.fail_expired_runs() == []
        time.sleep(2.3)  # SQLite's clock has 1 s resolution
        assert store.fail_expired_runs() == [dead] and store.fail_expired_runs() == []
        assert [store.get_run(r).status for r in (dead, live, unleased)] == ["failed", "running", "running"]
        assert store.get_run(dead).finished is not None


def test_a_run_past_its_lease_reads_as_expired_and_reading_writes_nothing(url: str) -> None:
    with open_store(url) as store:
        dead, live = (store.start_run("evo run", study="s", lease_s=1) for _ in range(2))
        store.renew_run(live, 60)
        assert not store.get_run(dead).lease_expired  # within its lease
        time.sleep(2.3)  # SQLite's clock has 1 s resolution
        views = store.runs("s")
        assert [(v.id, v.status, v.lease_expired) for v in views] == [(dead, "running", True), (live, "running", False)]
        m = re.fullmatch(r"running \(lease expired (.+) UTC\)", views[0].status_text)
        assert m and views[1].status_text == "running"
        ended = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        started = views[0].started if views[0].started.tzinfo else views[0].started.replace(tzinfo=UTC)  # SQLite's
        assert abs(ended - started - timedelta(seconds=1)) < timedelta(seconds=3)  # shown in UTC
        assert store.get_run(dead).status == "running"  # reading marked nothing failed
        assert store.fail_expired_runs() == [dead]
        assert store.get_run(dead).status_text == "failed"


OPEN_ALL = """
import sys
from evo.search.study import open_study, storage
from evo.store import open_store
from evo.store.engine import schema_lock
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url = sys.argv[1]
with schema_lock(url):
    open_store(url).close()
    study = open_study(storage(url), "s", optuna.samplers.RandomSampler(), {"cases": [sys.argv[2]]},
                       ["maximize"], ["geomean"])
print(study.user_attrs["evo:settings"]["cases"][0])
"""


def test_workers_that_start_together_set_up_one_database_and_one_study(url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_ALL, url, f"F{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-800:] for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1  # the first settings stuck; nobody overwrote them
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1  # Optuna's
        assert conn.exec_driver_sql("SELECT count(*) FROM evo_alembic_version").scalar() == 1
        assert conn.exec_driver_sql("SELECT count(*) FROM studies").scalar() == 1
    engine.dispose()


LOCK_AFTER_ALEMBIC = """
import sys
from evo.store import engine
print("alembic" in sys.modules)
real = engine.ProcessLock.__enter__
def enter(self):
    print(all(m in sys.modules for m in ("alembic.command", "alembic.config", "alembic.migration", "alembic.script")))
    return real(self)
engine.ProcessLock.__enter__ = enter
with engine.schema_lock(sys.argv[1]):
    pass
"""


def test_the_schema_lock_is_taken_with_alembic_imported_already(url: str) -> None:
    """Workers that start together import Alembic at once, not in turn under the lock (issue 35)."""
    out = subprocess.run([sys.executable, "-c", LOCK_AFTER_ALEMBIC, url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.split() == ["False", "True"]


def test_an_sqlite_file_locked_too_long_is_one_line_naming_postgresql(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "evo.sqlite"
    open_store(f"sqlite:///{path}").close()
    monkeypatch.setattr(engine_mod, "BUSY_TIMEOUT_MS", 200)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another worker in the middle of a long write
    try:
        with open_store(f"sqlite:///{path}") as store, pytest.raises(EvoError) as err:
            store.start_run("evo run", study="s")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    text = str(err.value)
    assert "\n" not in text and "database is locked" in text and "PostgreSQL" in text
