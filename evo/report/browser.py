"""Open a report in headless Chromium: what the page drew, the errors it met, a screenshot.

Chromium runs with every host name unresolvable, so a page that tried to fetch anything
would log a failed load. The page's own script writes a summary into
``#evo-report-summary`` after drawing (traces, data points and SVG marks per plot, lineage
nodes, errors it caught); :func:`inspect` reads it from the DOM Chromium dumps, and collects
the console lines that report errors from Chromium's log.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evo.errors import EvoError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=30000", "--hide-scrollbars")
TIMEOUT_S = 240
SHOT_WIDTH, SHOT_HEIGHT = 1400, 2600
_SUMMARY = re.compile(r'<output id="evo-report-summary"[^>]*>(.*?)</output>', re.S)
_ERROR = re.compile(r"Uncaught|Error|Failed to load|net::ERR")


@dataclass(frozen=True)
class PageCheck:
    """What one headless load of the page showed: its summary (None if its script never
    finished) and the console lines that report an error."""

    summary: dict[str, Any] | None
    console_errors: list[str]


def find_browser() -> str | None:
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


def _run(exe: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="evo-chromium-") as profile:
        try:
            done = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                                  text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EvoError(f"headless Chromium failed: {exc}") from None
    if done.returncode != 0:
        raise EvoError(f"headless Chromium exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done


def console_errors(log: str) -> list[str]:
    """Chromium log lines of console messages and loads that report an error."""
    lines = [ln for ln in log.splitlines() if ":CONSOLE" in ln or "net::ERR" in ln]
    return [ln for ln in lines if _ERROR.search(ln)]


def inspect(page: Path, exe: str, fragment: str = "") -> PageCheck:
    """Load ``page`` (with ``#fragment``, e.g. ``node=ID`` to select a node) and read what it drew."""
    done = _run(exe, "--dump-dom", page.resolve().as_uri() + (f"#{fragment}" if fragment else ""))
    m = _SUMMARY.search(done.stdout)
    summary = json.loads(html.unescape(m.group(1))) if m and m.group(1).strip() else None
    return PageCheck(summary, console_errors(done.stderr))


def screenshot(page: Path, png: Path, exe: str, width: int = SHOT_WIDTH, height: int = SHOT_HEIGHT) -> list[str]:
    """Save a ``width`` x ``height`` screenshot of the top of ``page``; returns console errors."""
    done = _run(exe, f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri())
    if not png.is_file():
        raise EvoError(f"headless Chromium wrote no screenshot to {png}")
    return console_errors(done.stderr)
