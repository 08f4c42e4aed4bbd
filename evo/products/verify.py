"""Promote's verification on the GPU: nothing is written that was not run where it will run.

Stored GREEN checks say a kernel passed on the inputs it was gated on; a package sends it every
length of its dispatch buckets, at any scale, on any data. So before promote writes anything,
each shipped kernel runs in a GPU worker (crash-isolated, like every evaluation) over each of
its buckets: the bucket's edges, ragged lengths inside it, drawn B and H, non-default scales,
inputs of standard deviation up to 3-4 and spiked keys (:func:`evo.gpu.draws.bucket_cases`), and
at the same lengths grouped heads, a query chunk on a longer key cache and more queries than keys,
with a causal mask at either corner (:func:`evo.gpu.draws.llm_bucket_cases`),
checked by GREEN's rule with :data:`TOLERANCE_SHARE` of its tolerance. Kernels that fail a
check come back together in one :class:`VerifyFailed` with their evaluations, which promote
stores (the candidates turn red, their machine code with them) before it plans again without
them; a crash or a hang refuses the promotion with one line. Then the package
is assembled in a scratch folder and its own test suite runs there, against the GPU; only if it
passes is the package moved into place, and if it fails the refusal names the failed tests.

Without a GPU nothing can be verified: promote refuses unless told not to (``verify=False``, the
CLI's ``--no-verify``), and a package written that way says so in its PROVENANCE.json.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from evo.gpu.draws import bucket_cases, domain_cases, grouped_cases, layout_bucket_cases, llm_bucket_cases, stress_cases
from evo.errors import EvoError
from evo.gpu.margin import TOLERANCE_SHARE  # why 0.75: evo.gpu.margin
from evo.family.render import Entry
from evo.results import Evaluation, Shape, Status
from evo.gpu.suites import DrawSettings, GreenCase, green_settings
from evo.vocab import WORKER_FAILED
from evo.gpu.worker import EvalRequest, Worker, gpu_count

Key = tuple[int, str, bool]
VERIFY_TIMEOUT_S = 900.0
PACKAGE_TESTS_TIMEOUT_S = 1800.0
UNVERIFIED = "write an unverified package (verify=False; evo promote --no-verify)"  # the API's and the CLI's spelling
NO_GPU = ("promote verifies every kernel on the GPU before it writes a package, and there is no CUDA "
          f"GPU here: run it on the GPU host, or {UNVERIFIED}")


@dataclass(frozen=True)
class Verified:
    """What the verification ran: checks per candidate, the seed they were drawn from, and the
    package tests' summary line."""

    seed: int
    checks: Mapping[str, int]
    package_tests: str = ""


def require_gpu() -> None:
    """Refuse before any work when verification cannot run here (no GPU, or no pytest for the
    package's tests)."""
    if gpu_count() == 0:
        raise EvoError(NO_GPU)
    if importlib.util.find_spec("pytest") is None:
        raise EvoError("promote runs the package's own tests with pytest, which is not installed here: "
                       f"pip install pytest, or {UNVERIFIED}")


class Bucket(NamedTuple):
    """A dispatch bucket a kernel serves: its key (head dim, dtype, causal), the shortest and
    longest length to check (of the longer of Lq and Lk: :func:`evo.gpu.draws.route_length`), the
    lengths the search measured in it, the most B * H it is checked at (0: no many-heads check),
    and its cache layout (a layout route's: ``lens`` or ``paged``, with the page sizes measured)."""

    key: Key
    lo: int
    top: int
    measured: tuple[int, ...] = ()
    heads: int = 0
    layout: str = "contiguous"
    pages: tuple[int, ...] = ()


def cases_for(buckets: Sequence[Bucket], seed: int) -> list[GreenCase]:
    """The checks of one kernel over its buckets, named ``P00``, ``P01``, ... in order: per
    bucket its edges, ragged lengths and drawn stress inputs (:func:`evo.gpu.draws.bucket_cases`),
    the problems of kernel ABI v2 at those lengths (grouped heads, Lq != Lk, both corners of a causal
    mask: :func:`evo.gpu.draws.llm_bucket_cases`), the rest of its domain (its B * H at the shortest
    length, with one key/value head per query head and multi-query, flat and mixed softmax at the
    longest: :func:`evo.gpu.draws.domain_cases`), then the package's own stress and grouped-heads
    tests (:func:`evo.gpu.draws.stress_cases`, :func:`evo.gpu.draws.grouped_cases`) at the measured
    lengths and one below each, so that what the package's tests would refuse is found here, where
    promote can plan without it. A layout route's bucket gets the checks of its cache layout instead
    (:func:`evo.gpu.draws.layout_bucket_cases`: its ``_lens`` or ``_paged`` entry on ragged batches
    of every capacity of the bucket's edges and ragged lengths, and its B * H). A route serves what
    these cover (:mod:`evo.products.routes`)."""
    draws = green_settings().draws or DrawSettings()
    cases: list[GreenCase] = []
    for i, b in enumerate(buckets):
        if b.layout != "contiguous":
            cases += layout_bucket_cases(draws, b.key, b.layout, b.lo, b.top, b.heads, seed + i, pages=b.pages,
                                         start=len(cases))
            continue
        cases += bucket_cases(draws, b.key, b.lo, b.top, seed + i, start=len(cases))
        cases += llm_bucket_cases(draws, b.key, b.lo, b.top, seed + i, start=len(cases))
        if b.heads:
            cases += domain_cases(draws, b.key, b.lo, b.top, b.heads, seed + i, start=len(cases))
        lengths = sorted({n for L in b.measured for n in (L, L - 1) if b.lo <= n <= b.top})
        cases += stress_cases(draws, b.key, lengths, start=len(cases))
        cases += grouped_cases(b.key, lengths, start=len(cases))
    return cases


class VerifyFailed(EvoError):
    """Kernels failed checks over their dispatch buckets: per kernel the refusal line and the
    evaluation (status red, with every check) for the database; the message is the first line."""

    def __init__(self, failures: Sequence[tuple[str, Evaluation]]) -> None:
        super().__init__(failures[0][0])
        self.failures = list(failures)


def refusal(candidate: str, ev: Evaluation) -> str:
    """One line: which kernel failed its verification, how often, and the first failure."""
    if ev.status in WORKER_FAILED:
        return f"refusing to promote {candidate[:12]}: it {ev.status.value} while verified on its dispatch buckets: {ev.reason}"
    failed = [c for c in ev.checks if not c.passed]
    return (f"refusing to promote {candidate[:12]}: {len(failed)} of {len(ev.checks)} checks over its dispatch "
            f"buckets failed (at {TOLERANCE_SHARE:g} of GREEN's tolerance); first: {ev.reason}")


def verify_kernels(kernels: Sequence[tuple[str, Path, Sequence[Entry], Sequence[Bucket]]],
                   seed: int, *, device: int = 0, timeout_s: float = VERIFY_TIMEOUT_S,
                   on_pass: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Run each ``(candidate id, cubin, entries, buckets)`` over its buckets in one GPU worker;
    checks run per candidate, and ``on_pass(candidate id, checks)`` hears of each that passes
    as it does. Every kernel is checked; those that fail a check raise one VerifyFailed at the
    end, so promote can plan again without all of them at once. One that crashes or hangs
    raises an EvoError at once."""
    ran = {}
    failures = []
    with Worker(device) as worker:
        for cid, cubin, entries, buckets in kernels:
            cases = cases_for(buckets, seed)
            request = EvalRequest(cid, str(cubin), tuple(entries), green=True, fast_cases=(),
                                  options={"green_cases": cases, "salt": seed, "tolerance_share": TOLERANCE_SHARE})
            ev = worker.evaluate(request, timeout_s)
            if ev.status is Status.RED and any(not c.passed for c in ev.checks):
                failures.append((refusal(cid, ev), ev))
                continue
            if ev.status is not Status.GREEN:
                raise EvoError(refusal(cid, ev))
            ran[cid] = len(ev.checks)
            if on_pass is not None:
                on_pass(cid, len(ev.checks))
    if failures:
        raise VerifyFailed(failures)
    return ran


def confirm_speed(kernels: Sequence[tuple[str, Path, Sequence[Entry], Sequence[Shape]]], seed: int, *,
                  backends: Sequence[str] = (), note: Callable[[str], None] | None = None,
                  device: int = 0, timeout_s: float = VERIFY_TIMEOUT_S,
                  keep: Callable[[Evaluation], None] | None = None) -> list[Evaluation]:
    """Time each ``(candidate id, cubin, entries, FAST cases)`` in one GPU worker, interleaved
    round by round with the SDPA ``backends`` (default: every one) as ``evo eval`` and ``evo bench``
    time it. Promote asks for the baseline it routes on alone: each backend beside a long case
    costs its own settling and samples every round (with all four, a real promote spent over 10
    minutes here). ``note`` hears of each kernel as it starts. The timed outputs are checked
    as in any FAST run: a kernel whose outputs come out wrong raises VerifyFailed (promote stores
    it red and plans again); one that crashes or hangs refuses the promotion. ``keep`` gets each
    kernel's evaluation as soon as it is measured (promote stores it: a kill loses none)."""
    done = []
    options: dict[str, object] = {"interleave": True, "salt": seed}
    if backends:
        options["backends"] = list(backends)
    with Worker(device) as worker:
        for i, (cid, cubin, entries, shapes) in enumerate(kernels, 1):
            if note is not None:
                note(f"timing {cid[:12]} beside {', '.join(backends) or 'every SDPA backend'} on "
                     f"{', '.join(s.tag for s in shapes)} ({i} of {len(kernels)})")
            request = EvalRequest(cid, str(cubin), tuple(entries), green=False, fast_cases=tuple(shapes),
                                  options=options)
            ev = worker.evaluate(request, timeout_s)
            if ev.status is Status.RED:
                raise VerifyFailed([(f"refusing to promote {cid[:12]}: timed beside SDPA to confirm its speed, "
                                     f"it went wrong: {ev.reason}", ev)])
            if ev.status is not Status.FAST:
                raise EvoError(f"refusing to promote {cid[:12]}: it {ev.status.value} while timed beside SDPA "
                               f"to confirm its speed: {ev.reason}")
            if keep is not None:
                keep(ev)
            done.append(ev)
    return done


def summary_line(output: str) -> str:
    """pytest's last non-empty line (``12 passed in 40.1s``), or a note that it printed none."""
    lines = [ln.strip(" =") for ln in output.splitlines() if ln.strip(" =")]
    return lines[-1] if lines else "no output"


def failed_tests(output: str, most: int = 3) -> str:
    """The first ``most`` failed tests of pytest's ``-rfE`` summary (``FAILED id - message``),
    joined with "; ", and how many more; empty when it lists none."""
    failed = [ln.split(" ", 1)[1].strip() for ln in output.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    shown = "; ".join(failed[:most])
    return shown + (f"; and {len(failed) - most} more" if len(failed) > most else "")


def run_package_tests(folder: Path, name: str, timeout_s: float = PACKAGE_TESTS_TIMEOUT_S) -> str:
    """The package's own tests (``folder/name/tests``, importing ``name`` from ``folder``) in a
    fresh interpreter; pytest's summary line, or an EvoError with it when any test fails."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")   # nothing but the package is moved into place
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", f"{name}/tests"]
    try:
        done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise EvoError(f"the package's own tests did not finish within {timeout_s:g} s; nothing written") from None
    line = summary_line(done.stdout if done.stdout.strip() else done.stderr)
    if done.returncode != 0:
        which = failed_tests(done.stdout)
        raise EvoError(f"the package's own tests failed on this GPU ({line}{': ' + which if which else ''}); "
                       "nothing written")
    return line
