"""``evo doctor``: what this machine has for evo (nvcc, ninja, GPU, cuda-python, evo's own
files, the data folder, the database).

Each finding says whether it is *required*: nvcc and ninja (every build needs them), evo's
templates, suites and migrations, families whose manifests load, a writable data folder and a
database that opens. A GPU, its driver and cuda-python are needed only for GREEN/FAST, so their
absence is reported but does not fail the check; nor does a family folder further along the
template path (``$EVO_TEMPLATE_PATH``) that a family of the same name shadows, which is said.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass

from evo.toolchain import build, smi

from evo import paths
from evo.errors import EvoError
from evo.family.manifest import family_dirs, list_families, load_family
from evo.store import open_store
from evo.store.engine import safe_url


@dataclass(frozen=True)
class Finding:
    """One line of ``evo doctor``: what was checked, whether it is fine, and whether evo needs it."""

    name: str
    ok: bool
    detail: str
    required: bool = False


def _nvcc() -> Finding:
    try:
        path = build.nvcc_path()
        return Finding("nvcc", True, f"{path} (CUDA {build.nvcc_version()})", True)
    except EvoError as exc:
        return Finding("nvcc", False, str(exc), True)


def _ninja() -> Finding:
    try:
        path = build.ninja_path()
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        return Finding("ninja", True, f"{path} ({out})", True)
    except (EvoError, OSError, subprocess.SubprocessError) as exc:
        return Finding("ninja", False, str(exc), True)


def _driver() -> str:
    if not shutil.which("nvidia-smi"):
        return "nvidia-smi not found"
    versions = smi.query("driver_version")
    if versions is None:
        return "nvidia-smi failed"
    return f"driver {versions[0]}" if versions else "nvidia-smi reports no GPU"


def _gpus() -> list[Finding]:
    try:
        import torch
    except ImportError:
        return [Finding("gpu", False, "torch is not installed")]
    if not torch.cuda.is_available():
        return [Finding("gpu", False, f"no GPU (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})")]
    out = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        arch = ("sm_80" if major == 8 else "sm_90a" if major == 9
                else f"sm_{major}{minor} (unsupported: use sm_90a/sm_80)")
        out.append(Finding(f"gpu {i}", True, f"{torch.cuda.get_device_name(i)}, compute {major}.{minor} -> {arch}, "
                                             f"torch {torch.__version__} CUDA {torch.version.cuda}, {_driver()}"))
    return out


def _cuda_python() -> Finding:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None:
        return Finding("cuda-python", False, "cuda.core not importable (pip install 'evo-kernels[gpu]')")
    versions = []
    for dist in ("cuda-python", "cuda-core"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return Finding("cuda-python", True, ", ".join(versions) or "cuda.core importable")


def _database(url: str) -> Finding:
    path = paths.sqlite_file(url)
    if path is not None and not path.exists():
        return Finding("database", True, f"{safe_url(url)} (not created yet: evo creates it on first use)", True)
    try:
        with open_store(url) as store:
            counts = store.counts()
    except EvoError as exc:
        return Finding("database", False, str(exc), True)
    summary = ", ".join(f"{n.removeprefix('evo_')} {c}" for n, c in counts.items()
                        if n in ("evo_candidates", "evo_evaluations", "evo_runs"))
    return Finding("database", True, f"{safe_url(url)} opens ({summary})", True)


def _files() -> Finding:
    """evo's own resources: the families, the suites, the migrations and the recorded sweep."""
    try:
        root = paths.root()
    except EvoError as exc:
        return Finding("files", False, str(exc), True)
    wanted = {"templates": root / "templates", "suites": root / "acceptance" / "green.toml",
              "migrations": root / "db" / "env.py"}
    missing = [name for name, p in wanted.items() if not p.exists()]
    if missing:
        return Finding("files", False, f"{root}: missing {', '.join(missing)}; reinstall evo", True)
    recordings = sorted(p.name for p in (root / "data").glob("sweep-*.json.gz"))
    return Finding("files", True, f"{root} (recordings: {', '.join(recordings) or 'none'})", True)


def _home() -> Finding:
    """Where the database, build cache and benchmarks go; it must be writable (or creatable)."""
    home = paths.home()
    probe = home
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    ok = os.access(probe, os.W_OK)
    return Finding("data", ok, f"{home}{'' if ok else ' is not writable: set EVO_HOME'}", True)


def _families(files_ok: bool) -> list[Finding]:
    """The families that load, one required failure per family whose manifest (or a shadowed
    copy's) does not, with its error on one line, and a note per shadowed copy that loads."""
    names = list_families() if files_ok else []
    loaded, broken, shadowed = [], [], []
    for name in names:
        try:
            load_family(name)
        except EvoError as exc:
            broken.append(Finding(f"family {name}", False, "broken manifest: " + " ".join(str(exc).split()), True))
            continue
        loaded.append(name)
        first, *others = family_dirs(name)
        shadowed += [Finding(f"family {name}", False, f"{d} is shadowed by {first}, which is used instead")
                     for d in others]
    found = Finding("families", bool(loaded), ", ".join(loaded) or f"none under {paths.template_dirs()}")
    return [found, *broken, *shadowed]


def diagnose(db_url: str | None = None) -> list[Finding]:
    """Everything ``evo doctor`` reports, in display order."""
    url = db_url or paths.default_db_url()
    files = _files()
    return [
        _nvcc(),
        _ninja(),
        *_gpus(),
        _cuda_python(),
        files,
        *_families(files.ok),
        _home(),
        Finding("cache", True, str(paths.candidates_dir().resolve())),
        _database(url),
    ]
