"""``evo eval`` (GREEN then FAST for one candidate, stored) and ``evo bench`` (the FAST suite
against SDPA for stored candidates or a promoted package, written to ``benchmarks/``).

Both need a CUDA GPU; the GPU work runs in a crash-isolated worker process. The commands parse
options and print; :func:`evo.api.evaluate_candidate` and :func:`evo.api.benchmark` do the work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from evo.cli.app import api, cli, db_option, fail_if, split_list
from evo.cli.build_cmds import param_option
from evo.cli.output import console, table
from evo.vocab import BASELINE_BACKENDS, CLOCKS, DTYPES, STEADY

cases_option = click.option("--cases", metavar="LIST",
                            help="FAST cases, e.g. F1,F3c,F5-F8 (default: the whole FAST suite)")
dtype_option = click.option("--dtype", type=click.Choice(DTYPES), default="fp16", show_default=True,
                            help="element type of the FAST cases")
timeout_option = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=1800.0,
                              show_default=True, metavar="SECONDS",
                              help="how long the GPU worker may take before it is killed")


def _fmt_us(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}" if x < 100 else f"{x:.1f}"


def speed_table(cases: list[dict[str, Any]], title: str, with_candidate: bool = False) -> Table:
    """Per case: evo time (spread), TFLOP/s and speedup vs each baseline (n/a: it could not time
    the case; the record says why)."""
    baselines = [b for b in api.BENCH_COLUMNS if b != api.EVO]
    numbers = ("B,H,L,D", "evo us", "TFLOP/s", *(b.removeprefix("sdpa_") for b in baselines))
    out = table(*(["candidate"] if with_candidate else []), "case", *numbers, right=numbers,
                wrap=("candidate", "case", "B,H,L,D", "evo us"), title=title)
    for c in cases:
        evo = c["us"][api.EVO]
        speed = []
        for b in baselines:
            base = c["us"].get(b)
            if base is None:
                speed.append("n/a" if b in (c.get("unavailable") or {}) else "—")
            else:
                ratio = base / evo
                speed.append(f"[{'green' if ratio >= 1 else 'red'}]{ratio:.2f}x[/]")
        row = [f"{c['case']}{'c' if c['causal'] else ''} {c['dtype']}", api.Shape.from_dict(c).dims,
               f"{_fmt_us(evo)} ({_fmt_us(c['spread_us'][api.EVO])})", f"{c['tflops_evo']:.1f}", *speed]
        out.add_row(*([(c["candidate_id"] or "—")[:12]] if with_candidate else []), *row)
    return out


@cli.command("eval")
@click.argument("family", required=False)
@param_option
@click.option("--id", "cand_id", metavar="ID", help="a stored candidate's id (or unique prefix) instead of a FAMILY")
@cases_option
@dtype_option
@db_option()
@click.option("--arch", metavar="ARCH", help="sm_90a or sm_80 (default: from the GPU)")
@timeout_option
def eval_cmd(family: str | None, param: tuple[str, ...], cand_id: str | None, cases: str | None, dtype: str,
             db: str | None, arch: str | None, timeout: float) -> None:
    """Gate (GREEN) and time (FAST) one candidate on the GPU.

    The candidate is FAMILY with -p KEY=VALUE ..., or a stored one (--id ID). The result is
    stored and shown per FAST case.
    """
    result = api.evaluate_candidate(family, list(param), candidate_id=cand_id, cases=cases, dtype=dtype, db=db,
                                    arch=arch, timeout_s=timeout, note=lambda text: console.print(escape(text)))
    ev = result.evaluation
    color = "green" if ev.status is api.Status.FAST else "red"
    console.print(f"[{color}]{ev.status.value}[/]: {ev.reason}  "
                  f"[dim](candidate {result.candidate_id[:12]}; GREEN {ev.green_seconds:.1f} s, "
                  f"FAST {ev.fast_seconds:.1f} s on {ev.device.get('name', '?')})[/]")
    rows = result.cases
    if rows:
        console.print(speed_table(rows, "FAST: evo's median us per launch (p80-p20 spread); "
                                  "speedup vs each SDPA backend = its time / evo's"))
    for t in ev.timings:
        if t.flagged:
            console.print(f"[yellow]{t.shape.tag}[/]: {t.flagged}")
    if ev.status is not api.Status.FAST:
        click.get_current_context().exit(1)


@cli.command("bench")
@click.option("--id", "ids", multiple=True, metavar="ID", help="stored candidate id or prefix (repeatable)")
@click.option("--best", type=click.IntRange(min=1), metavar="N", help="the N best FAST candidates in the database "
              "(default 1)")
@click.option("--package", metavar="NAME", help="time an installed promoted package instead")
@cases_option
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="element type of the FAST cases (default: each suite's own, fast fp16, llm and decode bf16)")
@click.option("--backends", metavar="LIST", default=",".join(BASELINE_BACKENDS), show_default=True,
              help="baselines timed beside it, comma-separated: the SDPA backends and fa4 (FlashAttention-4, "
                   "where flash_attn.cute imports; a case it cannot run is recorded as unavailable, with why)")
@click.option("--clocks", type=click.Choice(CLOCKS), default=STEADY, show_default=True,
              help="long cases timed in each op's steady state (after 300 ms of its own launches, as a "
                   "model's many layers run), or in a short burst near boost clocks, as do_bench-style "
                   "harnesses time them (docs/design.md, FAST)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="folder for the JSON (default: <EVO_HOME>/benchmarks)")
@db_option()
@timeout_option
@click.option("--seeds", is_flag=True, help="the seed campaigns' rows: claims beside evo's GREEN + FAST figures")
@click.option("--sweep", is_flag=True, help="SDPA's backends over the sweep grid, with plots (evo/products/seeds.py)")
def bench_cmd(ids: tuple[str, ...], best: int | None, package: str | None, cases: str | None, dtype: str | None,
              backends: str, clocks: str, out: Path | None, db: str | None, timeout: float, seeds: bool,
              sweep: bool) -> None:
    """Time candidates or a package against every SDPA backend and FlashAttention-4.

    The FAST suite (--cases llm: attention as language models run it; --cases decode: a few
    query rows on a long K/V cache), interleaved with each baseline; writes benchmarks/*.json and
    BENCHMARKS.md. --seeds / --sweep time the seed campaigns and SDPA's backends over the sweep
    grid instead.
    """
    if seeds or sweep:
        fail_if(bool(package or ids or best or cases or clocks != STEADY),
                "--seeds / --sweep measure their own shapes their own way: leave out --package, --id, --best, "
                "--cases and --clocks")
        written = api.benchmark_seeds(out, seeds=seeds, sweep=sweep, timeout_s=timeout, note=console.print)
        console.print(f"wrote {written} and {written.parent.resolve().parent / 'BENCHMARKS.md'}")
        return
    done = api.benchmark(list(ids), best=best, package=package, cases=cases, dtype=dtype, out=out,
                         db=db, timeout_s=timeout, backends=split_list((backends,)) or (), clocks=clocks)
    path, record, problems = done.path, done.record, done.problems
    for p in problems:
        console.print(f"[red]failed[/] {p}")
    gemm = record["gemm_tflops"]
    clocks = "" if record.get("clocks", STEADY) == STEADY else f", {record['clocks']} clocks"
    console.print(speed_table(record["cases"], f"{record['gpu']}  (dense {record.get('gemm_dtype', 'fp16')} GEMM "
                              f"{'?' if gemm is None else f'{gemm:.0f}'} TFLOP/s{clocks})", with_candidate=not package))
    console.print(done.fidelity)
    console.print(f"wrote {path} and {path.parent.resolve().parent / 'BENCHMARKS.md'}")
