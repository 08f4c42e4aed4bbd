"""What the report shows, read from a lineage database into plain, JSON-ready data.

Nothing here writes to the database: Optuna's tables are opened without creating any, and
insights are computed, not saved. The sections:

- ``progress``: per study and sampler, every trial in order with the evaluation it cost (a
  distinct candidate looked up: neither invalid, nor abandoned, nor answered from the store)
  and the best value so far; ``reach``: evaluations each study needed to come within 2% of
  the best value among the studies shown.
- ``cases``: per FAST case the winning candidate and the best candidate overall, each with
  every backend timed beside it (median, p20, p80), on one device; ``heatmap``: the top
  candidates' speedups per case; ``gemm_tflops``: the dense GEMM rate measured with them, if any.
- ``failures``: failed candidates, and trials that never made one, counted by reason.
- ``insights``: moves, resources and parameter importances (:mod:`evo.analysis.insights`).

Benchmark records (``evo bench`` JSON) and the replay sampler benchmark are read from files
(:func:`load_bench`, :func:`load_sampler_benchmark`): they are the runs that measured the GEMM
rate beside the kernels, and the sampler comparison on a recording.
"""

from __future__ import annotations

import collections
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evo.analysis import insights as insights_mod
from evo.errors import EvoError
from evo.analysis.lineage import Lineage
from evo.results import Status, Timing
from evo.scoring import geomean, latest
from evo.samplerbench.stats import quartiles
from evo.search.study import read_storage
from evo.store import Store, short_id
from evo.vocab import EVO

TOLERANCE = 0.02   # "within 2% of the best": how near a study must come to count as reaching it
HEATMAP_ROWS = 20  # candidates in the speedup heatmap
NOT_EVALUATIONS = frozenset({"invalid", "abandoned"})
_LABEL = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\([^()]*\)")      # a candidate label: family(K=V, ...)
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(?![A-Za-z0-9_])")


# ----------------------------------------------------------------------------- search progress


def optuna_storage(store: Store) -> optuna.storages.RDBStorage | None:
    """Optuna's storage on the same database, opened read-only in effect (no table is created);
    None when the database holds no Optuna tables (e.g. only ``evo build`` ever wrote to it)."""
    return read_storage(store.url)


def study_trials(storage: optuna.storages.RDBStorage | None, study: str | None) -> dict[str, list[FrozenTrial]]:
    """Trials of ``study`` (or of every study), by study name, in trial-number order."""
    if storage is None:
        if study is not None:
            raise EvoError(f"no study {study!r} in the database (it holds no Optuna study)")
        return {}
    names = [s.study_name for s in storage.get_all_studies()]
    if study is not None:
        if study not in names:
            raise EvoError(f"no study {study!r} in the database; studies: {', '.join(names) or 'none'}")
        names = [study]
    out = {}
    for name in names:
        sid = storage.get_study_id_from_name(name)
        out[name] = sorted(storage.get_all_trials(sid, deepcopy=False), key=lambda t: t.number)
    return out


def trial_value(t: FrozenTrial) -> float | None:
    """A completed trial's value (the geometric mean when it has several objectives)."""
    if t.state != TrialState.COMPLETE or not t.values or min(t.values) <= 0:
        return None
    return geomean(t.values)


def run_of(t: FrozenTrial) -> int | None:
    """The evo run that evaluated a trial (``evo run`` stamps its id on every trial it asks)."""
    rid = t.system_attrs.get("evo:run")
    try:
        return int(rid) if rid is not None else None
    except (TypeError, ValueError):
        return None


def progress(store: Store, trials: Mapping[str, Sequence[FrozenTrial]]) -> list[dict[str, Any]]:
    """One series per study and sampler: each finished trial with the evaluations spent so far in
    its study and the study's best value so far (a study resumed with another sampler is split)."""
    runs: dict[int, str] = {}

    def sampler_of(t: FrozenTrial) -> str:
        rid = run_of(t)
        if rid is None:
            return "?"
        if rid not in runs:
            run = store.get_run(rid)
            runs[rid] = str(run.options.get("sampler", "?")) if run else "?"
        return runs[rid]

    series: dict[tuple[str, str], dict[str, Any]] = {}
    for name, ts in trials.items():
        spent, best = 0, None
        for t in ts:
            if not t.state.is_finished():
                continue
            status = str(t.user_attrs.get("status", t.state.name.lower()))
            evaluation = status not in NOT_EVALUATIONS and not t.user_attrs.get("reused", False)
            spent += evaluation
            value = trial_value(t)
            if value is not None and (best is None or value > best):
                best = value
            sampler = sampler_of(t)
            s = series.setdefault((name, sampler), {"study": name, "sampler": sampler, "points": []})
            s["points"].append({"trial": t.number, "evaluations": spent, "evaluation": evaluation,
                                "value": value, "best": best, "status": status,
                                "candidate": t.user_attrs.get("candidate"), "label": t.user_attrs.get("label", "")})
    return list(series.values())


def reach(series: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per study: evaluations until its best came within 2% of the best of all studies shown."""
    values = [p["value"] for s in series for p in s["points"] if p["value"] is not None]
    if not values:
        return {"best": None, "target": None, "rows": []}
    best = max(values)
    target = best * (1 - TOLERANCE)
    rows: dict[str, dict[str, Any]] = {}
    for s in series:
        row = rows.setdefault(s["study"], {"study": s["study"], "samplers": [], "trials": 0, "evaluations": 0,
                                           "best": None, "reached_at": None})
        row["samplers"] = list(dict.fromkeys([*row["samplers"], s["sampler"]]))
        for p in s["points"]:
            row["trials"] += 1
            row["evaluations"] = max(row["evaluations"], p["evaluations"])
            if p["best"] is not None:
                row["best"] = max(row["best"] or 0.0, p["best"])
                if row["reached_at"] is None and p["best"] >= target:
                    row["reached_at"] = p["evaluations"]
    return {"best": best, "target": target, "rows": sorted(rows.values(), key=lambda r: r["study"])}


# ----------------------------------------------------------------------------- speedups per case


def case_key(tag: str) -> tuple[Any, ...]:
    """Suite order for case tags: F1 < F1c < F2 < ... < F10 (name, number, causal, dtype)."""
    name, _, dtype = tag.partition("-")
    causal = name.endswith("c") and name[:-1] and name[-2].isdigit()
    base = name[:-1] if causal else name
    m = re.match(r"^(.*?)(\d+)$", base)
    head, num = (m.group(1), int(m.group(2))) if m else (base, 0)
    return (dtype, head, num, bool(causal))


def stats(t: Timing) -> dict[str, Any]:
    return {"median_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us,
            "tflops": t.tflops if t.median_us > 0 else None, "flagged": t.flagged}


def main_device(timed: Mapping[str, tuple[str, list[Timing]]]) -> str | None:
    """The device most timed candidates were measured on (speedups are only compared there)."""
    counts = collections.Counter(dev for dev, _ in timed.values())
    return counts.most_common(1)[0][0] if counts else None


def case_entry(cid: str, label: str, timings: Iterable[Timing], tag: str) -> dict[str, Any] | None:
    """One candidate on one case: its timing and every backend's, measured beside it."""
    by = latest(timings)
    if (tag, EVO) not in by:
        return None
    return {"tag": tag, "candidate": cid, "short": short_id(cid), "label": label,
            "backends": {b: stats(t) for (tg, b), t in by.items() if tg == tag}}


def speedup_on(timings: Iterable[Timing], tag: str, baseline: str) -> float | None:
    by = latest(timings)
    evo, base = by.get((tag, EVO)), by.get((tag, baseline))
    return base.median_us / evo.median_us if evo and base and evo.median_us > 0 else None


def cases(store: Store, lin: Lineage, timed: Mapping[str, tuple[str, list[Timing]]],
          baseline: str) -> dict[str, Any]:
    """Per case: the candidate fastest against ``baseline`` and the best-scoring candidate, with
    every backend timed beside each; the top candidates' speedups per case (heatmap)."""
    device = main_device(timed)
    here = {cid: ts for cid, (dev, ts) in timed.items() if dev == device}
    tags = sorted({t.shape.tag for ts in here.values() for t in ts if t.backend == EVO}, key=case_key)
    scored = sorted((n for n in lin.nodes.values() if n.score is not None and n.id in here),
                    key=lambda n: n.score or 0.0, reverse=True)
    best = scored[0] if scored else None
    winners, overall = [], []
    for tag in tags:
        ranked = sorted(((s, cid) for cid, ts in here.items() if (s := speedup_on(ts, tag, baseline)) is not None),
                        reverse=True)
        if ranked and (entry := case_entry(ranked[0][1], lin.nodes[ranked[0][1]].label, here[ranked[0][1]], tag)):
            winners.append(entry)
        if best is not None and (entry := case_entry(best.id, best.label, here[best.id], tag)):
            overall.append(entry)
    rows = scored[:HEATMAP_ROWS]
    heat = {"tags": tags, "rows": [{"candidate": n.id, "short": short_id(n.id), "label": n.label, "score": n.score,
                                    "speedups": [speedup_on(here[n.id], tag, baseline) for tag in tags]}
                                   for n in rows]}
    shown = {e["candidate"] for e in winners + overall}
    return {"device": device, "baseline": baseline, "tags": tags, "winners": winners, "overall": overall,
            "best": None if best is None else {"candidate": best.id, "short": short_id(best.id),
                                               "label": best.label, "score": best.score},
            "heatmap": heat, "gemm_tflops": gemm_rate(store, device, shown, here),
            "other_devices": sorted({dev for dev, _ in timed.values() if dev != device})}


def gemm_rate(store: Store, device: str | None, shown: Iterable[str], timed: Iterable[str]) -> float | None:
    """The dense fp16 GEMM rate (TFLOP/s) measured on ``device`` in the runs that timed the
    ``shown`` candidates (a GPU search measures it with its first evaluation; it is kept in that
    evaluation's device info): the median over those runs, None when none measured it."""
    evaluations = {cid: store.evaluations(cid, device) for cid in set(timed) | set(shown)}
    runs = {e.run_id for cid in shown for e in evaluations[cid] if e.timings}
    rates = [float(e.device_info["gemm_tflops"]) for evs in evaluations.values() for e in evs
             if e.run_id in runs and e.device_info.get("gemm_tflops")]
    return statistics.median(rates) if rates else None


# ----------------------------------------------------------------------------- failures


def reason_class(reason: str) -> str:
    """A reason with its candidate labels and counts blanked, so that alike failures group:
    ``... spills (12 B stores, 12 B loads)`` and ``... spills (4 B stores, 4 B loads)`` are one."""
    text = _NUMBER.sub("N", _LABEL.sub("<candidate>", reason.strip()))
    return "; ".join(dict.fromkeys(c.strip() for c in text.split(";") if c.strip())) or "(no reason stored)"


def failures(store: Store, ids: Iterable[str], trials: Mapping[str, Sequence[FrozenTrial]]) -> list[dict[str, Any]]:
    """Failed candidates (each counted once) and failed trials that produced no candidate
    (e.g. unmeasured in a replay), grouped by status and reason class, largest group first."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}

    def add(status: str, reason: str, example: str) -> None:
        g = groups.setdefault((status, reason_class(reason)), {"status": status, "reason": reason_class(reason),
                                                               "count": 0, "example": reason, "of": example})
        g["count"] += 1

    wanted = set(ids)
    for c in store.find_candidates():
        if c.id in wanted and c.status.failed:
            add(c.status.value, c.reason, short_id(c.id))
    for name, ts in trials.items():
        for t in ts:
            if t.state == TrialState.FAIL and "candidate" not in t.user_attrs:
                add(str(t.user_attrs.get("status", "failed")), str(t.user_attrs.get("reason", "")),
                    f"{name} trial {t.number}")
    return sorted(groups.values(), key=lambda g: (-g["count"], g["status"], g["reason"]))


# ----------------------------------------------------------------------------- insights


def insights(store: Store, study: str | None, baseline: str) -> dict[str, Any]:
    """Moves and resources over the scope, importances of the study shown or of every study (not
    saved); each importance names its study."""
    return insights_mod.compute(store, study, baseline=baseline, db_url=store.url).document()


# ----------------------------------------------------------------------------- files


@dataclass(frozen=True)
class BenchRecord:
    """One ``benchmarks/*.json`` record, by file name, for the report's benchmark figures."""

    name: str
    record: dict[str, Any]


def load_bench(paths: Sequence[Path]) -> list[BenchRecord]:
    """``evo bench`` records of candidates or packages from files or folders (``*.json`` in
    them), newest first. A folder's seeds records (``evo bench --seeds``: campaign rows and the
    SDPA sweep, no GEMM rate beside kernels) are passed over; naming one is an error."""
    files: list[tuple[Path, bool]] = []
    for p in paths:
        if p.is_dir():
            files += [(f, False) for f in sorted(p.glob("*.json"))]
        elif p.is_file():
            files.append((p, True))
        else:
            raise EvoError(f"no benchmark file or folder {p}")
    out = []
    for f, named in files:
        try:
            rec = json.loads(f.read_text())
            if isinstance(rec, dict) and rec.get("kind") == "seeds":
                if named:
                    raise ValueError("a seeds record (campaign rows), not a benchmark of candidates")
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("cases"), list) or "gpu" not in rec:
                raise ValueError("not an evo bench record (no gpu or cases)")
        except (OSError, ValueError) as exc:
            raise EvoError(f"cannot read benchmark {f}: {exc}") from None
        out.append(BenchRecord(f.name, rec))
    return sorted(out, key=lambda b: (str(b.record.get("created", "")), b.name), reverse=True)


def load_sampler_benchmark(path: Path | None) -> dict[str, Any] | None:
    """``evo bench-samplers``' runs (docs/sampler-benchmark.json), with one table per recording:
    a row per sampler, cold and warm, as docs/sampler-benchmark.md counts them (evaluations to
    the target; quartiles are order statistics, and a run that did not reach the target within
    its budget counts as past it, shown "> budget")."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
        return {"file": path.name, "git_sha": str(doc["git_sha"]), "seeds": int(doc["seeds"]),
                "batch": int(doc["batch"]), "tolerance": float(doc["tolerance"]),
                "sections": [_sampler_section(sec) for sec in doc["recordings"]]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvoError(f"cannot read sampler benchmark {path}: {exc!r}") from None


def _sampler_section(sec: Mapping[str, Any]) -> dict[str, Any]:
    """One recording's rows: per sampler (best cold median first), per start mode."""
    runs = sec["runs"]
    modes = list(dict.fromkeys(str(r["mode"]) for r in runs))
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    keys: dict[str, tuple[float, float]] = {}  # (median, p75) in the first mode: the rows' order
    for name in dict.fromkeys(str(r["sampler"]) for r in runs):
        keys[name] = (math.inf, math.inf)
        for mode in modes:
            rs = [r for r in runs if r["sampler"] == name and r["mode"] == mode]
            if not rs:
                continue
            p25, med, p75 = quartiles([math.inf if r["evaluations"] is None else float(r["evaluations"]) for r in rs])
            cells.setdefault(name, {})[mode] = {"runs": len(rs), "reached": sum(r["evaluations"] is not None for r in rs),
                                                "median": _count(med), "iqr": f"{_count(p25)}-{_count(p75)}"}
            if mode == modes[0]:
                keys[name] = (med, p75)
    order = sorted(cells, key=lambda n: keys[n])
    return {"recording": str(sec["recording"]), "families": [str(f) for f in sec["families"]], "gpu": str(sec["gpu"]),
            "size": int(sec["size"]), "best": float(sec["best"]), "runs": runs, "modes": modes,
            "rows": [{"sampler": n, "cells": cells[n]} for n in order]}


def _count(x: float) -> str:
    return "> budget" if math.isinf(x) else f"{x:.0f}"


def status_counts(store: Store, ids: Iterable[str]) -> dict[str, int]:
    statuses = store.statuses(ids)
    counts = collections.Counter(s.value for s in statuses.values())
    return {s.value: counts[s.value] for s in Status if counts[s.value]}
