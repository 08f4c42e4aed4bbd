"""Open a database by SQLAlchemy URL and bring its schema to the latest Alembic revision.

Several processes (workers on one host, or on many hosts over PostgreSQL) write the same
database, and every write transaction of the store is serialized so that its read-then-write
steps (insert a candidate unless it exists, take a claim unless it is held) are atomic:

- SQLite gets WAL, a 30 s busy timeout and foreign keys on every connection; SQLAlchemy (not
  the sqlite3 module) emits BEGIN, and connections meant for writing say ``BEGIN IMMEDIATE``,
  so processes writing the same file queue for the lock instead of failing mid-transaction.
- PostgreSQL: a write transaction first takes a transaction-level advisory lock
  (``pg_advisory_xact_lock``), the same queue on a server shared by many hosts.

Migrations (``db/``) run inside one such transaction when the schema is behind, so a fresh
database, an old one and several processes opening the same new one all end at ``head``.
A SQLite file on storage evo cannot write is opened read-only instead (:func:`read_only_url`):
no WAL, no migration, and a schema behind ``head`` is an error rather than a write.
:func:`schema_lock` serializes the set-up of a database (evo's migration, Optuna's tables,
creating a study) between processes that start together.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
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

HEAD = "0006"  # the newest revision under db/versions (tests/test_store.py checks it)
BUSY_TIMEOUT_MS = 30_000
WRITE = {"evo_write": True}  # execution option: a serialized write transaction (see module docstring)
WRITE_LOCK = 0x65766F5F7772  # pg advisory lock key of store writes ("evo_wr"); ProcessLock hashes its name
SQLITE_WORKERS = 4  # beyond this many workers on one SQLite file, PostgreSQL is the advice
POSTGRES_HINT = (f"SQLite serializes every write, which suits up to {SQLITE_WORKERS} workers on one host; "
                 "for more, or for several hosts, use PostgreSQL (--db postgresql+psycopg://USER@HOST/DB, "
                 "pip install 'evo-kernels[postgres]'; docs/scale-out.md)")


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
        path = paths.sqlite_file(url)
        if path is not None and not is_read_only(url):
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, **({"pool_pre_ping": True} if parsed.get_backend_name() == "postgresql"
                                          else {}))
    except ImportError as exc:  # the URL's driver is not installed
        raise EvoError(f"cannot use database URL {safe_url(url)}: {exc} "
                       "(pip install 'evo-kernels[postgres]' for PostgreSQL)") from None
    except (ArgumentError, NoSuchModuleError, ValueError, OSError) as exc:
        raise EvoError(f"cannot use database URL {url!r}: {exc}") from None
    if engine.dialect.name == "sqlite":
        _sqlite_pragmas(engine, read_only=is_read_only(url))
    elif engine.dialect.name == "postgresql":
        _postgres_write_lock(engine)
    return engine


def _sqlite_pragmas(engine: Engine, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _begin)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only:  # the journal mode is the file's: a reader can neither set it nor need to
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a power cut may lose the last commits
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("evo_write") else "BEGIN")


def _postgres_write_lock(engine: Engine) -> None:
    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        if conn.get_execution_options().get("evo_write"):
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")


def normalize_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` name psycopg 3 (the ``postgres`` extra), not
    SQLAlchemy's default psycopg2; other URLs are returned as they are."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def writable(path: Path) -> bool:
    """Whether evo can write the SQLite file ``path``: the file, when it exists, and the folder
    it is in (WAL mode keeps its -wal and -shm files beside it), or, for a file and folders not
    made yet, the nearest folder above that exists. ``os.access`` asks the kernel, so a
    read-only mount or an immutable folder says no to root too."""
    if path.exists() and not os.access(path, os.W_OK):
        return False
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK)


def sqlite_header_error(path: Path) -> str:
    """Why ``path`` is not an SQLite database file to read ("" when it is one): a missing file, or
    another file (a gzipped dump passed as it is, a typo), in one line rather than sqlite3's traceback."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return "" if head == b"SQLite format 3\x00" else f"{path}: not an SQLite database (gunzip a .sqlite.gz first)"


def is_read_only(url: str) -> bool:
    """Whether ``url`` opens its SQLite file read-only (:func:`read_only_url`)."""
    try:
        return make_url(url).query.get("mode") == "ro"
    except ArgumentError:
        return False


def read_only_url(url: str) -> str:
    """``url`` opening its SQLite file read-only, as an SQLite URI: ``mode=ro``, so that nothing
    is written, and ``immutable=1`` unless the file's -wal and -shm files are there to read (a
    WAL reader must otherwise create them, which a read-only folder forbids; immutable tells
    SQLite that nothing writes the file, as holds on read-only storage). Any other URL is
    returned as it is."""
    path = paths.sqlite_file(url)
    if path is None or is_read_only(url):
        return url
    query = {"mode": "ro", "uri": "true"}
    if not all(path.with_name(path.name + suffix).is_file() for suffix in ("-wal", "-shm")):
        query["immutable"] = "1"
    located = make_url(url).set(database="file:" + urllib.parse.quote(str(path.resolve())), query=query)
    return located.render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    try:
        return make_url(url).get_backend_name() == "sqlite"
    except ArgumentError:
        return False


class ProcessLock:
    """A lock that every process using one database shares, held with ``with``: an SQLite
    file's lock file (``<file>.<name>.lock``, flock: the processes of one host, which is all
    SQLite serves) or a PostgreSQL session advisory lock on a connection of its own (any host);
    for an in-memory SQLite database and other servers, only a lock within this process."""

    def __init__(self, url: str, name: str) -> None:
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise EvoError(f"cannot use database URL {url!r}: {exc}") from None
        self.url, self.name = url, name
        self.backend = parsed.get_backend_name()
        self._local = threading.Lock()
        self._path: Path | None = None
        self._file: Any = None
        self._engine: Engine | None = None
        self._conn: Any = None
        if self.backend == "sqlite" and parsed.database not in (None, "", ":memory:"):
            self._path = Path(parsed.database).expanduser().with_name(Path(parsed.database).name + f".{name}.lock")
        self._key = int.from_bytes(hashlib.sha256(f"evo:{name}".encode()).digest()[:7], "big")

    def __enter__(self) -> ProcessLock:
        self._local.acquire()
        try:
            if self._path is not None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self._path, "a")
                fcntl.flock(self._file, fcntl.LOCK_EX)
            elif self.backend == "postgresql":
                self._pg_lock()
        except BaseException:
            self._local.release()
            raise
        return self

    def _pg_lock(self) -> None:
        try:
            if self._conn is None:
                self._engine = make_engine(self.url)
                self._conn = self._engine.connect()
            self._conn.exec_driver_sql(f"SELECT pg_advisory_lock({self._key})")
            self._conn.commit()
        except SQLAlchemyError as exc:
            self.close()
            raise EvoError(f"cannot lock database {safe_url(self.url)}: {describe(exc)}") from None

    def __exit__(self, *exc: object) -> None:
        try:
            if self._file is not None:
                fcntl.flock(self._file, fcntl.LOCK_UN)
                self._file.close()
                self._file = None
            elif self._conn is not None:
                try:
                    self._conn.exec_driver_sql(f"SELECT pg_advisory_unlock({self._key})")
                    self._conn.commit()
                except SQLAlchemyError:
                    self.close()  # a closed session holds no lock
        finally:
            self._local.release()

    def close(self) -> None:
        """Drop the connection a PostgreSQL lock keeps (between uses it holds no lock)."""
        if self._conn is not None:
            with contextlib.suppress(SQLAlchemyError):  # a dead connection: nothing left to release
                self._conn.close()
        if self._engine is not None:
            self._engine.dispose()
        self._conn = self._engine = None


@contextmanager
def schema_lock(url: str) -> Iterator[None]:
    """Hold the database's ``schema`` :class:`ProcessLock` while it is set up, so that processes
    that start together create evo's and Optuna's tables, and a study with its settings, one
    after the other. Alembic, which that set-up imports on its first use in a process (evo's
    migrations; Optuna's storage checks its schema version with it), is imported before the lock
    is taken: under it, four workers starting together on two cores imported it one after another,
    a fifth of a second of CPU each, and the last began its search that much later (issue 35)."""
    import alembic.command  # noqa: F401  (with the package, its config, runtime and script modules)
    import alembic.config  # noqa: F401
    import alembic.migration  # noqa: F401

    lock = ProcessLock(url, "schema")
    try:
        with lock:
            yield
    finally:
        lock.close()


def describe(exc: BaseException) -> str:
    """One line for a database error; SQLite's "database is locked" says what to do instead."""
    orig = getattr(exc, "orig", None) or exc.__cause__ or exc
    line = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    if "database is locked" in line:
        return f"{line} (other processes held the SQLite file for more than {BUSY_TIMEOUT_MS // 1000} s). " \
               + POSTGRES_HINT
    return line


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


def require_head(engine: Engine, url: str) -> None:
    """EvoError unless the schema is at ``head``: a database opened read-only cannot be migrated."""
    revision = current_revision(engine)
    if revision != HEAD:
        where = paths.sqlite_file(url) or safe_url(url)
        raise EvoError(f"cannot read {where} read-only: its schema is at {revision or 'no evo revision'}, this "
                       f"evo reads {HEAD}; open it once where evo can write it, which migrates it")


def open_engine(url: str) -> Engine:
    """make_engine + upgrade (read-only: the schema checked instead); any failure to open or
    migrate is one EvoError line."""
    engine = make_engine(url)
    try:
        if is_read_only(url):
            require_head(engine, url)
        else:
            upgrade(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise EvoError(f"cannot open database {safe_url(url)}: {describe(exc)}") from None
    except EvoError:
        engine.dispose()
        raise
    return engine


def safe_url(url: str) -> str:
    """The URL with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url
