"""Promote the winners in the database into a pip-installable attention package.

The package's dispatch table is keyed by (head dim, dtype, causal, sequence-length bucket).
Buckets come from the FAST cases' lengths (the longer of Lq and Lk): each measured length gets the
bucket of lengths nearest to it on a log scale. A route serves only what promote's checks cover:
its bucket, B * Hq up to ``max_bh``, Hq / Hkv up to ``max_group``, Lq != Lk with a causal mask at
either corner (:mod:`evo.products.routes` states the rule). In each bucket of each key the kernel is the green candidate
with the best measured speedup over SDPA on that bucket's FAST cases, if it beats SDPA at all;
a bucket without one is served by SDPA. Decode cases (few query rows against a longer cache,
:func:`evo.products.routes.is_decode`) are bucketed apart: their routes serve at most that many query
rows, and the package tries them before a key's other routes, so a split-KV decode kernel
(``templates/flash_decode``, docs/decode.md) serves decode and the prefill routes keep theirs. Decode
cases with per-sequence lengths or pages (D6, D7) plan layout routes of their own, which alone serve
calls with ``seqlens=`` / ``block_table=`` (through the kernel's ``_lens`` / ``_paged`` entry), verified
on ragged and paged batches of their capacities. Only candidates whose status in the database is
green or fast, with passing GREEN checks, are considered, and only cubins of the arch the
timings were taken on ship. Everything the package needs (cubins, sources, the table, the
GREEN suite for its tests, provenance with each shipped kernel's machine-code evidence read from
its cubin: :mod:`evo.toolchain.evidence`) is written next to Python sources rendered from
``templates/package/``.

A kernel that failed GREEN under any candidate stays out of every bucket, whichever candidate
brings it (:mod:`evo.products.red_kernels`: candidates share kernels byte for byte across genes of other
head dims); the winners' cubins, once found or rebuilt, are checked against that list again,
and a winner that matches loses those buckets and the table is planned again.

Stored checks are not enough to ship on (:mod:`evo.products.verify`): before anything is written, every
shipped kernel runs on the GPU over its dispatch buckets (edges, ragged lengths, random scales,
stress inputs). A kernel that fails a check is stored as a red evaluation of its candidate (so
its machine code is red for every later promotion too), the candidate leaves the contest and
the table is planned again; a crash or hang refuses the promotion with one line. The package is
then assembled in a scratch folder, its own tests run there, and only then is it moved into
place. ``verify=False`` (``--no-verify``) skips both, for machines without a GPU; the package's
PROVENANCE.json says whether it was verified.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import keyword
import re
import secrets
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from evo import paths
from evo.errors import EvoError
from evo.family import splitkv
from evo.family.manifest import load_family
from evo.family.render import Rendered, entry_name
from evo.gpu.suites import green_cases, green_settings
from evo.products import confirm as confirming
from evo.products import verify as verifier
from evo.products.red_kernels import (Excluded, RedCheck, candidate_digests, cubin_digests, excluded_entries,
                                      red_kernels)
from evo.products.routes import (
    Contender,
    Key,
    Route,
    Shipped,
    key_of,
    length_of,
    measurements,
    plan_routes,
)
from evo.results import Evaluation, Status
from evo.scoring import geomean
from evo.store import CandidateView, Store, open_store
from evo.toolchain import build, evidence, smi
from evo.version import __version__
from evo.vocab import DEFAULT_BASELINE, PASSED

RESERVED_NAMES = frozenset({"evo", "torch", "aten", "prim", "prims", "tests", "test"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARCH = re.compile(r"^sm_(\d+)(\d)[af]?$")
MARKER = "PROVENANCE.json"  # inside NAME/NAME/: a folder promote wrote (replaceable with force)

def capability(arch: str) -> tuple[int, int]:
    """``sm_90a`` -> (9, 0), ``sm_120`` -> (12, 0): the compute capability a cubin runs on."""
    m = _ARCH.fullmatch(arch)
    if not m:
        raise EvoError(f"cannot read a compute capability from arch {arch!r}")
    return int(m[1]), int(m[2])


def check_name(name: str) -> None:
    """The package name doubles as the import name and the torch.library namespace."""
    if not _NAME.fullmatch(name) or keyword.iskeyword(name) or name.lower() in RESERVED_NAMES:
        raise EvoError(f"package name {name!r} must be a Python identifier and not one of "
                       f"{', '.join(sorted(RESERVED_NAMES))}")


def sanitize_url(url: str) -> str:
    """The database URL with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


# ----------------------------------------------------------------------------- the database


def select_candidates(store: Store, study: str | None, ids: Sequence[str]) -> list[CandidateView]:
    """The promotable candidates named by ``ids``, or in ``study``, or in the whole database."""
    if study is not None and ids:
        raise EvoError("give --study or --candidate, not both")
    if ids:
        views = [store.get(i).candidate for i in ids]
        for v in views:
            if v.status not in PASSED:
                raise EvoError(f"candidate {v.id[:12]} is {v.status.value}, not green: "
                               f"only kernels that passed GREEN are promoted ({v.reason or 'no reason stored'})")
        return list({v.id: v for v in views}.values())
    views = store.find_candidates(status=PASSED, study=study)
    if not views:
        where = f"study {study!r}" if study is not None else "the database"
        raise EvoError(f"no green candidate in {where} ({sanitize_url(store.url)})")
    return views


def _check_green_evidence(store: Store, view: CandidateView) -> None:
    """Its newest evaluation with GREEN checks passed them all (status alone could be stale)."""
    checked = [e for e in store.evaluations(view.id) if e.checks]
    if not checked:
        replayed = all(e.device.startswith("replay:") for e in store.evaluations(view.id))
        raise EvoError(f"candidate {view.id[:12]} is {view.status.value} but has no stored GREEN checks"
                       + (" (its results were replayed from a recording): gate it on a GPU first with "
                          f"`evo eval --id {view.id[:12]}`" if replayed else ""))
    failed = [c for c in checked[-1].checks if not c.passed]
    if failed:
        raise EvoError(f"candidate {view.id[:12]} failed {len(failed)} GREEN checks in evaluation "
                       f"{checked[-1].id}; it is not promoted")


def ships_cubin(family: str) -> bool:
    """The package launches cubins (of the plain, TMA and split-KV ABIs), so Triton-backend
    candidates (evo/family/backends.py) are not promoted (yet); a family the templates no longer
    have is left for _ship to report."""
    try:
        return load_family(family).backend == "cuda"
    except EvoError:
        return True


def choose_device(store: Store, ids: Sequence[str], device: str | None, here: str | None = None) -> str:
    """The device the timings are compared on: ``device``, else ``here`` (the GPU promote
    verifies on) when some candidate's newest timings were taken on it, else the one most
    candidates were last timed on. (A database holding an H200's studies and an H100's would
    otherwise route a package verified on the H100 by the H200's timings.)"""
    if device is not None:
        return device
    newest = store.latest_timings(ids)
    if not newest:
        raise EvoError("none of the green candidates has FAST timings; run evo eval or evo run first")
    counts = Counter(dev for dev, _ in newest.values())
    if here is not None and here in counts:
        return here
    return sorted(counts, key=lambda d: (-counts[d], d))[0]


# ----------------------------------------------------------------------------- the package


@dataclass
class Promoted:
    """What ``promote`` wrote, for the CLI to report."""

    path: Path
    device: str
    routes: list[Route]
    shipped: list[str]
    unused: list[str] = field(default_factory=list)
    cases: list[dict[str, Any]] = field(default_factory=list)
    verification: dict[str, Any] = field(default_factory=dict)
    excluded: list[Excluded] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    confirmed: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)  # evo.products.confirm


def promote(name: str, out: Path, *, db_url: str | None = None, study: str | None = None,
            candidate_ids: Sequence[str] = (), baseline: str = DEFAULT_BASELINE, device: str | None = None,
            min_speedup: float = 1.0, version: str = "0.1.0", force: bool = False,
            verify: bool = True, confirm: bool = False, note: Callable[[str], None] | None = None) -> Promoted:
    """Write the package ``out/name`` from the per-bucket winners in the database, after
    verifying them on the GPU (unless ``verify`` is False); with ``confirm``, every winner is
    first timed beside SDPA on its buckets' FAST cases and the table planned from those numbers
    (:mod:`evo.products.confirm`), beside the baseline routed on; ``note`` hears of each as it starts."""
    check_name(name)
    target = Path(out).expanduser().resolve() / name
    if verify or confirm:
        verifier.require_gpu()
    with open_store(db_url) as store:
        views = select_candidates(store, study, candidate_ids)
        here = smi.gpu_name(0) if verify or confirm else None   # GPU 0, the one that verifies
        dev = choose_device(store, [v.id for v in views], device, here)
        info = next((e.device_info for v in views for e in reversed(store.evaluations(v.id, dev))
                     if e.device_info), {})
        cap = _device_capability(info, views, dev)
        contest = _contest(store, views, dev, cap, baseline, named=bool(candidate_ids))
        routes, shipped, checked, confirmation = _settle(store, contest, baseline, dev, min_speedup, verify,
                                                         confirm, note)
        winners = list(dict.fromkeys(r.winner for r in routes if r.winner))
        db = sanitize_url(store.url)
    _check_target(target, force)
    if contest.rejected:
        checked["rejected"] = contest.rejected
    cases = _case_table(routes, contest.contenders)
    context = _context(name, version, shipped, routes, cases, info, dev, cap, db, study,
                       list(candidate_ids), baseline, min_speedup) | {
        "verification": checked, "excluded": [x.as_dict() for x in contest.excluded], "stale": contest.stale,
        "confirmation": confirmation.as_dict() if confirm else {"interleaved": False}}
    _write(target, context, shipped, run_tests=verify)
    return Promoted(target, dev, routes, winners, [v.id for v in views if v.id not in winners]
                    if candidate_ids else [], cases, context["verification"], contest.excluded, contest.rejected,
                    contest.stale, confirmation.speedups)


@dataclass
class _Contest:
    """The candidates still in the running for the table, and what left it: measurements on red
    machine code (``excluded``), winners that failed their verification (``rejected``, one line
    each), and candidates today's templates render differently (``stale``)."""

    contenders: list[Contender]
    red: Mapping[tuple[str, str], RedCheck]
    excluded: list[Excluded]
    stale: list[str]
    rejected: list[str] = field(default_factory=list)

    def reject(self, store: Store, failed: verifier.VerifyFailed) -> None:
        """Store the failed verification's evaluations as red, and drop those candidates and any
        measurement whose machine code is red now."""
        for line, evaluation in failed.failures:
            store.record_evaluation(evaluation)
            self.rejected.append(line)
        gone = {evaluation.build_id for _, evaluation in failed.failures}
        self.red = red_kernels(store)
        self.contenders, more = without_red(store, [c for c in self.contenders if c.view.id not in gone], self.red)
        self.excluded += more


def _contest(store: Store, views: Sequence[CandidateView], dev: str, cap: tuple[int, int], baseline: str,
             named: bool) -> _Contest:
    """The contenders: candidates timed on ``dev`` whose cubins run on ``cap``, less those that
    render differently today (unless ``named``: those are shipped as asked or refused, in
    _ship) and the measurements of red machine code."""
    timed = store.latest_timings([v.id for v in views], dev)
    contenders = [Contender(v, measurements(timed[v.id][1], baseline)) for v in views
                  if v.id in timed and v.arch is not None and capability(v.arch) == cap
                  and ships_cubin(v.family)]
    stale: list[str] = []
    if not named:
        stale = [c.view.id for c in contenders if not renders_as_stored(c.view)]
        contenders = [c for c in contenders if c.view.id not in stale]
        if stale and not contenders:
            raise EvoError(f"every timed candidate ({len(stale)}) renders differently with today's templates: "
                           "its measurements belong to code they no longer make; evaluate fresh builds")
    red = red_kernels(store)
    contenders, excluded = without_red(store, contenders, red)
    return _Contest(contenders, red, excluded, stale)


def _settle(store: Store, contest: _Contest, baseline: str, dev: str, min_speedup: float, verify: bool,
            confirm: bool, note: Callable[[str], None] | None
            ) -> tuple[list[Route], list[Shipped], dict[str, Any], confirming.Confirmation]:
    """Plan the table until it holds: with ``confirm``, its winners timed beside SDPA first;
    with ``verify``, checked on the GPU, a winner that fails leaving the contest and the table
    planned again. Returns the routes, the shipped kernels, the verification's record and the
    confirmation."""
    passed: dict[str, tuple[tuple[verifier.Bucket, ...], int]] = {}   # verified: buckets, checks
    seed = secrets.randbelow(2**31)
    boards = smi.boards()               # confirmations from these GPUs are recalled, not timed again
    confirmation = confirming.Confirmation(recall=lambda cid: confirming.stored(store, cid, dev, baseline, boards))
    while True:
        routes, shipped, contest.contenders = _plan(store, contest.contenders, contest.red, contest.excluded,
                                                    baseline, dev, min_speedup,
                                                    contest.rejected[-1] if contest.rejected else None)
        try:
            if confirm and (todo := confirmation.todo(routes, shipped)):
                contest.contenders = _confirm(store, confirmation, contest.contenders, routes, todo, seed, dev,
                                              baseline, note)
                continue
            checked = _verify(shipped, routes, seed, passed) if verify else {"verified": False}
            return routes, shipped, checked, confirmation
        except verifier.VerifyFailed as failed:
            contest.reject(store, failed)


def _confirm(store: Store, confirmation: confirming.Confirmation, contenders: Sequence[Contender], routes: Sequence[Route],
             todo: Sequence[confirming.Todo], seed: int, dev: str, baseline: str,
             note: Callable[[str], None] | None = None) -> list[Contender]:
    """One round of :mod:`evo.products.confirm`: the winners in ``todo`` timed beside SDPA, each
    evaluation stored as it comes (marked confirmed), their measurements replaced; after the last
    round, no GPU work: only the confirmed measurements stay where an unconfirmed winner still serves."""
    if confirmation.rounds >= confirming.ROUNDS:
        return confirmation.only_confirmed(contenders, routes)

    def keep(ev: Evaluation) -> None:
        here = ev.device.get("name", "")
        if here != dev:
            raise EvoError(f"--confirm times on this GPU ({here}), but the timings compared are "
                           f"from {dev!r}: run it there, or leave --confirm out")
        ev.device[confirming.CONFIRMED] = baseline
        store.record_evaluation(ev)

    evaluations = verifier.confirm_speed(todo, seed, backends=(baseline,), note=note, keep=keep)
    return confirmation.take(contenders, todo, evaluations, lambda timings: measurements(timings, baseline))


def renders_as_stored(view: CandidateView) -> bool:
    """Whether ``view``'s family templates still render its parameters to the source it was built
    and measured from. A database keeps candidates of older template texts (a family's gene whose
    code changed, an older version); their measurements belong to code that today's templates no
    longer make, so a plan over the whole database leaves them out."""
    return view.rendered().source_hash == view.source_hash


def _plan(store: Store, contenders: Sequence[Contender], red: Mapping[tuple[str, str], RedCheck],
          excluded: list[Excluded], baseline: str, dev: str, min_speedup: float,
          refused: str | None) -> tuple[list[Route], list[Shipped], list[Contender]]:
    """The dispatch routes, the winners' kernels and the contenders they were planned from,
    planned again without any winner kernel whose machine code turns out red once its cubin is
    at hand (added to ``excluded``). With no winner left: EvoError, after a verification
    refusal (``refused``) that refusal line."""
    contenders = list(contenders)
    while True:
        routes = plan_routes(contenders, min_speedup)
        if not any(r.winner for r in routes):
            raise EvoError(f"{refused}; no other kernel wins a bucket: nothing written" if refused
                           else _nothing_to_promote(contenders, baseline, dev))
        winners = list(dict.fromkeys(r.winner for r in routes if r.winner))
        by_id = {c.view.id: c for c in contenders}
        shipped = [_ship(store, by_id[w].view, list(dict.fromkeys(r.key for r in routes if r.winner == w)), dev)
                   for w in winners]
        late = [x for s in shipped for x in excluded_entries(
            s.view.id, cubin_digests(s.cubin), [e.name for e in s.entries.values()], red)]
        if not late:
            return routes, shipped, contenders
        excluded += late
        contenders = _drop(contenders, {(x.candidate, x.entry) for x in late})


def without_red(store: Store, contenders: Sequence[Contender],
                red: Mapping[tuple[str, str], RedCheck]) -> tuple[list[Contender], list[Excluded]]:
    """The contenders less their measurements on keys whose kernel is machine code that failed
    GREEN anywhere in the database, and what was kept out."""
    if not red:
        return list(contenders), []
    excluded = []
    for c in contenders:
        names = sorted({entry_name(*key_of(m.shape)) for m in c.cases})
        excluded += excluded_entries(c.view.id, candidate_digests(store, c.view.id), names, red)
    return _drop(contenders, {(x.candidate, x.entry) for x in excluded}), excluded


def _drop(contenders: Sequence[Contender], bad: set[tuple[str, str]]) -> list[Contender]:
    """The contenders less their measurements of the (candidate, kernel) pairs in ``bad``."""
    return [Contender(c.view, tuple(m for m in c.cases if (c.view.id, entry_name(*key_of(m.shape))) not in bad))
            for c in contenders]


def _verify(shipped: Sequence[Shipped], routes: Sequence[Route], seed: int,
            passed: dict[str, tuple[tuple[verifier.Bucket, ...], int]]) -> dict[str, Any]:
    """Every shipped kernel over each bucket it serves, on the GPU (EvoError: refused), except
    those ``passed`` already holds with the same buckets (an earlier round of a re-planned
    promotion verified them); each kernel that passes goes into ``passed`` with its check count."""
    buckets = {s.view.id: tuple(verifier.Bucket(r.key, r.bucket.lo, r.top,
                                                tuple(sorted({length_of(x) for x in r.shapes})), r.max_bh,
                                                r.layout, tuple(sorted({x.page_size for x in r.shapes if x.page_size})))
                                for r in routes if r.winner == s.view.id) for s in shipped}
    todo = [(s.view.id, s.cubin, list(s.entries.values()), buckets[s.view.id]) for s in shipped
            if s.view.id not in passed or passed[s.view.id][0] != buckets[s.view.id]]

    def keep(cid: str, n: int) -> None:
        passed[cid] = (buckets[cid], n)

    verifier.verify_kernels(todo, seed, on_pass=keep)
    return {"verified": True, "seed": seed, "checks": {s.view.id: passed[s.view.id][1] for s in shipped}}


def _check_target(target: Path, force: bool) -> None:
    if target.exists() and any(target.iterdir()):
        if not force:
            raise EvoError(f"{target} exists; pass --force to replace a package promote wrote there")
        if not (target / target.name / MARKER).is_file():
            raise EvoError(f"{target} exists and is not a package promote wrote; not replacing it")


def _device_capability(info: dict[str, Any], views: Sequence[CandidateView], dev: str) -> tuple[int, int]:
    sm = str(info.get("sm", ""))
    if sm.isdigit() and len(sm) >= 2:
        return int(sm[:-1]), int(sm[-1])
    arches = {v.arch for v in views if v.arch}
    if len(arches) == 1:
        return capability(arches.pop())
    raise EvoError(f"device {dev!r} has no stored compute capability and the candidates were built "
                   f"for {', '.join(sorted(arches)) or 'no arch'}; promote candidates of one arch")


def _nothing_to_promote(contenders: Sequence[Contender], baseline: str, dev: str) -> str:
    if not any(c.cases for c in contenders):
        return f"no green candidate has FAST timings with {baseline} on {dev!r}; nothing to promote"
    best = max(((c.view.id, geomean(m.speedup for m in c.cases)) for c in contenders if c.cases),
               key=lambda x: x[1])
    return (f"no candidate beats {baseline} in any length bucket on {dev!r} (best overall: "
            f"{best[0][:12]} at x{best[1]:.2f}); nothing to promote")


def _ship(store: Store, view: CandidateView, keys: Sequence[Key], dev: str) -> Shipped:
    """Check the winner's GREEN evidence, re-derive its kernels (launch configs), find its cubin
    and source, and read the machine-code evidence of the kernels it ships from that cubin
    (:mod:`evo.toolchain.evidence`; per kernel name, or why there is none)."""
    _check_green_evidence(store, view)
    rendered = view.rendered()
    if rendered.source_hash != view.source_hash:
        raise EvoError(f"candidate {view.id[:12]} ({view.label}) renders differently with today's "
                       f"{view.family} templates, so its launch configuration cannot be trusted; "
                       "evaluate a fresh build instead")
    entries = {(e.head_dim, e.dtype, e.causal): e for e in rendered.entries}
    missing = [entry_name(*k) for k in keys if k not in entries]
    if missing:
        raise EvoError(f"candidate {view.id[:12]} has no kernel {', '.join(missing)}")
    record = store.get(view.id)
    cubins = [Path(b.cubin_path) for b in reversed(record.builds)
              if b.cubin_path and b.status is Status.BUILT and Path(b.cubin_path).is_file()]
    cache = build.cache_dir(view.id)
    cubin = cubins[0] if cubins else cache / build.CUBIN
    if not cubin.is_file():
        cubin = _rebuild(rendered, view)
    source_file = cache / build.SOURCE
    source = source_file.read_text() if source_file.is_file() else rendered.source
    runs = {e.run_id for e in record.evaluations if e.device == dev and e.run_id is not None}
    shas = sorted({sha for r in runs if (run := store.get_run(r)) and (sha := run.git_sha)})
    first = store.get_run(view.first_run_id) if view.first_run_id is not None else None
    provenance = {
        "id": view.id, "family": view.family, "family_version": view.family_version,
        "params": view.params, "label": view.label, "status": view.status.value,
        "source_hash": view.source_hash, "arch": view.arch, "flags": list(view.flags),
        "built_at_git_sha": first.git_sha if first else None, "timed_at_git_shas": shas,
        "entries": [entries[k].name for k in keys],
        "evidence": evidence.entry_evidence(cubin, [n for k in keys for n in entries[k].names]),
    }
    return Shipped(view, {k: entries[k] for k in keys}, cubin, source, provenance)


def _rebuild(rendered: Rendered, view: CandidateView) -> Path:
    """Compile a winner whose cubin left the cache (a fresh GPU host, a cleaned checkout). The
    source renders to the stored hash (checked by the caller) and the build id must come out equal
    to the stored id, so the rebuilt cubin is the measured kernel, not a look-alike."""
    if view.arch is None:
        raise EvoError(f"candidate {view.id[:12]} was never built; nothing to promote")
    result = build.build_batch([rendered], arch=view.arch)[0]
    if result.build_id != view.id or result.status is not Status.BUILT or not result.cubin_path:
        raise EvoError(f"cubin of candidate {view.id[:12]} is not cached and rebuilding it gave "
                       f"{result.status.value} as {result.build_id[:12]}; rebuild it with evo build")
    return Path(result.cubin_path)


def _case_table(routes: Sequence[Route], contenders: Sequence[Contender]) -> list[dict[str, Any]]:
    """Per FAST case: which kernel serves it and how fast, or SDPA."""
    by = {(c.view.id, m.shape): m for c in contenders for m in c.cases}
    rows = []
    for r in routes:
        for s in r.shapes:
            m = by.get((r.winner, s)) if r.winner else None
            base = m.base_us if m else next((x.base_us for (_, sh), x in by.items() if sh == s), None)
            rows.append({**s.as_dict(), "dims": s.dims, "served_by": r.winner, "bucket": r.bucket.label(),
                         "evo_us": m.evo_us if m else None, "sdpa_us": base,
                         "speedup": m.speedup if m else None})
    return sorted(rows, key=lambda c: (c["D"], c["dtype"], c["causal"], c["L"], c["case"]))


def _context(name: str, version: str, shipped: Sequence[Shipped], routes: Sequence[Route],
             cases: list[dict[str, Any]], info: dict[str, Any], dev: str, cap: tuple[int, int],
             db: str, study: str | None, requested: list[str], baseline: str,
             min_speedup: float) -> dict[str, Any]:
    """Everything the templates and the JSON files say."""
    kernels: list[dict[str, Any]] = []
    index: dict[tuple[str, Key], int] = {}
    for s in shipped:
        for key, e in s.entries.items():
            index[(s.view.id, key)] = len(kernels)
            kernel: dict[str, Any] = {"id": s.view.id, "entry": e.name, "threads": e.launch.threads,
                                      "rows_per_cta": e.launch.rows_per_cta, "smem_bytes": e.launch.smem_bytes,
                                      "abi": e.launch.abi, "tma_rows": list(e.launch.tma_rows),
                                      "persistent": e.launch.persistent, "head_dim": e.head_dim,
                                      "split": dataclasses.asdict(e.launch.split) if e.launch.split else None,
                                      "layouts": list(e.launch.layouts)}
            if e.launch.tile_counter:   # only where set: the launcher reads a kernel without it as False
                kernel["tile_counter"] = True
            kernels.append(kernel)
    table = []
    for r in routes:
        d, dt, causal = r.key
        table.append({"head_dim": d, "dtype": dt, "causal": causal, "min_len": r.bucket.lo,
                      "max_len": r.top, "max_bh": r.max_bh, "max_group": r.max_group, "cross": r.cross,
                      "aligns": list(r.aligns), "max_lq": r.max_lq, "chunk": r.chunk, "layout": r.layout,
                      "kernel": index[(r.winner, r.key)] if r.winner else None,
                      "candidate": r.winner, "entry": entry_name(*r.key) if r.winner else None,
                      "speedup": r.speedup, "lengths": sorted({length_of(s) for s in r.shapes}),
                      "cases": [s.tag for s in r.shapes],
                      "best_rejected": list(r.best) if r.best else None})
    served = [c["speedup"] for c in cases if c["speedup"]]
    arches = sorted({s.view.arch for s in shipped if s.view.arch})
    return {
        "name": name, "version": version,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "arch": ", ".join(arches), "capability": list(cap), "device": dev, "device_info": info,
        "baseline": baseline, "min_speedup": min_speedup, "database": db, "study": study,
        "requested": requested, "kernels": kernels, "routes": table, "cases": cases,
        "shipped": [s.provenance for s in shipped],
        "geomean_served": geomean(served) if served else None,
        "timed_shas": sorted({sha for s in shipped for sha in s.provenance["timed_at_git_shas"]}),
        "head_dims": sorted({r.key[0] for r in routes if r.winner}),
        "evo_version": __version__, "evo_git_sha": paths.git_sha(),
    }


def _dispatch_json(ctx: dict[str, Any]) -> dict[str, Any]:
    return {"package": ctx["name"], "arch": ctx["arch"], "capability": ctx["capability"],
            "baseline": ctx["baseline"], "kernels": ctx["kernels"], "routes": ctx["routes"]}


def _provenance_json(ctx: dict[str, Any]) -> dict[str, Any]:
    return {
        "package": ctx["name"], "version": ctx["version"], "created": ctx["created"],
        "evo": {"version": ctx["evo_version"], "git_sha": ctx["evo_git_sha"]},
        "database": ctx["database"], "study": ctx["study"], "requested": ctx["requested"],
        "device": {"name": ctx["device"], **ctx["device_info"]},
        "arch": ctx["arch"], "capability": ctx["capability"],
        "baseline": ctx["baseline"], "min_speedup": ctx["min_speedup"],
        "kernels": ctx["shipped"], "routes": ctx["routes"], "cases": ctx["cases"],
        "geomean_speedup_served": ctx["geomean_served"],
        "verification": ctx.get("verification", {"verified": False}),
        "excluded_red_kernels": ctx.get("excluded", []),
        "excluded_stale_candidates": ctx.get("stale", []),
        "confirmation": ctx.get("confirmation", {"interleaved": False}),
    }


def _green_suite() -> dict[str, Any]:
    settings = green_settings()
    return {
        "cases": [s.as_dict() for s in green_cases(settings.dtypes)],
        "seeds": list(settings.seeds), "multiplier": settings.multiplier,
        "floors": dict(settings.floors), "float64_below": settings.float64_below,
    }


def template_dir() -> Path:
    return paths.root() / "templates" / "package"


def _render_tree(dest: Path, ctx: dict[str, Any]) -> None:
    """``templates/package``: ``pkg/`` becomes ``NAME/``; ``*.j2`` are rendered, the rest copied."""
    src = template_dir()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(src)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False)
    env.filters["us"] = lambda x: "—" if x is None else f"{x:.2f}" if x < 100 else f"{x:.1f}"
    env.filters["x"] = lambda x: "—" if x is None else f"x{x:.2f}"
    env.filters["setmaxnreg"] = evidence.setmaxnreg_text
    for f in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = f.relative_to(src)
        parts = [ctx["name"] if i == 0 and p == "pkg" else p for i, p in enumerate(rel.parts)]
        out = dest.joinpath(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        if f.suffix == ".j2":
            out.with_suffix("").write_text(env.get_template(rel.as_posix()).render(ctx))
        else:
            shutil.copyfile(f, out)


def _write(target: Path, ctx: dict[str, Any], shipped: Sequence[Shipped], run_tests: bool = False) -> None:
    """Build the package in a sibling temp folder, run its own tests there (``run_tests``),
    then move it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _render_tree(tmp, ctx)
        pkg = tmp / ctx["name"]
        kernels = pkg / "kernels"
        kernels.mkdir(parents=True, exist_ok=True)
        for s in shipped:
            shutil.copyfile(s.cubin, kernels / f"{s.view.id}.cubin")
            (kernels / f"{s.view.id}.cu").write_text(s.source)
        # the split-KV plan, verbatim: the launcher's one spelling of evo's math (evo.family.splitkv)
        shutil.copyfile(Path(splitkv.__file__), pkg / "_splitkv.py")
        _dump(pkg / "dispatch.json", _dispatch_json(ctx))
        _dump(pkg / MARKER, _provenance_json(ctx))
        _dump(pkg / "tests" / "green_suite.json", _green_suite())
        if run_tests:
            ctx["verification"]["package_tests"] = verifier.run_package_tests(tmp, ctx["name"])
            _dump(pkg / MARKER, _provenance_json(ctx))
        if target.exists():  # empty, or a package promote wrote and force allows replacing
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _dump(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
