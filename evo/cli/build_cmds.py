"""``evo render`` (print a candidate's CUDA source), ``evo build`` (compile a batch, store it,
report resources and throughput) and ``evo doctor`` (what this machine has for evo).

Everything that can be wrong with the input (family, parameters, constraints, arch, nvcc) is
checked before the database is opened, so bad input exits 2 with one line and writes nothing.
"""

from __future__ import annotations

import sys

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evo.cli.app import api, cli, db_option
from evo.cli.output import console, err_console, table
from evo.errors import EvoError
from evo.vocab import Status

param_option = click.option("-p", "--param", "param", multiple=True, metavar="KEY=VALUE",
                            help="a parameter (repeatable); the manifest's defaults fill the rest")
STATUS_STYLE = {Status.BUILT: "green", Status.COMPILE_FAILED: "red", Status.RESOURCE_REJECTED: "yellow"}


@cli.command("render")
@click.argument("family")
@param_option
@click.option("--hash", "hash_only", is_flag=True, help="print only the source hash")
def render_cmd(family: str, param: tuple[str, ...], hash_only: bool) -> None:
    """Print one candidate's CUDA source (or its hash)."""
    rendered = api.candidate(family, list(param))
    sys.stdout.write(rendered.source_hash + "\n" if hash_only else rendered.source)


def _entry_max(result: api.BuildResult) -> tuple[str, str, str]:
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
@db_option()
def build_cmd(families: tuple[str, ...], param: tuple[str, ...], count: int | None, seed: int, arch: str | None,
              jobs: int | None, db: str | None) -> None:
    """Compile candidates with nvcc; store the ptxas reports.

    Renders and compiles in parallel (default: every FAMILY), cached by content.
    """
    progress = Progress(TextColumn("compiling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err_console, transient=True)
    task = progress.add_task("build", total=None)

    def start(total: int) -> None:  # the bar appears once the input is checked
        progress.update(task, total=total)
        progress.start()

    try:
        built = api.build_candidates(list(families), list(param), random=count, seed=seed, arch=arch, jobs=jobs,
                                     db=db, on_start=start, on_done=lambda _r: progress.advance(task))
    finally:
        if progress.live.is_started:
            progress.stop()
    numbers = ("regs", "spills", "smem", "seconds")
    out = table("id", "status", *numbers, "candidate", right=numbers, wrap=("candidate",),
                title=f"{len(built.results)} candidates for {built.arch}", pad_edge=False)
    for r in built.results:
        seconds = "cached" if r.cached else f"{r.seconds:.1f}"
        out.add_row(api.short_id(r.build_id), f"[{STATUS_STYLE.get(r.status, '')}]{r.status.value}[/]", *_entry_max(r),
                    seconds, escape(built.rendered[r.build_id].candidate.label()))
    console.print(out)
    for r in built.results:
        if r.reason:
            console.print(f"[dim]{api.short_id(r.build_id)}[/] {escape(r.reason)}", soft_wrap=True)
    compiled = built.compiled
    cached = len(built.results) - len(compiled)
    rate = len(compiled) / built.seconds * 60 if built.seconds > 0 else 0.0
    if cached:
        console.print(f"{cached} from cache")
    console.print(f"compiled {len(compiled)} candidates in {built.seconds:.1f} s: {rate:.1f} candidates/min "
                  f"({built.jobs} jobs)")


@cli.command("doctor")
@db_option()
def doctor_cmd(db: str | None) -> None:
    """What this machine has for evo (nvcc, GPU, database).

    Reports nvcc, ninja, GPUs, cuda-python, evo's files and the database; exits 2 if something
    required is missing. Creates nothing.
    """
    findings = api.doctor(db)
    out = table("check", "name", "detail", wrap=("detail",), show_header=False)
    for f in findings:
        mark = "[green]ok[/]" if f.ok else "[red]MISSING[/]" if f.required else "[yellow]no[/]"
        out.add_row(mark, f.name, escape(f.detail))
    console.print(out)
    missing = [f.name for f in findings if f.required and not f.ok]
    if missing:
        raise EvoError(f"evo cannot build here: fix {', '.join(missing)}")
