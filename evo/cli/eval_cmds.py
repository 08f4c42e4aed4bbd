"""``evo eval`` (GREEN then FAST for one candidate, stored) and ``evo bench`` (the FAST suite
against SDPA for stored candidates or a promoted package, written to ``benchmarks/``).

Both need a CUDA GPU; the GPU work runs in a crash-isolated worker process, so this process
only renders, builds, stores and prints.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from evo import paths
from evo.bench import COLUMNS, case_records, fidelity_summary, run_bench
from evo.build import build_batch, default_arch
from evo.cli.app import cli, db_option, fail_if, require_database
from evo.cli.build_cmds import param_option
from evo.cli.output import console, table
from evo.errors import EvoError
from evo.manifest import load_family
from evo.render import Rendered, render
from evo.results import BuildResult, Shape, Status
from evo.space import make_candidate, parse_assignments
from evo.store import Store, open_store
from evo.suites import DTYPES, fast_cases
from evo.timing import EVO
from evo.worker import EvalRequest, Worker, require_gpu

cases_option = click.option("--cases", metavar="LIST",
                            help="FAST cases, e.g. F1,F3c,F5-F8 (default: the whole FAST suite)")
dtype_option = click.option("--dtype", type=click.Choice(DTYPES), default="fp16", show_default=True,
                            help="element type of the FAST cases")
timeout_option = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=1800.0,
                              show_default=True, metavar="SECONDS",
                              help="how long the GPU worker may take before it is killed")


def _cases(cases: str | None, dtype: str) -> tuple[Shape, ...]:
    return tuple(fast_cases([cases] if cases else None, dtype))


def _build(store: Store, rendered: Rendered, arch: str, run_id: int) -> BuildResult:
    """Build (or take from the cache) and store; EvoError unless it built."""
    (result,) = build_batch([rendered], arch=arch)
    store.record_build(rendered, result, run_id)
    if result.status is not Status.BUILT:
        raise EvoError(f"{rendered.candidate.label()} ({result.build_id[:12]}): "
                       f"{result.status.value}: {result.reason}")
    return result


def _render_stored(store: Store, cid: str) -> tuple[str, Rendered, str]:
    """(full id, rendered source, arch) of a stored candidate, rendered from today's templates."""
    view = store.get(cid).candidate
    if view.arch is None:
        raise EvoError(f"candidate {view.id[:12]} was never built ({view.status.value}: {view.reason})")
    return view.id, render(make_candidate(view.family, view.params)), view.arch


def _fmt_us(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}" if x < 100 else f"{x:.1f}"


def speed_table(cases: list[dict[str, Any]], title: str, with_candidate: bool = False) -> Table:
    """Per case: evo time (spread), TFLOP/s and speedup vs each SDPA backend."""
    baselines = [b for b in COLUMNS if b != EVO]
    numbers = ("B,H,L,D", "evo us", "TFLOP/s", *(b.removeprefix("sdpa_") for b in baselines))
    out = table(*(["candidate"] if with_candidate else []), "case", *numbers, right=numbers,
                wrap=("candidate", "case", "B,H,L,D", "evo us"), title=title)
    for c in cases:
        evo = c["us"][EVO]
        speed = []
        for b in baselines:
            base = c["us"].get(b)
            if base is None:
                speed.append("—")
            else:
                ratio = base / evo
                speed.append(f"[{'green' if ratio >= 1 else 'red'}]{ratio:.2f}x[/]")
        row = [f"{c['case']}{'c' if c['causal'] else ''} {c['dtype']}", f"{c['B']},{c['H']},{c['L']},{c['D']}",
               f"{_fmt_us(evo)} ({_fmt_us(c['spread_us'][EVO])})", f"{c['tflops_evo']:.1f}", *speed]
        out.add_row(*([(c["candidate_id"] or "—")[:12]] if with_candidate else []), *row)
    return out


@cli.command("eval")
@click.argument("family", required=False)
@param_option
@click.option("--id", "cand_id", metavar="ID", help="a stored candidate's id (or unique prefix) instead of a FAMILY")
@cases_option
@dtype_option
@db_option(writes=True)
@click.option("--arch", metavar="ARCH", help="sm_90a or sm_80 (default: from the GPU)")
@timeout_option
def eval_cmd(family: str | None, param: tuple[str, ...], cand_id: str | None, cases: str | None, dtype: str,
             db: str, arch: str | None, timeout: float) -> None:
    """Gate (GREEN) and time (FAST) one candidate on the GPU.

    The candidate is FAMILY with -p KEY=VALUE ..., or a stored one (--id ID). The result is
    stored and shown per FAST case.
    """
    fail_if(family is None and cand_id is None, "give a FAMILY (with -p KEY=VALUE ...) or --id ID")
    fail_if(family is not None and cand_id is not None, "give a FAMILY or --id ID, not both")
    fail_if(cand_id is not None and bool(param), "-p applies to a FAMILY; --id evaluates a stored candidate as it is")
    shapes = _cases(cases, dtype)
    require_gpu()
    with open_store(db if family is not None else require_database(db)) as store:
        if family is not None:
            fam = load_family(family)
            rendered = render(make_candidate(fam, parse_assignments(fam, list(param))), fam)
            old_id, arch = None, arch or default_arch()
        else:
            old_id, rendered, stored_arch = _render_stored(store, cand_id or "")
            arch = arch or stored_arch
        salt = secrets.randbelow(2**31)
        run_id = store.start_run("eval", options={"cases": [s.tag for s in shapes], "arch": arch, "salt": salt})
        status = "failed"
        try:
            built = _build(store, rendered, arch, run_id)
            if old_id is not None and built.build_id != old_id:
                console.print(f"[yellow]note:[/] {old_id[:12]} builds under a new id today (templates, launch config, "
                              f"compiler or headers changed, or it predates build key v2); "
                              f"evaluating the new build {built.build_id[:12]}")
            console.print(f"{rendered.candidate.label()}  [dim]{built.build_id[:12]} {arch}"
                          f"{' (cached)' if built.cached else ''}[/]")
            request = EvalRequest(built.build_id, built.cubin_path or "", rendered.entries, green=True,
                                  fast_cases=shapes, options={"interleave": True, "salt": salt})
            with Worker(0) as worker:
                ev = worker.evaluate(request, timeout)
            store.record_evaluation(ev, run_id)
            status = "done"
        finally:
            store.finish_run(run_id, status)
    color = "green" if ev.status is Status.FAST else "red"
    console.print(f"[{color}]{ev.status.value}[/]: {ev.reason}  "
                  f"[dim](GREEN {ev.green_seconds:.1f} s, FAST {ev.fast_seconds:.1f} s "
                  f"on {ev.device.get('name', '?')})[/]")
    rows = case_records(ev.timings, built.build_id)
    if rows:
        console.print(speed_table(rows, "FAST: evo's median us per launch (p80-p20 spread); "
                                  "speedup vs each SDPA backend = its time / evo's"))
    for t in ev.timings:
        if t.flagged:
            console.print(f"[yellow]{t.shape.tag}[/]: {t.flagged}")
    if ev.status is not Status.FAST:
        click.get_current_context().exit(1)


@cli.command("bench")
@click.option("--id", "ids", multiple=True, metavar="ID", help="stored candidate id or prefix (repeatable)")
@click.option("--best", type=click.IntRange(min=1), metavar="N", help="the N best FAST candidates in the database "
              "(default 1)")
@click.option("--package", metavar="NAME", help="time an installed promoted package instead")
@cases_option
@dtype_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="folder for the JSON (default: <EVO_HOME>/benchmarks)")
@db_option()
@timeout_option
@click.option("--seeds", is_flag=True, help="the seed campaigns' rows: claims beside evo's GREEN + FAST figures")
@click.option("--sweep", is_flag=True, help="SDPA's backends over the sweep grid, with plots (evo/seeds.py)")
def bench_cmd(ids: tuple[str, ...], best: int | None, package: str | None, cases: str | None, dtype: str,
              out: Path | None, db: str, timeout: float, seeds: bool, sweep: bool) -> None:
    """Time candidates or a package against every SDPA backend.

    The FAST suite, interleaved with each SDPA backend; writes benchmarks/*.json and BENCHMARKS.md.
    --seeds / --sweep time the seed campaigns and SDPA's backends over the sweep grid instead.
    """
    if seeds or sweep:
        fail_if(bool(package or ids or best or cases), "--seeds / --sweep measure their own shapes: leave out "
                                                       "--package, --id, --best and --cases")
        from evo.seeds import GROUPS, run

        written = run(out or paths.home() / "benchmarks", GROUPS if seeds else (), sweep, timeout_s=timeout,
                      log=console.print)
        console.print(f"wrote {written} and {written.parent.resolve().parent / 'BENCHMARKS.md'}")
        return
    fail_if(bool(package) and bool(ids or best), "--package times a package; --id / --best time stored "
                                                 "candidates: choose one")
    fail_if(bool(ids) and bool(best), "give --id or --best, not both")
    shapes = _cases(cases, dtype)
    out_dir = out or paths.home() / "benchmarks"
    require_gpu()
    targets: list[tuple[str | None, EvalRequest]] = []
    if package:
        targets.append((None, EvalRequest(f"package:{package}", "", (), green=False, fast_cases=shapes,
                                          options={"package": package})))
    else:
        with open_store(require_database(db)) as store:
            chosen = [store.resolve(i) for i in ids] or [c.id for c, _ in store.best(best or 1)]
            if not chosen:
                raise EvoError(f"no FAST candidates in {store.url}; run `evo run` or `evo eval` first")
            for cid in chosen:
                full, rendered, arch = _render_stored(store, cid)
                (built,) = build_batch([rendered], arch=arch)
                if built.build_id != full:
                    raise EvoError(f"{full[:12]} builds under a new id today (templates, launch config, compiler "
                                   f"or headers changed, or it predates build key v2; now "
                                   f"{built.build_id[:12]}); `evo eval --id {full[:12]}` evaluates the new build")
                if built.status is not Status.BUILT:
                    raise EvoError(f"{full[:12]}: {built.status.value}: {built.reason}")
                targets.append((full, EvalRequest(full, built.cubin_path or "", rendered.entries, green=False,
                                                  fast_cases=shapes)))
    path, record, problems = run_bench(targets, out_dir=out_dir, package=package, timeout_s=timeout)
    for p in problems:
        console.print(f"[red]failed[/] {p}")
    gemm = record["gemm_tflops"]
    console.print(speed_table(record["cases"], f"{record['gpu']}  (dense fp16 GEMM "
                              f"{'?' if gemm is None else f'{gemm:.0f}'} TFLOP/s)", with_candidate=not package))
    console.print(fidelity_summary(record))
    console.print(f"wrote {path} and {path.parent.resolve().parent / 'BENCHMARKS.md'}")
