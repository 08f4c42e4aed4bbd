"""Compile rendered candidates to cubins in parallel, cached by build id, resource-checked.

One call builds a batch: items already in the cache (``candidates/<id[:2]>/<id>/``) are
answered from their ``meta.json``; the rest are compiled by one generated ``build.ninja``
(``ninja -k 0 -j JOBS``), one nvcc per candidate, each writing its own ptxas log and exit
status. A finished item is checked against the arch's limits (a launch geometry that can be
set up, no spills, shared memory and registers per CTA within bounds) and moved into the cache
by renaming its whole folder, so a kill at any moment never leaves a half-written cubin that
looks cached.

The build id is computed without compiling (:func:`build_id_for`): it hashes the key of
:func:`evo.family.render.build_key` -- source, flags, arch, every entry's launch config, the nvcc
version and build, and the headers included from outside the toolkit -- so editing any of them
gives a new id instead of a stale cached verdict. The key is kept in each ``meta.json``.

Machine code is shared: builds whose source differs only in evo's two comment lines at the top
(family and params: :attr:`evo.family.render.Rendered.body` is the rest), with the same flags,
arch, compiler and headers, compile to the same cubin and ptxas report. Their common *code id*
names an object under ``candidates/.objects/``; a build whose object exists takes a hard link to
its cubin and report instead of compiling (``meta.json`` gives each build's ``code_id`` and
whether it was ``compiled_here``), and of such builds
in one batch only the first is compiled. Launch-only genes (a split-KV family's SPLIT_MIN and
WAVES) and a test family that renders another family's template (faulty_decode's positive
control) compile once. Each build is still checked against its own launch configs.

A family on another backend (:mod:`evo.family.backends`: a rendered Python module with Triton kernels)
goes through the same cache: its module is checked and installed under its build id, whose key
names the installed triton instead of nvcc; ``meta.json`` says which file is the artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, UTC
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from evo.family import backends, headers

from evo import paths

from evo.toolchain import smi
from evo.errors import EvoError
from evo.family.manifest import Family, load_family
from evo.toolchain.ptxas import parse_ptxas
from evo.family.render import Entry, Rendered, build_id, build_key
from evo.results import BuildResult, Resources, Status

# Opt-in dynamic shared memory per block (CUDA programming guide, compute capabilities table).
SMEM_LIMITS = {"sm_80": 166912, "sm_86": 101376, "sm_87": 166912, "sm_89": 101376,
               "sm_90": 232448, "sm_90a": 232448}
REGISTERS_PER_BLOCK = 65536
MAX_THREADS_PER_BLOCK = 1024
CUBIN, SOURCE, LOG, META = "kernel.cubin", "kernel.cu", "ptxas.log", "meta.json"
_STATUS_FILE = "status"
OBJECTS = ".objects"   # under the cache: compiled machine code by code id (cubin and ptxas report)
_ARCH = re.compile(r"sm_(\d+)(a?)")
_UNREPORTED = Resources(registers=0, smem_static=0, spill_stores=0, spill_loads=0, stack_frame=0)
_PROGRESS = re.compile(r"^\[\d+/\d+\] ([0-9a-f]{64})\s*$")

OnDone = Callable[[BuildResult], None]


def nvcc_path() -> str:
    """The nvcc to use: ``$EVO_NVCC``, else nvcc on PATH, else ``$CUDA_HOME/bin/nvcc``."""
    candidates = [os.environ.get("EVO_NVCC"), shutil.which("nvcc")]
    if home := os.environ.get("CUDA_HOME"):
        candidates.append(str(Path(home) / "bin" / "nvcc"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise EvoError("nvcc not found; install the CUDA toolkit or put nvcc on PATH")


@cache
def _nvcc_about(path: str, mtime_ns: int) -> tuple[str, str]:
    """(dotted version, identity) of the nvcc at ``path`` as it is at ``mtime_ns``."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise EvoError(f"cannot run {path} --version: {exc}") from None
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    version = m.group(1) if m else lines[-1] if lines else "unknown"
    # "Cuda compilation tools, release 13.0, V13.0.88" and "Build cuda_13.0.r13.0/compiler.36424714_0"
    named = [ln for ln in lines if ln.startswith(("Cuda compilation tools", "Build "))]
    return version, "; ".join(named or lines[-2:]) or "unknown"


def _nvcc_version(path: str) -> tuple[str, str]:
    return _nvcc_about(path, os.stat(path).st_mtime_ns)


def nvcc_version() -> str:
    """nvcc's version, e.g. ``13.0.88``."""
    return _nvcc_version(nvcc_path())[0]


def compiler_identity() -> str:
    """The nvcc a build id names: its release and build lines from ``nvcc --version``."""
    return _nvcc_version(nvcc_path())[1]


def ninja_path() -> str:
    """ninja on PATH, else the binary of the ``ninja`` Python package."""
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # type: ignore[import-untyped]
    except ImportError:
        raise EvoError("ninja not found; pip install ninja or put ninja on PATH") from None
    return str(Path(ninja.BIN_DIR) / "ninja")


def cpus() -> int:
    """The CPUs this process may run on (its affinity: taskset, a container's cpuset), which is
    how many nvcc processes a batch runs at once by default; ``os.cpu_count()`` counts the host's."""
    getter = getattr(os, "sched_getaffinity", None)
    return len(getter(0)) if getter is not None else os.cpu_count() or 1


def default_arch() -> str:
    """sm_80 on an Ampere GPU, else sm_90a (Hopper, and the default with no GPU).

    Asks nvidia-smi first so the calling process (the search) never initializes CUDA
    itself; falls back to torch when nvidia-smi is absent.
    """
    major = _gpu_major()
    return "sm_80" if major == 8 else "sm_90a"


def _gpu_major() -> int | None:
    caps = smi.query("compute_cap")
    if caps:
        try:
            return int(caps[0].split(".")[0])
        except ValueError:
            pass
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_capability(0)[0])


def smem_limit(arch: str) -> int:
    """Bytes of shared memory one CTA may use on ``arch`` (raises for unknown arches)."""
    if arch not in SMEM_LIMITS:
        raise EvoError(f"unsupported arch {arch!r}; supported: {', '.join(SMEM_LIMITS)}")
    return SMEM_LIMITS[arch]


def gencode(arch: str) -> list[str]:
    """nvcc flags targeting exactly ``arch``: sm_90a -> arch=compute_90a,code=sm_90a."""
    smem_limit(arch)
    m = _ARCH.fullmatch(arch)
    assert m is not None  # every key of SMEM_LIMITS matches
    return ["-gencode", f"arch=compute_{m[1]}{m[2]},code=sm_{m[1]}{m[2]}"]


def compile_flags(family: Family) -> tuple[str, ...]:
    """The flags that are part of a build's identity: the family's nvcc flags."""
    return tuple(family.nvcc_flags)


def build_key_for(rendered: Rendered, arch: str) -> dict[str, Any]:
    """The key whose hash is ``rendered``'s build id on ``arch`` (:func:`evo.family.render.build_key`);
    a Triton family's compiler is the installed triton (:func:`evo.family.backends.triton_identity`)."""
    fam = load_family(rendered.candidate.family)
    if fam.backend != "cuda":
        return build_key(rendered, compile_flags(fam), arch, backends.triton_identity(), {})
    return build_key(rendered, compile_flags(fam), arch, compiler_identity(),
                     headers.header_key(fam, rendered.source))


def build_id_for(rendered: Rendered, arch: str) -> str:
    """The build id (= candidate id) ``rendered`` gets on ``arch``, without building it."""
    return build_id(build_key_for(rendered, arch))


def cache_dir(bid: str) -> Path:
    """The cache folder of one build id."""
    return paths.candidates_dir().resolve() / bid[:2] / bid


def geometry_problems(entries: Sequence[Entry]) -> list[str]:
    """Why an entry's launch cannot even be set up on any GPU (empty when it can)."""
    problems = []
    for e in entries:
        if not 1 <= e.launch.threads <= MAX_THREADS_PER_BLOCK:
            problems.append(f"{e.name} launches {e.launch.threads} threads per CTA; "
                            f"1 to {MAX_THREADS_PER_BLOCK} can be launched")
        if e.launch.rows_per_cta < 1:
            problems.append(f"{e.name} gives each CTA {e.launch.rows_per_cta} query rows; at least 1")
        if e.launch.smem_bytes < 0:
            problems.append(f"{e.name} asks for {e.launch.smem_bytes} B of dynamic shared memory")
    return problems


def resource_problems(resources: Mapping[str, Resources], entries: Sequence[Entry], arch: str) -> list[str]:
    """Why the entries cannot run well on ``arch`` (empty when they can): a launch geometry that
    cannot be set up, spills, wgmma that ptxas serialized, shared memory (static + dynamic) over
    the per-CTA limit, registers x threads over the register file. An entry missing from ``resources`` is
    checked for its launch config alone."""
    limit = smem_limit(arch)
    problems = geometry_problems(entries)
    for e in entries:
        for name in e.names:                  # the entry and its cache layouts' kernels
            r = resources.get(name, _UNREPORTED)
            if r.spill_stores or r.spill_loads:
                problems.append(f"{name} spills ({r.spill_stores} B stores, {r.spill_loads} B loads)")
            if r.wgmma_serialized:
                problems.append(f"{name}: ptxas serialized its wgmma ({r.wgmma_serialized})")
            smem = r.smem_static + e.launch.smem_bytes
            if smem > limit:
                problems.append(f"{name} needs {smem} B shared memory ({r.smem_static} static + "
                                f"{e.launch.smem_bytes} dynamic) > {limit} B on {arch}")
            regs = r.registers * e.launch.threads
            if regs > REGISTERS_PER_BLOCK:
                problems.append(f"{name} needs {r.registers} registers x {e.launch.threads} threads "
                                f"= {regs} > {REGISTERS_PER_BLOCK}")
    return problems


def launch_problems(bid: str, entries: Sequence[Entry]) -> list[str]:
    """Why launching ``entries`` from build ``bid`` cannot be set up: the resource check again,
    against the cached build's arch and ptxas report, or the geometry alone when ``bid`` is not
    cached. Cheap (one small file read), so the parent runs it before any GPU worker sees a
    request."""
    cached = load_cached(bid)
    if cached is None or cached.arch not in SMEM_LIMITS:
        return geometry_problems(entries)
    return resource_problems(cached.resources, entries, cached.arch)


@dataclass(frozen=True)
class _Plan:
    build_id: str
    rendered: Rendered
    flags: tuple[str, ...]
    key: dict[str, Any]
    backend: str = "cuda"

    @cached_property
    def code_id(self) -> str:
        """The identity of this build's machine code: its key less the launch configs, the
        source's hash replaced by its body's (module docstring)."""
        body = hashlib.sha256(self.rendered.body.encode()).hexdigest()
        return build_id({k: v for k, v in self.key.items() if k != "entries"} | {"source_hash": body})


def build_batch(items: list[Rendered], arch: str = "sm_90a", jobs: int | None = None,
                on_done: OnDone | None = None, *, timeout_s: int = 600) -> list[BuildResult]:
    """Build every item for ``arch``; results are in the order of ``items``.

    Cached items are answered without compiling (``cached=True``); duplicates are built once.
    ``on_done(result)`` is called once per distinct build as soon as it is known (cache hits
    first, then compiles in the order they finish). An nvcc that runs longer than
    ``timeout_s`` is killed and its item is COMPILE_FAILED (not cached).
    """
    smem_limit(arch)
    plans: dict[str, _Plan] = {}
    order = []
    for item in items:
        fam = load_family(item.candidate.family)
        if arch not in fam.arches:
            raise EvoError(f"family {fam.name} does not support {arch}; it supports {', '.join(fam.arches)}")
        key = build_key_for(item, arch)
        bid = build_id(key)
        plans.setdefault(bid, _Plan(bid, item, compile_flags(fam), key, fam.backend))
        order.append(bid)
    results: dict[str, BuildResult] = {}
    todo = []
    for bid, plan in plans.items():
        hit = load_cached(bid)
        if hit is None:
            todo.append(plan)
        else:
            results[bid] = hit
            if on_done:
                on_done(hit)
    for plan in [p for p in todo if p.backend != "cuda"]:
        results[plan.build_id] = _build_module(plan, arch)
        if on_done:
            on_done(results[plan.build_id])
    todo = [p for p in todo if p.backend == "cuda"]
    if todo:
        _compile(todo, arch, jobs or cpus(), timeout_s, results, on_done)
    return [results[bid] for bid in order]


def load_cached(bid: str) -> BuildResult | None:
    """The cached result of ``bid``, or None when absent or incomplete."""
    folder = cache_dir(bid)
    try:
        meta = json.loads((folder / META).read_text())
        status = Status(meta["status"])
        log = (folder / LOG).read_text()
    except (OSError, ValueError, KeyError):
        return None
    cubin = folder / meta.get("artifact", CUBIN)
    if meta.get("build_id") != bid or (status is not Status.COMPILE_FAILED and not cubin.is_file()):
        return None
    return BuildResult(
        build_id=bid, source_hash=meta["source_hash"], arch=meta["arch"], flags=tuple(meta["flags"]),
        status=status, reason=meta.get("reason", ""), cubin_path=str(cubin) if cubin.is_file() else None,
        log=log, seconds=float(meta.get("seconds", 0.0)), cached=True,
        resources={k: Resources(**v) for k, v in meta.get("resources", {}).items()},
    )


def _compile(todo: list[_Plan], arch: str, jobs: int, timeout_s: int,
             results: dict[str, BuildResult], on_done: OnDone | None) -> None:
    nvcc, ninja = nvcc_path(), ninja_path()
    staging = paths.candidates_dir().resolve() / ".tmp"
    staging.mkdir(parents=True, exist_ok=True)
    batch = Path(tempfile.mkdtemp(prefix="batch-", dir=staging))
    proc: subprocess.Popen[str] | None = None
    try:
        same_code: dict[str, list[_Plan]] = {}
        for plan in todo:
            (batch / plan.build_id).mkdir()
            (batch / plan.build_id / SOURCE).write_text(plan.rendered.source)
            same_code.setdefault(plan.code_id, []).append(plan)

        def finish(plan: _Plan, note: str = "") -> None:
            result = _finish(batch / plan.build_id, plan, arch, timeout_s, note)
            results[plan.build_id] = result
            if on_done:
                on_done(result)

        def share(source: Path, plans: Sequence[_Plan]) -> None:
            for plan in plans:
                _take_code(source, batch / plan.build_id)
                finish(plan)

        compile_first = []
        for code_id, plans in same_code.items():
            if _has_object(code_id):
                share(_object_dir(code_id), plans)
            else:
                compile_first.append(plans[0])
        if not compile_first:
            return
        (batch / "build.ninja").write_text(_ninja_file(compile_first, nvcc, arch, timeout_s))
        pending = {p.build_id: p for p in compile_first}

        def compiled(plan: _Plan, note: str = "") -> None:
            folder, others = batch / plan.build_id, same_code[plan.code_id][1:]
            if _keep_object(folder, plan.code_id):
                share(folder, others)
            else:   # failed, killed or timed out: the others share the verdict, not an object
                for other in others:
                    _take_status(folder, batch / other.build_id)
                    finish(other, note)
            finish(plan, note)

        proc = subprocess.Popen([*_background(), ninja, "-k", "0", "-j", str(jobs)], cwd=batch, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=os.environ | {"NINJA_STATUS": "[%f/%t] "})
        assert proc.stdout is not None
        tail = ""
        for line in proc.stdout:
            tail = line.strip() or tail
            m = _PROGRESS.match(line)
            if m and m[1] in pending:
                compiled(pending.pop(m[1]))
        code = proc.wait()
        for plan in list(pending.values()):
            compiled(pending.pop(plan.build_id), f"ninja exited with {code}: {tail}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()  # ninja stops its nvcc process groups on SIGTERM
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(batch, ignore_errors=True)


BUILD_NICENESS = 19
"""The scheduling priority builds run at (``nice -n``). A search compiles the next batch, one nvcc
per core, while its GPU worker runs GREEN and FAST on this one; GREEN is a Python loop of small
launches and comparisons that waits for a core between them. On an H100 host of 16 cores (git
d30abeb, scripts/green_contention.py) GREEN took 3.1 s idle, 6.4 s beside a spinning process per
core and 3.8 s beside the same at nice 19. A build alone on an idle host runs at full speed."""


def _background() -> list[str]:
    """The prefix that runs a build at :data:`BUILD_NICENESS` (none where ``nice`` is missing)."""
    nice = shutil.which("nice")
    return [nice, "-n", str(BUILD_NICENESS)] if nice else []


def _object_dir(code_id: str) -> Path:
    """Where the machine code of ``code_id`` is kept (it may not exist)."""
    return paths.candidates_dir().resolve() / OBJECTS / code_id[:2] / code_id


def _has_object(code_id: str) -> bool:
    folder = _object_dir(code_id)
    return (folder / CUBIN).is_file() and (folder / LOG).is_file()


def _keep_object(folder: Path, code_id: str) -> bool:
    """Keep the cubin and ptxas report that nvcc wrote into ``folder`` as the object of ``code_id``
    (hard links; a copy where links fail), unless nvcc failed; whether ``folder`` holds code to
    share. Installed by renaming a complete folder, so an object is never half there; the first
    writer wins, and an object that cannot be kept only costs a later compile."""
    try:
        code = int((folder / _STATUS_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    if code != 0 or not (folder / CUBIN).is_file():
        return False
    if not _has_object(code_id):
        final = _object_dir(code_id)
        staging = Path(tempfile.mkdtemp(prefix="object-", dir=folder.parent.parent))
        try:
            for name in (CUBIN, LOG):
                _link(folder / name, staging / name)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, final)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return True


def _take_code(source: Path, folder: Path) -> None:
    """Give the build in ``folder`` the cubin and ptxas report of ``source`` (an object or the
    build that compiled it), as a compile that took no time (``meta.json``: not ``compiled_here``)."""
    for name in (CUBIN, LOG):
        _link(source / name, folder / name)
    (folder / _STATUS_FILE).write_text("0 0 0\n")
    (folder / OBJECTS).touch()   # a marker: _install records that nvcc did not run for this build


def _take_status(source: Path, folder: Path) -> None:
    """Give the build in ``folder`` the outcome of a compile of the same code that did not give a
    cubin: its log and exit status (absent when it was interrupted), no time of its own."""
    if (source / LOG).is_file():
        _link(source / LOG, folder / LOG)
    (folder / OBJECTS).touch()
    try:
        code = (source / _STATUS_FILE).read_text().split()[0]
    except (OSError, IndexError):
        return
    (folder / _STATUS_FILE).write_text(f"{code} 0 0\n")


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _ninja_file(todo: list[_Plan], nvcc: str, arch: str, timeout_s: int) -> str:
    def q(args: Sequence[str]) -> str:
        return " ".join(shlex.quote(a) for a in args).replace("$", "$$")

    timeout = shutil.which("timeout")
    limit = q([timeout, "-k", "10", str(timeout_s)]) + " " if timeout else ""
    lines = [
        "ninja_required_version = 1.5",
        f"nvcc = {limit}{q([nvcc])}",
        f"arch = {q(gencode(arch))}",
        "rule nvcc",
        f"  command = cd $dir && t0=$$(date +%s%N) && $nvcc $flags -cubin -Xptxas -v $arch "
        f"-o {CUBIN}.part {SOURCE} > {LOG} 2>&1; rc=$$?; echo $$rc $$t0 $$(date +%s%N) > {_STATUS_FILE}; "
        f"[ $$rc -eq 0 ] && mv {CUBIN}.part {CUBIN}; exit $$rc",
        "  description = $dir",
    ]
    for p in todo:
        includes = headers.include_flags(load_family(p.rendered.candidate.family))
        lines += [f"build {p.build_id}/{CUBIN}: nvcc {p.build_id}/{SOURCE}",
                  f"  dir = {p.build_id}", f"  flags = {q([*p.flags, *includes])}"]
    return "\n".join(lines) + "\n"


def _first_error(log: str, code: int) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.IGNORECASE)]
    text = errors[0] if errors else lines[-1] if lines else f"exit code {code}"
    return "nvcc: " + text[:300]


def _finish(folder: Path, plan: _Plan, arch: str, timeout_s: int, note: str) -> BuildResult:
    """Turn one compiled folder into a result; move it into the cache when it is final."""
    log = (folder / LOG).read_text(errors="replace") if (folder / LOG).is_file() else ""
    failed = BuildResult(plan.build_id, plan.rendered.source_hash, arch, plan.flags,
                         Status.COMPILE_FAILED, log=log)
    try:
        code, t0, t1 = (int(x) for x in (folder / _STATUS_FILE).read_text().split())
    except (OSError, ValueError):
        return replace(failed, reason="build interrupted" + (f" ({note})" if note else ""))
    seconds = (t1 - t0) / 1e9
    if code == 124:
        return replace(failed, seconds=seconds, reason=f"nvcc did not finish within {timeout_s} s")
    if code > 128:
        return replace(failed, seconds=seconds, reason=f"nvcc was killed by signal {code - 128}")
    if code != 0:
        return _install(folder, plan, replace(failed, seconds=seconds, reason=_first_error(log, code)))
    if not (folder / CUBIN).is_file():
        return replace(failed, seconds=seconds, reason="nvcc succeeded but wrote no cubin")
    entries = plan.rendered.entries
    report = parse_ptxas(log)
    resources = {n: replace(report[n], smem_dynamic=e.launch.smem_bytes)
                 for e in entries for n in e.names if n in report}
    missing = [n for e in entries for n in e.names if n not in report]
    if missing:
        reason = "kernel entries missing from the ptxas report: " + ", ".join(missing)
        return _install(folder, plan, replace(failed, seconds=seconds, reason=reason, resources=resources))
    problems = resource_problems(resources, entries, arch)
    status = Status.RESOURCE_REJECTED if problems else Status.BUILT
    return _install(folder, plan, replace(failed, status=status, reason="; ".join(problems),
                                          seconds=seconds, resources=resources))


def _build_module(plan: _Plan, arch: str) -> BuildResult:
    """A non-CUDA backend's build: the rendered module is checked (it parses, it defines
    ``launch``) and its launch geometry too, then cached like a cubin. Its kernels are compiled
    by Triton in the worker, on first use."""
    artifact = backends.backend(plan.backend).artifact
    staging = paths.candidates_dir().resolve() / ".tmp"
    staging.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="module-", dir=staging))
    (folder / SOURCE).write_text(plan.rendered.source)
    problem = backends.module_problem(plan.rendered.source, artifact)
    result = BuildResult(plan.build_id, plan.rendered.source_hash, arch, plan.flags, Status.BUILT,
                         log=problem or f"{artifact}: parsed; Triton compiles its kernels on first launch")
    if problem:
        result = replace(result, status=Status.COMPILE_FAILED, reason=problem)
    else:
        (folder / artifact).write_text(plan.rendered.source)
        geometry = geometry_problems(plan.rendered.entries)
        if geometry:
            result = replace(result, status=Status.RESOURCE_REJECTED, reason="; ".join(geometry))
    (folder / LOG).write_text(result.log)
    return _install(folder, plan, result)


def _install(folder: Path, plan: _Plan, result: BuildResult) -> BuildResult:
    """Write meta.json and rename the folder into the cache (atomic; the first writer wins)."""
    (folder / _STATUS_FILE).unlink(missing_ok=True)
    (folder / f"{CUBIN}.part").unlink(missing_ok=True)
    shared = folder / OBJECTS
    code = {"code_id": plan.code_id, "compiled_here": not shared.is_file()} if plan.backend == "cuda" else {}
    shared.unlink(missing_ok=True)
    artifact = backends.backend(plan.backend).artifact
    cand = plan.rendered.candidate
    meta = {
        "build_id": result.build_id, "source_hash": result.source_hash, "arch": result.arch,
        "flags": list(result.flags), "status": result.status.value, "reason": result.reason,
        "seconds": result.seconds, "resources": {k: asdict(v) for k, v in result.resources.items()},
        "family": cand.family, "family_version": plan.rendered.family_version, "params": cand.p,
        "label": cand.label(), "key": plan.key, "artifact": artifact,
        **({"nvcc": nvcc_version()} if plan.backend == "cuda" else {}), **code,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (folder / META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    final = cache_dir(result.build_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and load_cached(result.build_id) is None:
        shutil.rmtree(final, ignore_errors=True)  # an incomplete folder from an older crash
    try:
        os.rename(folder, final)
    except OSError as exc:
        if load_cached(result.build_id) is None:  # not "another process installed it first"
            raise EvoError(f"cannot install build {result.build_id[:12]} into the cache at {final}: {exc}") from None
        # another process installed the same build first: its files are equivalent
    cubin = final / artifact
    return replace(result, cubin_path=str(cubin) if cubin.is_file() else None)
