"""Open a database by SQLAlchemy URL and bring its schema to the latest Alembic revision.

SQLite gets WAL, a 30 s busy timeout and foreign keys on every connection; SQLAlchemy (not
the sqlite3 module) emits BEGIN, and connections meant for writing say ``BEGIN IMMEDIATE``,
so two processes writing the same file queue for the lock instead of failing mid-transaction.
Migrations (``db/``) run inside one such transaction when the schema is behind, so a fresh
file, an old file and two processes opening the same new file all end at ``head``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from evo import paths
from evo.errors import EvoError
from evo.store.models import VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config

HEAD = "0001"  # the newest revision under db/versions (tests/test_store.py checks it)
BUSY_TIMEOUT_MS = 30_000
WRITE = {"evo_write": True}  # execution option: begin with BEGIN IMMEDIATE on SQLite


def migrations_dir() -> Path:
    return paths.root() / "db"


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config(stdout=sys.stdout)  # alembic's default is the sys.stdout of its import time
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    return cfg


def make_engine(url: str) -> Engine:
    """An Engine for ``url``; SQLite files get their folder created and the pragmas above."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed)
    except (ArgumentError, NoSuchModuleError, ValueError, OSError) as exc:
        raise EvoError(f"cannot use database URL {url!r}: {exc}") from None
    if engine.dialect.name == "sqlite":
        _sqlite_pragmas(engine)
    return engine


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _begin)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a power cut may lose the last commits
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("evo_write") else "BEGIN")


def current_revision(engine: Engine) -> str | None:
    """The schema revision stored in the database (None for a database evo never opened)."""
    with engine.connect() as conn:
        if not engine.dialect.has_table(conn, VERSION_TABLE):
            return None
        return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def upgrade(engine: Engine) -> None:
    """Run pending migrations in one write transaction; at head, only one SELECT (no alembic)."""
    if current_revision(engine) == HEAD:
        return
    from alembic import command
    from alembic.util import CommandError

    for attempt in range(2):
        try:
            with engine.connect().execution_options(**WRITE) as conn, conn.begin():
                cfg = alembic_config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
            return
        except CommandError as exc:  # e.g. a database migrated by a newer evo
            raise EvoError(f"cannot migrate database: {str(exc).splitlines()[0]}") from None
        except DBAPIError:
            if attempt:  # another process may have migrated concurrently: look once more
                raise


def open_engine(url: str) -> Engine:
    """make_engine + upgrade; any failure to open or migrate is one EvoError line."""
    engine = make_engine(url)
    try:
        upgrade(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise EvoError(f"cannot open database {safe_url(url)}: {detail}") from None
    return engine


def safe_url(url: str) -> str:
    """The URL with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url
