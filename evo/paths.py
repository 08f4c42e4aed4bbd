"""Where evo's files live: read-only resources shipped with evo, and the user's writable data.

Resources (``root()``): the kernel families under ``templates/``, the GREEN and FAST suites
under ``acceptance/``, the recorded sweep under ``data/`` and the Alembic migrations under
``db/``. In a source checkout (``pip install -e .``, or ``PYTHONPATH`` pointing at it) they are
the checkout's top-level folders; an installed wheel carries them as package data under
``evo/_resources/`` (mapped there by ``setup.py``), found through :mod:`importlib.resources`.

User data (``home()``): the SQLite database ``db/evo.sqlite``, the build cache
``candidates/``, ``evo bench`` output ``benchmarks/`` and exported recordings ``data/``.
``$EVO_HOME`` names the folder; otherwise a checkout keeps them beside the code (as it always
has) and an installed evo uses ``$XDG_DATA_HOME/evo`` (``~/.local/share/evo``).

Further overrides: ``$EVO_DB`` (database URL or file), ``$EVO_CANDIDATES`` (build cache),
``$EVO_TEMPLATE_PATH`` (extra family folders, os.pathsep separated, e.g. the test-only fault
family).
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import subprocess
import urllib.parse
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from evo.errors import EvoError

PACKAGED = "_resources"  # the folder inside the installed package that holds the resources
RESOURCES = ("templates", "acceptance", "data", "db")


def source_tree() -> Path | None:
    """The checkout this package runs from, or None when evo is installed (e.g. from a wheel)."""
    tree = Path(__file__).resolve().parent.parent
    return tree if (tree / "pyproject.toml").is_file() and (tree / "templates").is_dir() else None


@functools.cache
def root() -> Path:
    """The folder holding ``templates/``, ``acceptance/``, ``data/`` and ``db/`` (migrations)."""
    packaged = importlib.resources.files("evo") / PACKAGED
    if packaged.is_dir():
        if not isinstance(packaged, Path):  # e.g. imported from a zip: nvcc and Jinja need real files
            raise EvoError(f"evo's resources are not plain files ({packaged}); install evo unpacked")
        return packaged
    tree = source_tree()
    if tree is None:
        raise EvoError(f"evo's resources ({', '.join(RESOURCES)}) are missing next to "
                       f"{Path(__file__).parent}; reinstall evo")
    return tree


def home() -> Path:
    """The writable folder for the database, the build cache, benchmarks and exported recordings."""
    env = os.environ.get("EVO_HOME")
    if env:
        return Path(env).expanduser().resolve()
    tree = source_tree()
    if tree is not None:
        return tree
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "evo"


def template_dirs() -> list[Path]:
    """Folders searched for family folders, in priority order."""
    extra = [Path(p) for p in os.environ.get("EVO_TEMPLATE_PATH", "").split(os.pathsep) if p]
    return [root() / "templates", *extra]


def candidates_dir() -> Path:
    """The content-addressed build cache (``$EVO_CANDIDATES`` overrides)."""
    env = os.environ.get("EVO_CANDIDATES")
    return Path(env) if env else home() / "candidates"


def default_db_file() -> Path:
    """Where the default SQLite database lives."""
    return home() / "db" / "evo.sqlite"


def db_url(value: str) -> str:
    """A ``--db`` value as a SQLAlchemy URL: a URL stays as it is (a bare ``postgresql://``
    gets the psycopg 3 driver that ``evo-kernels[postgres]`` installs); anything without
    ``://`` is a SQLite file path, made absolute."""
    if "://" not in value:
        return f"sqlite:///{Path(value).expanduser().resolve()}"
    scheme, rest = value.split("://", 1)
    return f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else value


def default_db_url() -> str:
    """``$EVO_DB`` (a URL or a file path), else the SQLite file :func:`default_db_file`."""
    env = os.environ.get("EVO_DB")
    return db_url(env) if env else f"sqlite:///{default_db_file()}"


def sqlite_file(url: str) -> Path | None:
    """The file behind a SQLite URL (None for another database or an in-memory one), also when
    the URL names it as an SQLite URI (``sqlite:///file:/path?mode=ro&uri=true``, how a database
    on read-only storage is opened)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    if parsed.query.get("uri") == "true" and parsed.database.startswith("file:"):
        return Path(urllib.parse.unquote(parsed.database.removeprefix("file:").split("?", 1)[0]))
    return Path(parsed.database).expanduser()


def acceptance_dir() -> Path:
    return root() / "acceptance"


def git_sha() -> str | None:
    """The full sha of the commit evo's code is at: ``$EVO_GIT_SHA`` when set (scripts/gpu-check.sh
    sets it, since the GPU host gets a copy of the working tree without ``.git``), else the HEAD
    of the checkout evo runs from. None when neither is known: an evo installed from a wheel, or
    a copy of the tree that is not a git checkout of its own (even inside another repository,
    whose commit says nothing about evo's code). The one place provenance takes a commit from:
    runs, recordings, benchmark records and promoted packages all record this value."""
    env = os.environ.get("EVO_GIT_SHA", "").strip()
    if env:
        return env
    tree = source_tree()
    if tree is None:
        return None
    try:
        out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != tree.resolve():
        return None
    return lines[1]
