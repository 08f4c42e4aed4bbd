"""Recorded sweeps: real GPU outcomes saved to a file, so a search can be replayed without a GPU.

A recording (``data/sweep-<gpu>.json.gz``, JSON, gzip when the name ends in ``.gz``) holds a
header (gpu, arch, versions, git sha, created/updated, the FAST cases covered) and one record
per distinct candidate: family, family version, params, final status and reason, and for each
FAST case it was timed on the candidate's median/p20/p80 and the baselines' medians (us).

:func:`export_sweep` writes it from a database, merging into an existing file so a sweep built
over several GPU sessions accumulates. Replay looks candidates up by (family, params); a point
the recording does not hold is *unmeasured* -- never invented.

A recording has one fidelity (header ``fidelity``, :data:`FIDELITIES`): ``full`` (the default, and
every file written before the key existed) records each candidate's full-protocol timings;
``screen`` records each screened candidate's search screen instead -- the candidate alone on the
screen's cases, few samples, against the worker's cached scoring baseline, pruned candidates
included -- which costs a GPU about 2 s a candidate instead of 15, so a recording of a few hundred
points of a family (what ``evo bench-samplers`` replays) fits a few device calls. The two never
mix in one file: a screen is compared with screens only.
"""

from __future__ import annotations

import collections
import datetime as _dt
import gzip
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo import paths
from evo.version import __version__
from evo.errors import EvoError
from evo.family.manifest import Value
from evo.results import Evaluation, Shape, Status, Timing
from evo.family.space import Candidate
from evo.store import CandidateView, EvaluationView, Store
from evo.vocab import BUILD_FAILED, EVALUATED, EVO, FULL, SCREEN, gpu_slug

FORMAT = "evo-sweep"
FORMAT_VERSION = 1
FIDELITIES = (FULL, SCREEN)   # what a recording's timings are: the full protocol's, or a search's screens


def record_key(family: str, params: Mapping[str, Value]) -> str:
    """The lookup key of a candidate in a recording: canonical JSON of family + params."""
    return json.dumps({"family": family, "params": dict(params)}, sort_keys=True)


@dataclass
class Record:
    """One candidate's recorded outcome. ``timings``: case tag -> backend -> statistic -> us."""

    family: str
    family_version: int
    params: dict[str, Value]
    status: Status
    reason: str = ""
    build_id: str = ""
    timings: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return record_key(self.family, self.params)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "family_version": self.family_version, "params": self.params,
                "status": self.status.value, "reason": self.reason, "build_id": self.build_id,
                "timings": self.timings}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Record:
        try:
            return cls(str(d["family"]), int(d["family_version"]), dict(d["params"]),
                       Status(d["status"]), str(d.get("reason", "")), str(d.get("build_id", "")),
                       {c: {b: {k: float(x) for k, x in st.items()} for b, st in per.items()}
                        for c, per in d.get("timings", {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise EvoError(f"bad record in recording: {exc}") from None

    def evaluation(self, build_id: str, shapes: Sequence[Shape], device: Mapping[str, str]) -> Evaluation:
        """The recorded outcome as an Evaluation (timings only for ``shapes``)."""
        timings = []
        for shape in shapes:
            for backend, st in self.timings.get(shape.tag, {}).items():
                med = st["median_us"]
                timings.append(Timing(shape, backend, med, st.get("p20_us", med), st.get("p80_us", med)))
        return Evaluation(build_id, self.status, self.reason, timings=timings, device=dict(device))


@dataclass
class Recording:
    """A sweep: header + records keyed by :func:`record_key`."""

    header: dict[str, Any]
    records: dict[str, Record] = field(default_factory=dict)
    path: Path | None = None

    @property
    def gpu(self) -> str:
        return str(self.header.get("gpu", "unknown"))

    @property
    def arch(self) -> str:
        return str(self.header.get("arch", ""))

    @property
    def name(self) -> str:
        return self.path.name if self.path else "recording"

    @property
    def fidelity(self) -> str:
        """:data:`FIDELITIES`: what the records' timings are (``full`` where the header says nothing)."""
        return str(self.header.get("fidelity", FULL))

    def shapes(self) -> list[Shape]:
        """The FAST cases the recording covers, in header order."""
        return [Shape.from_dict(d) for d in self.header.get("cases", [])]

    def common_shapes(self) -> list[Shape]:
        """The cases every timed record covers: the default objective of a replayed search, so
        that a few candidates timed on extra cases (``evo eval``) do not leave the rest unscored."""
        timed = [set(r.timings) for r in self.records.values() if r.status is Status.FAST and r.timings]
        common = set.intersection(*timed) if timed else set()
        return [s for s in self.shapes() if s.tag in common]

    def lookup(self, cand: Candidate) -> Record | None:
        return self.records.get(record_key(cand.family, cand.p))

    def add(self, rec: Record) -> None:
        """Insert or merge: newer per-case timings win; a record's status follows the newer one."""
        old = self.records.get(rec.key)
        if old is not None and old.family_version == rec.family_version:
            rec.timings = old.timings | rec.timings
        self.records[rec.key] = rec

    def to_json(self) -> dict[str, Any]:
        recs = sorted(self.records.values(), key=lambda r: r.key)
        return {"format": FORMAT, "version": FORMAT_VERSION, "header": self.header,
                "records": [r.to_json() for r in recs]}


def new_header(gpu: str, arch: str, shapes: Iterable[Shape], versions: Mapping[str, str],
               measured_shas: Iterable[str] = ()) -> dict[str, Any]:
    """A recording header. ``git_sha`` names the code that *measured* (the runs' commits, comma
    separated when several); ``exported_at_git_sha`` the code that wrote the file."""
    now, sha = _now(), paths.git_sha() or "unknown"
    measured = ",".join(sorted(set(measured_shas))) or "unknown"
    return {"gpu": gpu, "arch": arch, "versions": dict(versions), "git_sha": measured,
            "exported_at_git_sha": sha, "created": now, "updated": now,
            "cases": [s.as_dict() for s in shapes],
            "sessions": [{"updated": now, "git_sha": measured, "exported_at_git_sha": sha,
                          "versions": dict(versions)}]}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def load_recording(path: Path | str) -> Recording:
    """Read a recording (gzip if the file is gzip-compressed); errors name the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, gzip.BadGzipFile, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EvoError(f"cannot read recording {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise EvoError(f"{path} is not an evo sweep recording (format {FORMAT!r} expected)")
    if data.get("version") != FORMAT_VERSION:
        raise EvoError(f"{path}: recording format version {data.get('version')} is not supported "
                       f"(this evo reads version {FORMAT_VERSION})")
    rec = Recording(dict(data.get("header", {})), path=path)
    for d in data.get("records", []):
        r = Record.from_json(d)
        rec.records[r.key] = r
    return rec


def save_recording(rec: Recording, path: Path | str) -> Path:
    """Write atomically (temp file + rename); gzip when the name ends in ``.gz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = json.dumps(rec.to_json(), indent=None, separators=(",", ":")).encode()
    if path.suffix == ".gz":
        blob = gzip.compress(blob, mtime=0)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(blob)
    tmp.replace(path)
    rec.path = path
    return path


def merge_header(old: dict[str, Any], new: dict[str, Any], where: Path) -> dict[str, Any]:
    """Merge two headers of the same GPU and arch: union of cases, newest versions and sha, and
    the list of export sessions that built the file."""
    for k in ("gpu", "arch"):
        if old.get(k) and new.get(k) and old[k] != new[k]:
            raise EvoError(f"{where} holds a sweep for {k} {old[k]!r}, not {new[k]!r}; "
                           f"write to another file")
    held, wanted = old.get("fidelity", FULL), new.get("fidelity", FULL)
    if held != wanted:
        raise EvoError(f"{where} holds {held} timings, not {wanted} ones; write to another file")
    cases = list(old.get("cases", []))
    cases += [c for c in new.get("cases", []) if c not in cases]
    sessions = list(old.get("sessions", [])) + list(new.get("sessions", []))
    shas = {x for h in (old, new) for x in str(h.get("git_sha", "")).split(",") if x and x != "unknown"}
    return old | {"versions": new.get("versions", {}), "git_sha": ",".join(sorted(shas)) or "unknown",
                  "exported_at_git_sha": new.get("exported_at_git_sha"),
                  "updated": new["updated"], "cases": cases, "sessions": sessions}


def newest_recording(folder: Path | None = None) -> Path | None:
    """The most recently modified ``sweep-*.json.gz`` under ``data/`` (or ``folder``)."""
    folder = folder or paths.root() / "data"
    found = sorted(folder.glob("sweep-*.json.gz"), key=lambda p: (p.stat().st_mtime, p.name))
    return found[-1] if found else None


def _device_counts(store: Store, ids: Iterable[str]) -> collections.Counter[str]:
    """Evaluations per real device (replayed ones excluded) over the given candidates."""
    out: collections.Counter[str] = collections.Counter()
    for cid in ids:
        out.update(e.device for e in store.evaluations(cid) if not e.device.startswith("replay:"))
    return out


def export_sweep(store: Store, out: Path | str | None = None, gpu: str | None = None,
                 fidelity: str = FULL) -> tuple[Recording, int]:
    """Write every candidate with a final status on ``gpu`` (any study) to ``out``, merged into
    the recording already there; returns it and how many records were new or changed.

    ``gpu`` defaults to the existing file's GPU, else the device with the most evaluations;
    ``out`` to ``data/sweep-<gpu>.json.gz`` (``-screen`` before the suffix at screen fidelity)
    under :func:`evo.paths.home`. Build failures count for every GPU of their arch; replayed
    evaluations are never exported. ``fidelity`` (:data:`FIDELITIES`, module docstring) says
    which timings a candidate is recorded with.
    """
    if fidelity not in FIDELITIES:
        raise EvoError(f"unknown fidelity {fidelity!r}; one of {', '.join(FIDELITIES)}")
    old = load_recording(out) if out is not None and Path(out).exists() else None
    evaluated = store.find_candidates(status=EVALUATED)
    if gpu is None:
        gpu = old.gpu if old is not None else _busiest_device(store, evaluated)
    if out is None:
        out = paths.home() / "data" / f"sweep-{gpu_slug(gpu)}{'-screen' if fidelity == SCREEN else ''}.json.gz"
        old = load_recording(out) if out.exists() else None
    out = Path(out)
    per_cand = {c.id: evs for c in evaluated if (evs := store.evaluations(c.id, gpu))}
    arch = _export_arch(old, evaluated, per_cand, gpu, store.url)
    if fidelity == SCREEN:
        timings = {cid: (gpu, screen.timings) for cid, evs in per_cand.items() if (screen := _screen(evs))}
    else:
        timings = store.latest_timings([cid for cid, evs in per_cand.items() if evs[-1].status is Status.FAST], gpu)
    records = [Record(c.family, c.family_version or 0, dict(c.params), c.status, c.reason, c.id)
               for c in store.find_candidates(status=BUILD_FAILED, arch=arch)]
    records += [r for c in evaluated if (r := _evaluated_record(c, per_cand.get(c.id), timings, arch, fidelity))]
    header = _export_header(store, gpu, arch, timings, per_cand) | {"fidelity": fidelity}
    rec_out = old if old is not None else Recording(header)
    if old is not None:
        rec_out.header = merge_header(old.header, header, out)
    changed = _merge_records(rec_out, records)
    save_recording(rec_out, out)
    return rec_out, changed


def _busiest_device(store: Store, evaluated: Sequence[CandidateView]) -> str:
    """The real device with the most evaluations of these candidates (EvoError: none)."""
    devices = _device_counts(store, (c.id for c in evaluated))
    if not devices:
        raise EvoError(f"no GPU evaluations in {store.url}: nothing to export")
    return devices.most_common(1)[0][0]


def _export_arch(old: Recording | None, evaluated: Sequence[CandidateView],
                 per_cand: Mapping[str, Sequence[EvaluationView]], gpu: str, url: str) -> str:
    """The arch of the export: the file's, else the one most candidates evaluated on ``gpu``
    were built for (EvoError: there are none)."""
    arches = collections.Counter(c.arch for c in evaluated if c.id in per_cand)
    arch = old.arch if old is not None and old.arch else (arches.most_common(1)[0][0] if arches else "")
    if not arch:
        raise EvoError(f"no evaluations on {gpu!r} in {url}: nothing to export")
    return arch


def _screen(evs: Sequence[EvaluationView]) -> EvaluationView | None:
    """The newest passed search screen among a candidate's evaluations (green or pruned, the
    rung in its device info), if any."""
    passed = [e for e in evs if e.device_info.get("rung") == SCREEN and e.status in (Status.GREEN, Status.PRUNED)]
    return passed[-1] if passed else None


def _evaluated_record(c: CandidateView, evs: Sequence[EvaluationView] | None,
                      timings: Mapping[str, tuple[str, list[Timing]]], arch: str, fidelity: str) -> Record | None:
    """The record of an evaluated candidate, from its newest evaluation on the GPU (with its
    timings when FAST); None when it was not evaluated there, is of another arch, or only
    passed GREEN (no final status: green, or pruned after a search's screen). At screen
    fidelity a candidate with a passed screen is FAST with that screen's timings (``timings``),
    whatever came after it, one timed in full without a screen has no record, and a failure
    (red, crashed, ...) is recorded as at full fidelity."""
    if not evs or c.arch != arch:
        return None
    status, reason = evs[-1].status, evs[-1].reason
    if fidelity == SCREEN and c.id in timings:
        status, reason = Status.FAST, "screened"
    elif status in (Status.GREEN, Status.PRUNED) or (fidelity == SCREEN and status is Status.FAST):
        return None
    rec = Record(c.family, c.family_version or 0, dict(c.params), status, reason, c.id)
    for t in timings.get(c.id, ("", []))[1] if rec.status is Status.FAST else []:
        stat = {"median_us": t.median_us}
        if t.backend == EVO:
            stat |= {"p20_us": t.p20_us, "p80_us": t.p80_us}
        rec.timings.setdefault(t.shape.tag, {})[t.backend] = stat
    return rec


def _export_header(store: Store, gpu: str, arch: str, timings: Mapping[str, tuple[str, list[Timing]]],
                   per_cand: Mapping[str, Sequence[EvaluationView]]) -> dict[str, Any]:
    """The header of this export: the cases timed, the versions the newest evaluation ran
    with, and the git shas of the runs that measured."""
    shapes: dict[str, Shape] = {}
    for _, ts in timings.values():
        for t in ts:
            shapes.setdefault(t.shape.tag, t.shape)
    newest = max((evs[-1] for evs in per_cand.values()), key=lambda e: e.created, default=None)
    info = dict(newest.device_info) if newest is not None else {}
    versions = {"evo": __version__} | {k: str(info[k]) for k in ("torch", "cuda", "cudnn", "driver")
                                       if k in info}
    run_ids = {e.run_id for evs in per_cand.values() for e in evs if e.run_id is not None}
    measured = {sha for r in run_ids if (run := store.get_run(r)) is not None and (sha := run.git_sha)}
    return new_header(gpu, arch, sorted(shapes.values(), key=lambda s: s.tag), versions, measured)


def _merge_records(rec: Recording, records: Iterable[Record]) -> int:
    """Add ``records`` to ``rec``; how many were new or changed it."""
    changed = 0
    for r in records:
        before = rec.records.get(r.key)
        rec.add(r)
        changed += before is None or before.to_json() != rec.records[r.key].to_json()
    return changed
