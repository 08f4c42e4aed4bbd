"""BENCHMARKS.md's search-throughput table: what an ``evo run`` measured per GPU-hour.

A record is an ``evo run --summary-json`` document, kept as
``benchmarks/throughput/<gpu>-<YYYYMMDD>-<sha>-<N>gpu.json`` (the date comes from the file name: the
document has none). One optional key is not the run's own: ``note``, a line added by whoever kept
the record, shown beside it (e.g. a GPU that ran slow for the whole run). The table gives what issue
35 judges a search by: candidates measured per GPU-hour, per busy GPU-hour, where the GPU's time
went (GREEN, screen, full rung), how many screened candidates went on to the full protocol, and the
screen's error against the full score. A search longer than one call of a lent GPU machine runs as
parts that resume one study (``scripts/gpu-throughput.sh``, ``TP_RESUME``); :func:`combine` makes
their summaries one record, each part's start-up counted in its wall time.
"""

from __future__ import annotations

import collections
import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evo.errors import EvoError

FOLDER = "throughput"
_DATE = re.compile(r"-(\d{4})(\d{2})(\d{2})-")


def load(out_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(file name, document)`` of every record under ``out_dir/throughput``, by file name."""
    folder = out_dir / FOLDER
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            records.append((path.name, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError) as exc:
            raise EvoError(f"cannot read throughput record {path}: {exc}") from None
    return records


def combine(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One record of a run made in ``parts`` (``evo run --summary-json`` documents of one study,
    in order): counts, seconds (each part's start, ``first_gpu_s``, too) and screen errors summed over the parts, the rates recomputed from
    the sums, the best as the last part found it, and ``parts`` saying what each one did."""
    if not parts:
        raise EvoError("no parts to combine")
    first = parts[0]
    for key in ("study", "device", "git_sha", "gpus"):
        if len({str(p.get(key)) for p in parts}) != 1:
            raise EvoError(f"the parts differ in {key}: {sorted({str(p.get(key)) for p in parts})}")
    wall = sum(float(p["wall_s"]) for p in parts)
    gpu_hours = wall * int(first["gpus"]) / 3600.0
    busy = sum(float(p.get("gpu_busy_share") or 0.0) * float(p["wall_s"]) for p in parts)
    out: dict[str, Any] = {k: first.get(k) for k in ("study", "source", "device", "git_sha", "workers", "gpus")}
    for key in ("measured", "trials", "screened", "kept"):
        out[key] = sum(int(p.get(key) or 0) for p in parts)
    out["counts"] = _summed([p.get("counts") or {} for p in parts])
    out["gpu_s"] = _summed([p.get("gpu_s") or {} for p in parts])
    out["wall_s"] = wall
    out["candidates_per_gpu_hour"] = out["measured"] / gpu_hours
    out["trials_per_gpu_hour"] = out["trials"] / gpu_hours
    out["gpu_busy_share"] = busy / wall
    out["candidates_per_busy_gpu_hour"] = out["measured"] / (busy * int(first["gpus"]) / 3600.0) if busy else None
    out["screen_errors"] = [e for p in parts for e in p.get("screen_errors") or []]
    out["first_gpu_s"] = _starts(parts)
    out["best"] = parts[-1].get("best")
    out["parts"] = [{k: p.get(k) for k in ("run_id", "measured", "wall_s", "stopped")} for p in parts]
    return out


def _starts(parts: Sequence[Mapping[str, Any]]) -> float | None:
    """The parts' ``first_gpu_s`` summed (each part pays its own start); None where none has one."""
    firsts = [float(p["first_gpu_s"]) for p in parts if p.get("first_gpu_s") is not None]
    return sum(firsts) if firsts else None


def _summed(maps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The parts' values summed key by key."""
    total: collections.Counter[str] = collections.Counter()
    for m in maps:
        total.update(m)
    return dict(total)


def _date(name: str) -> str:
    m = _DATE.search(name)
    return f"{m[1]}-{m[2]}-{m[3]}" if m else "?"


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _row(name: str, doc: Mapping[str, Any]) -> str:
    gpu_s = doc.get("gpu_s") or {}
    parts = " / ".join(_num(gpu_s.get(k), ".0f") for k in ("prime", "GREEN", "screen", "full"))
    errors = [abs(float(e)) for e in doc.get("screen_errors") or []]
    error = f"{statistics.median(errors):.1%} (n={len(errors)})" if errors else "-"
    screened = doc.get("screened") or 0
    kept = f"{screened} / {doc.get('kept', 0)}" if screened else "full only"
    gpus = doc.get("gpus") or 0
    cells = [_date(name), f"`{doc.get('git_sha') or '?'}`", str(doc.get("device") or "-"), str(gpus),
             str(doc.get("measured", "-")), _num(doc.get("wall_s"), ".0f"),
             f"**{_num(doc.get('candidates_per_gpu_hour'), '.0f')}**",
             _num(doc.get("candidates_per_busy_gpu_hour"), ".0f"), parts, kept, error,
             str(doc.get("note", "")).replace("|", "/")]
    return "| " + " | ".join(cells) + " |"


def table(records: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """The section, newest date first (within a date by GPU, then GPU count), or "" without records."""
    rows = sorted(records, key=lambda r: (_date(r[0]), str(r[1].get("device")), r[1].get("gpus") or 0, r[0]),
                  reverse=True)
    if not rows:
        return ""
    head = ("\n## Search throughput (`evo run`)\n\n"
            "Candidates measured per GPU-hour by `evo run` with its defaults (the evo sampler, rungs on "
            "unless the row says full only), from `benchmarks/throughput/*.json` (`evo run --summary-json`; "
            "`scripts/gpu-throughput.sh`). GPU s: the GPU worker's own seconds priming the cached baselines "
            "(- where a record predates that count) / in GREEN / the screen / the full rung. Screened / kept: "
            "candidates screened, and those kept for the full protocol. Screen error: median |screened / full score - 1| over the candidates timed both ways.\n\n"
            "| date | git | GPU | GPUs | candidates | wall s | per GPU-hour | per busy GPU-hour | "
            "GPU s | screened / kept | screen error | note |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(_row(name, doc) for name, doc in rows) + "\n"
