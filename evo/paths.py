"""Where evo's files live: the project root (templates, acceptance suites, candidate cache, db).

The root defaults to the checkout that holds this package (``pip install -e .``) and can be
moved with ``EVO_HOME``; extra template folders (e.g. the test-only fault family) are added
with ``EVO_TEMPLATE_PATH`` (os.pathsep separated).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def root() -> Path:
    """The project root: ``$EVO_HOME`` or the folder above the ``evo`` package."""
    env = os.environ.get("EVO_HOME")
    return Path(env).resolve() if env else Path(__file__).resolve().parent.parent


def template_dirs() -> list[Path]:
    """Folders searched for family folders, in priority order."""
    extra = [Path(p) for p in os.environ.get("EVO_TEMPLATE_PATH", "").split(os.pathsep) if p]
    return [root() / "templates", *extra]


def candidates_dir() -> Path:
    """The content-addressed build cache (``$EVO_CANDIDATES`` overrides)."""
    env = os.environ.get("EVO_CANDIDATES")
    return Path(env) if env else root() / "candidates"


def default_db_url() -> str:
    """SQLite file under ``db/`` unless ``$EVO_DB`` names another SQLAlchemy URL."""
    return os.environ.get("EVO_DB") or f"sqlite:///{root() / 'db' / 'evo.sqlite'}"


def acceptance_dir() -> Path:
    return root() / "acceptance"


def git_sha() -> str | None:
    """The checkout's HEAD commit, or ``$EVO_GIT_SHA`` (set by scripts/gpu-check.sh, since the
    GPU host gets a copy of the working tree without ``.git``); None when neither is known."""
    env = os.environ.get("EVO_GIT_SHA", "").strip()
    if env:
        return env
    try:
        out = subprocess.run(["git", "-C", str(root()), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None
