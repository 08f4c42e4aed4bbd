"""Regenerate docs/sampler-benchmark.md (with its figure and raw runs) from recordings.

One section per recording (``PATH`` or ``PATH:fam1,fam2`` to benchmark some of its families;
``--pin`` holds genes at one value for a sub-space, in every section that benchmarks their family),
a JSON file with every run (so each figure of the tables can be recomputed; ``evo report``
draws it), and the plot when matplotlib is installed (otherwise said, and the doc is written without it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.space import Pins, parse_pins
from evo.paths import git_sha
from evo.results import Shape
from evo.samplerbench import plot as plot_mod
from evo.samplerbench.entrants import resolve
from evo.samplerbench.problem import Problem, section_families
from evo.samplerbench.report import section
from evo.samplerbench.run import RunResult, Spec, benchmark
from evo.store.recording import load_recording
from evo.vocab import BENCH_SAMPLERS, START_MODES

COUNTING = """\
How to read it. An *evaluation* is the first proposal of a distinct valid point of the
benchmarked families: it costs one whatever happened to it (timed, rejected by the build,
failed, or missing from the recording -- on a GPU each would have cost a build and usually a
GPU run). Invalid points (against the manifest's domains or constraints) and repeats are free.
A run *reaches the best* at the evaluation that first proposes the target point; a run that
does not within its budget is shown as "> budget" (and any median or quartile that falls on
such runs), never interpolated, and counts as worse than every reached run in the rank tests
(Mann-Whitney U, normal approximation with tie and continuity corrections). Build rejections
(`resource_rejected`) cost one evaluation like any other point: the build step is not modelled
as free. *Cold*: no defaults, each sampler's own random start from its seed; *warm*: the
families' manifest defaults are evaluated first (evo proposes them itself, Optuna's samplers
get them enqueued, Kernel Tuner's strategies get them as `x0`). Kernel Tuner runs in its own
simulation mode on a cache converted from the recording (`evo.samplerbench.kt_runner`), its
space built by brute force so that its strategies walk the valid points in one order whatever
the spelling of the constraint, and seeded (Python's and numpy's generators, and the Latin
hypercube `bayes_opt` starts from). `bayes_opt`'s default acquisition (`multi-ultrafast`) still
decides when to refit its model by wall-clock time, and `diff_evo` proposed other points when
one seed ran twice in one process, so neither is reproducible seed by seed after its first steps
(the others are).
"""

SCHEMA = "evo.sampler-benchmark/2"  # /1 was scripts/sampler_benchmark.py's single table with traces


@dataclass
class Options:
    recordings: list[str]
    seeds: int = 50
    samplers: list[str] = field(default_factory=lambda: list(BENCH_SAMPLERS))
    kt: list[str] | None = None          # None: Kernel Tuner's default set; []: none
    modes: list[str] = field(default_factory=lambda: list(START_MODES))
    cases: list[Shape] | None = None
    baseline: str = "sdpa_default"
    tolerance: float = 0.0
    batch: int = 1
    jobs: int | None = None
    out: Path = Path("docs/sampler-benchmark.md")
    plot: Path | None = Path("docs/sampler-benchmark.png")
    results: Path | None = Path("docs/sampler-benchmark.json")
    pins: list[str] = field(default_factory=list)   # --pin GENE=VALUE / FAMILY.GENE=VALUE: a sub-space


def parse_recording(text: str) -> tuple[str, tuple[str, ...] | None]:
    """``PATH`` or ``PATH:fam1,fam2``."""
    path, sep, fams = text.partition(":")
    names = tuple(f.strip() for f in fams.split(",") if f.strip()) if sep else None
    if sep and not names:
        raise EvoError(f"--recording {text!r}: no family after ':'")
    if not Path(path).is_file():
        raise EvoError(f"no recording at {path}")
    return path, names


def write(opts: Options, note: Callable[[str], None],
          progress: Callable[[RunResult], None] | None = None) -> list[Path]:
    """Run every recording's benchmark and write the doc, the runs and the plot; returns the
    files written."""
    _check(opts)
    chosen = [parse_recording(r) for r in opts.recordings]
    pins = resolve_pins(chosen, opts.pins)
    specs = [Spec(path, fams, tuple(opts.cases) if opts.cases else None, opts.baseline, opts.tolerance, pins)
             for path, fams in chosen]
    problems = [s.load() for s in specs]
    entrants = resolve(opts.samplers, opts.kt, note)
    if not entrants:
        raise EvoError("no sampler to benchmark")
    seeds = list(range(opts.seeds))
    sha = git_sha() or "unknown"
    why_no_plot = plot_mod.available() if opts.plot is not None else "no --plot"
    if why_no_plot and opts.plot is not None:
        note(f"no plot: {why_no_plot}")
    sections = []
    for spec, problem in zip(specs, problems, strict=True):
        runs, seconds = benchmark(spec, entrants, opts.modes, seeds, batch=opts.batch, jobs=opts.jobs,
                                  progress=progress)
        sections.append((spec, problem, runs, seconds))
    written = []
    plot = None
    if opts.plot is not None and not why_no_plot:
        plot = plot_mod.draw([(problem, entrants, runs) for _, problem, runs, _ in sections], opts.plot)
        written.append(plot)
    text = ["# Sampler benchmark (replay)", "",
            f"Regenerated by `{command_line(opts)}`.", "", COUNTING]
    for _, problem, runs, seconds in sections:
        text.append(section(problem, entrants, runs, seeds, opts.batch, seconds, sha, plot))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text("\n".join(text))
    written.insert(0, opts.out)
    if opts.results is not None:
        dump = [_runs_json(spec, problem, runs, seconds) for spec, problem, runs, seconds in sections]
        opts.results.write_text(json.dumps({"schema": SCHEMA, "git_sha": sha, "batch": opts.batch, "seeds": opts.seeds,
                                            "tolerance": opts.tolerance, "recordings": dump}) + "\n")
        written.append(opts.results)
    return written


def resolve_pins(chosen: Sequence[tuple[str, tuple[str, ...] | None]], items: Sequence[str]) -> Pins:
    """``--pin`` against every family benchmarked (:func:`evo.family.space.parse_pins`: an
    unqualified gene must be a gene of exactly one of them)."""
    if not items:
        return {}
    names = dict.fromkeys(n for path, fams in chosen for n in section_families(load_recording(path), fams))
    return parse_pins(items, [load_family(n) for n in names])


def _check(opts: Options) -> None:
    """Refuse options no benchmark can run with, before anything is loaded."""
    if not opts.recordings:
        raise EvoError("no recording: pass --recording FILE (or export one to data/)")
    if opts.seeds < 1:
        raise EvoError("--seeds must be at least 1")
    bad = [m for m in opts.modes if m not in START_MODES]
    if bad or not opts.modes:
        raise EvoError(f"--modes takes cold and/or warm, not {', '.join(bad) or 'nothing'}")
    if opts.batch < 1:
        raise EvoError("--batch must be at least 1")


def _runs_json(spec: Spec, problem: Problem, runs: Sequence[RunResult], seconds: float) -> dict[str, Any]:
    """One recording's section of the JSON file: what was benchmarked and every run (no curves)."""
    return {"recording": spec.recording, "families": [f.name for f in problem.families],
            "gpu": problem.recording.gpu, "arch": problem.recording.arch, "baseline": problem.baseline,
            "cases": [c.tag for c in problem.cases], "target": problem.describe_target(),
            "best": problem.best, "size": problem.size, "pins": problem.pins, "seconds": round(seconds, 1),
            "runs": [{k: v for k, v in r.to_json().items() if k != "curve"} for r in runs]}


def command_line(opts: Options) -> str:
    parts = ["evo bench-samplers"] + [f"--recording {r}" for r in opts.recordings]
    parts.append(f"--seeds {opts.seeds}")
    if opts.samplers != list(BENCH_SAMPLERS):
        parts.append("--samplers " + ",".join(opts.samplers))
    if opts.kt is not None:
        parts.append("--kt " + (",".join(opts.kt) or "none"))
    if opts.modes != list(START_MODES):
        parts.append("--modes " + ",".join(opts.modes))
    if opts.tolerance:
        parts.append(f"--tolerance {opts.tolerance}")
    if opts.batch != 1:
        parts.append(f"--batch {opts.batch}")
    if opts.pins:
        parts.append("--pin " + ",".join(opts.pins))
    return " ".join(parts)


