"""``evo render`` (print a candidate's CUDA source), ``evo build`` (compile a batch, store it,
report resources and throughput) and ``evo doctor`` (what this machine has for evo).

Everything that can be wrong with the input (family, parameters, constraints, arch, nvcc) is
checked before the database is opened, so bad input exits 2 with one line and writes nothing.
"""

from __future__ import annotations

import os
import random
import sys
import time

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evo import build, doctor
from evo.cli.app import cli, db_option
from evo.cli.output import console, err_console, table
from evo.errors import EvoError
from evo.manifest import Family, Value, list_families, load_family
from evo.render import Rendered, render
from evo.results import BuildResult, Status
from evo.space import Candidate, all_candidates, make_candidate, parse_assignments
from evo.store import open_store, short_id

param_option = click.option("-p", "--param", "param", multiple=True, metavar="KEY=VALUE",
                            help="a parameter (repeatable); the manifest's defaults fill the rest")
STATUS_STYLE = {Status.BUILT: "green", Status.COMPILE_FAILED: "red", Status.RESOURCE_REJECTED: "yellow"}


@cli.command("render")
@click.argument("family")
@param_option
@click.option("--hash", "hash_only", is_flag=True, help="print only the source hash")
def render_cmd(family: str, param: tuple[str, ...], hash_only: bool) -> None:
    """Print one candidate's CUDA source (or its hash)."""
    fam = load_family(family)
    rendered = render(make_candidate(fam, parse_assignments(fam, list(param))), fam)
    sys.stdout.write(rendered.source_hash + "\n" if hash_only else rendered.source)


def _points(fam: Family, fixed: dict[str, Value], count: int | None, rng: random.Random) -> list[Candidate]:
    """The given point (defaults fill the rest), or ``count`` random valid points that keep ``fixed``."""
    if count is None:
        return [make_candidate(fam, fixed)]
    pool = [c for c in all_candidates(fam) if all(c.p[k] == v for k, v in fixed.items())]
    if not pool:
        shown = ", ".join(f"{k}={v}" for k, v in fixed.items())
        raise EvoError(f"no valid candidate of {fam.name} has {shown}")
    return rng.sample(pool, min(count, len(pool)))


def _entry_max(result: BuildResult) -> tuple[str, str, str]:
    """(registers, spill bytes, shared memory bytes): the worst entry of a build."""
    res = result.resources.values()
    if not res:
        return "—", "—", "—"
    return (str(max(r.registers for r in res)), str(max(r.spill_stores + r.spill_loads for r in res)),
            str(max(r.smem_static + r.smem_dynamic for r in res)))


@cli.command("build")
@click.argument("families", nargs=-1, metavar="[FAMILY]...")
@param_option
@click.option("--random", "count", type=click.IntRange(min=1), metavar="N", help="N random valid points per family")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, metavar="N", help="seed for --random")
@click.option("--arch", metavar="ARCH", help="sm_90a or sm_80 (default: from the GPU, else sm_90a)")
@click.option("-j", "--jobs", type=click.IntRange(min=1), metavar="N", help="parallel nvcc processes (default: CPUs)")
@db_option(writes=True)
def build_cmd(families: tuple[str, ...], param: tuple[str, ...], count: int | None, seed: int, arch: str | None,
              jobs: int | None, db: str) -> None:
    """Compile candidates with nvcc; store the ptxas reports.

    Renders and compiles in parallel (default: every FAMILY), cached by content.
    """
    names = list(families) or list_families()
    if not names:
        raise EvoError("no kernel families found")
    arch = arch or build.default_arch()
    build.smem_limit(arch)
    rng = random.Random(seed)
    items: list[Rendered] = []
    for name in names:
        fam = load_family(name)
        if arch not in fam.arches:
            raise EvoError(f"family {fam.name} does not support {arch}; it supports {', '.join(fam.arches)}")
        fixed = parse_assignments(fam, list(param))
        items += [render(c, fam) for c in _points(fam, fixed, count, rng)]
    build.nvcc_path()
    jobs = jobs or os.cpu_count() or 1
    by_id = {build.build_id_for(r, arch): r for r in items}

    with open_store(db) as store:
        run_id = store.start_run("evo build", options={"families": names, "params": list(param), "random": count,
                                                       "seed": seed, "arch": arch, "jobs": jobs})
        status = "failed"
        progress = Progress(TextColumn("compiling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=err_console, transient=True)
        try:
            with progress:
                task = progress.add_task("build", total=len(by_id))

                def done(result: BuildResult) -> None:
                    store.record_build(by_id[result.build_id], result, run_id)
                    progress.advance(task)

                start = time.perf_counter()
                results = build.build_batch(items, arch=arch, jobs=jobs, on_done=done)
                wall = time.perf_counter() - start
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            store.finish_run(run_id, status)

    numbers = ("regs", "spills", "smem", "seconds")
    out = table("id", "status", *numbers, "candidate", right=numbers, wrap=("candidate",),
                title=f"{len(by_id)} candidates for {arch}",
                pad_edge=False)
    distinct = {r.build_id: r for r in results}
    for r in distinct.values():
        seconds = "cached" if r.cached else f"{r.seconds:.1f}"
        out.add_row(short_id(r.build_id), f"[{STATUS_STYLE.get(r.status, '')}]{r.status.value}[/]", *_entry_max(r),
                    seconds, escape(by_id[r.build_id].candidate.label()))
    console.print(out)
    for r in distinct.values():
        if r.reason:
            console.print(f"[dim]{short_id(r.build_id)}[/] {escape(r.reason)}", soft_wrap=True)
    compiled = [r for r in distinct.values() if not r.cached]
    cached = len(distinct) - len(compiled)
    rate = len(compiled) / wall * 60 if wall > 0 else 0.0
    if cached:
        console.print(f"{cached} from cache")
    console.print(f"compiled {len(compiled)} candidates in {wall:.1f} s: {rate:.1f} candidates/min ({jobs} jobs)")


@cli.command("doctor")
@db_option()
def doctor_cmd(db: str) -> None:
    """What this machine has for evo (nvcc, GPU, database).

    Reports nvcc, ninja, GPUs, cuda-python, evo's files and the database; exits 2 if something
    required is missing. Creates nothing.
    """
    findings = doctor.diagnose(db)
    out = table("check", "name", "detail", wrap=("detail",), show_header=False)
    for f in findings:
        mark = "[green]ok[/]" if f.ok else "[red]MISSING[/]" if f.required else "[yellow]no[/]"
        out.add_row(mark, f.name, escape(f.detail))
    console.print(out)
    missing = [f.name for f in findings if f.required and not f.ok]
    if missing:
        raise EvoError(f"evo cannot build here: fix {', '.join(missing)}")
