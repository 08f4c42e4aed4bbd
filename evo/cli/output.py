"""What every command prints through: rich consoles, tables that wrap, speedups in words.

Tables keep ids and numbers on one line and wrap free text (a candidate label, a reason) onto
more lines instead of cutting it, so nothing is lost on an 80-column terminal. ``--json``
documents go to stdout whole, one per command; a document asked for in a file is written whole
or not at all.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evo.errors import EvoError

console = Console()
err_console = Console(stderr=True)

BASELINE_WORDS = {
    "sdpa_default": "SDPA's default choice",
    "sdpa_flash": "SDPA's flash backend",
    "sdpa_cudnn": "SDPA's cuDNN backend",
    "sdpa_efficient": "SDPA's memory-efficient backend",
}


def follow_columns() -> None:
    """Size both consoles by ``$COLUMNS`` as it is now. Rich reads it once, when a console is
    made (at import); a process that runs commands in turn with ``$COLUMNS`` changed in between
    (the tests, under pytest-xdist, which exports COLUMNS=80 first) would keep the first width."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        for c in (console, err_console):
            c.width = int(columns)


def table(*columns: str, title: str | None = None, right: tuple[str, ...] = (), wrap: tuple[str, ...] = (),
          **kwargs: Any) -> Table:
    """A rich Table without rules (one space between columns, bold headers). Columns named in
    ``wrap`` (free text: labels, reasons, moves) wrap and fold a long word instead of cutting it;
    the others (ids, numbers) never break. ``right`` names right-aligned columns."""
    kwargs.setdefault("collapse_padding", True)
    kwargs.setdefault("box", None)
    t = Table(title=title, title_justify="left", **kwargs)
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left", no_wrap=name not in wrap,
                     overflow="fold" if name in wrap else "ellipsis")
    return t


def speedup_words(speedup: float, baseline: str) -> str:
    """``x1.25`` -> "1.25x faster than SDPA's flash backend"; below 1 it says slower, by how much."""
    who = BASELINE_WORDS.get(baseline, baseline)
    if speedup >= 1:
        return f"{speedup:.2f}x faster than {who}"
    return f"{1 / speedup:.2f}x slower than {who}"


def print_json(document: Any) -> None:
    """One JSON document on stdout, indented (the API's documents are JSON-ready: NaN is null)."""
    sys.stdout.write(json.dumps(document, indent=1, allow_nan=False) + "\n")


def check_writable(path: Path) -> None:
    """EvoError unless a file can be written at ``path``: its folder exists and is writable, and
    it is not a folder. Checked before a command's work, so that a long search does not end
    with nowhere to write its summary."""
    folder = path.parent
    if not folder.is_dir():
        raise EvoError(f"folder {folder} does not exist")
    if path.is_dir():
        raise EvoError(f"{path} is a folder, not a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EvoError(f"cannot write in folder {folder}")


def write_json(path: Path, document: Any) -> None:
    """``document`` as indented JSON in ``path``, atomically: written to a temporary file beside
    it, then renamed over it, so that a reader never sees half a file. EvoError when it cannot
    be written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise EvoError(f"cannot write {path}: {exc.strerror or exc}") from None
