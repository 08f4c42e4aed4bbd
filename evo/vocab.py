"""evo's vocabulary, defined once: statuses and their subsets, backend names, how values are
written, and the names of GPUs and commits that provenance records.

Every module imports these instead of spelling its own, so that a status set, a backend name or
the way a boolean is printed cannot differ between two tables (docs/design.md, status
taxonomy). It imports nothing from evo, so any module may import it. (The speedup arithmetic,
geometric means included, lives in :mod:`evo.scoring`.)
"""

from __future__ import annotations

import enum
import re

from evo.errors import EvoError

# ----------------------------------------------------------------------------- statuses


class Status(enum.StrEnum):
    """The one status column of a candidate (docs/design.md, status taxonomy)."""

    INVALID = "invalid"                      # violates manifest or constraints, never rendered
    COMPILE_FAILED = "compile_failed"
    RESOURCE_REJECTED = "resource_rejected"  # spills / shared memory / registers over limit
    BUILT = "built"                          # compiled and resource-checked, not yet evaluated
    CRASHED = "crashed"                      # CUDA fault in the worker
    TIMEOUT = "timeout"
    RED = "red"                              # ran, failed GREEN
    GREEN = "green"                          # passed GREEN, not yet timed
    FAST = "fast"                            # GREEN and timed
    PRUNED = "pruned"                        # GREEN, screened, pruned: never timed in full, never ranked

    @property
    def failed(self) -> bool:
        """A final failure (:data:`FAILED`): the candidate will never be timed."""
        return self in FAILED


PASSED = frozenset({Status.GREEN, Status.FAST})                        # passed GREEN (what promote ships)
GATED = frozenset({*PASSED, Status.PRUNED})                            # passed GREEN, pruned ones too (checks kept)
BUILD_FAILED = frozenset({Status.COMPILE_FAILED, Status.RESOURCE_REJECTED})  # nvcc or the resource check said no
WORKER_FAILED = frozenset({Status.CRASHED, Status.TIMEOUT})            # the worker process was lost on it
EVALUATED = frozenset({Status.RED, *WORKER_FAILED, *GATED})            # a GPU worker has seen it
FAILED = frozenset({Status.INVALID, Status.RED, *BUILD_FAILED, *WORKER_FAILED})
COMPILED = frozenset({Status.BUILT, Status.RESOURCE_REJECTED, *EVALUATED})  # nvcc produced a cubin

# ----------------------------------------------------------------------------- rungs

SCREEN, FULL = "screen", "full"  # a search's two rungs of FAST: a short screen, then the full protocol
RUNGS = (SCREEN, FULL)           # (docs/design.md, "Rungs"); evo eval and evo bench time the full one only
SCREENS, INCUMBENT = "screens", "incumbent"   # what sets the pruner's overall bar (evo.search.pruner)
PRUNE_BARS = (SCREENS, INCUMBENT)

# ----------------------------------------------------------------------------- backends

EVO = "evo"  # the backend name of the candidate's own timings (Timing.backend), beside SDPA's
SDPA_BACKENDS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default")  # PyTorch SDPA, timed alike
FA4 = "fa4"  # FlashAttention-4 (flash_attn.cute.flash_attn_func), an optional baseline: timed alike where importable
BASELINE_BACKENDS = (*SDPA_BACKENDS, FA4)  # every baseline a candidate can be timed beside (evo bench's default)
DEFAULT_BASELINE = "sdpa_default"  # what a plain F.scaled_dot_product_attention call does
KERNEL_BACKENDS = ("cuda", "triton")  # how a family's rendered source becomes a runnable kernel

# ----------------------------------------------------------------------------- choices the CLI offers
# Defined here rather than beside the code that acts on them (evo.search, evo.samplerbench,
# evo.gpu.suites), so that the CLI's options can list them without importing that code: `evo
# --help` and a usage error then cost no optuna or SQLAlchemy import (a third of a second, not two).

DTYPES = ("fp16", "bf16")                                            # element types of q, k, v, o
STEADY, BURST = "steady", "burst"            # a long case's clock protocol (evo.gpu.timing; evo bench --clocks)
CLOCKS = (STEADY, BURST)


def clock_protocol(name: str) -> str:
    """``name``, one of :data:`CLOCKS`; a one-line EvoError otherwise (checked where a request,
    a library call or a worker's plan first takes it)."""
    if name not in CLOCKS:
        raise EvoError(f"unknown clock protocol {name!r}; one of {', '.join(CLOCKS)}")
    return name


SAMPLERS = ("evo", "evo-gp", "tpe", "gp", "cmaes", "random", "grid")   # evo run --sampler (docs/search.md)
BASELINES = ("sdpa_default", "sdpa_flash")   # the SDPA backends a search's scores can be against
OBJECTIVES = ("geomean", "per-bucket")       # one geometric mean, or one per (head dim, causal) bucket
HEARTBEAT_S = 20                             # seconds between a search worker's heartbeats
GRACE_S = 60                                 # seconds without one before its trial is failed and retried
DEFAULT_TOP = 8                              # --start-from: each source study's best taken
BENCH_EVO_SAMPLERS = ("evo", "evo-gp", "random")        # evo bench-samplers entrants: evo's own
BENCH_OPTUNA_SAMPLERS = ("tpe", "gp", "optuna-random")  # and Optuna's
BENCH_SAMPLERS = BENCH_EVO_SAMPLERS + BENCH_OPTUNA_SAMPLERS
START_MODES = ("cold", "warm")               # evo bench-samplers: from nothing, or from a prior study

# ----------------------------------------------------------------------------- writing values


def value_text(value: object) -> str:
    """A parameter value as evo writes it everywhere: booleans lower case (``true``), as the
    manifests and ``-p KEY=VALUE`` spell them; everything else as ``str``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def assignment_text(name: str, value: object) -> str:
    """``NAME=value`` with :func:`value_text`."""
    return f"{name}={value_text(value)}"


# ----------------------------------------------------------------------------- provenance

VENDOR_WORDS = ("nvidia", "geforce", "tesla")


def gpu_slug(name: str) -> str:
    """A GPU's name as a file-name part: ``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``
    (recordings ``data/sweep-<slug>.json.gz``, benchmark records ``benchmarks/<slug>-...``)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in VENDOR_WORDS]
    return "-".join(words) or "gpu"


def short_sha(sha: str | None) -> str:
    """A commit as file names and tables show it: 7 hex digits, ``unknown`` when not known."""
    return sha[:7] if sha else "unknown"


# ----------------------------------------------------------------------------- measurement sources

REPLAY_PREFIX = "replay:"  # the device of an evaluation a recorded sweep answered: replay:<GPU it was measured on>


def replayed_on(device: str) -> str | None:
    """The GPU a replayed evaluation was measured on (its device is ``replay:<GPU>``: GREEN and
    FAST ran there when the sweep was recorded, not on this machine), or None for one made here."""
    return device.removeprefix(REPLAY_PREFIX) if device.startswith(REPLAY_PREFIX) else None
