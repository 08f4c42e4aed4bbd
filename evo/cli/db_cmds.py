"""``evo lineage`` (the study's graph as a tree, DOT or JSON) and ``evo show ID`` (everything
stored about one candidate: parameters, status, build report, checks, timings, lineage)."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from evo.cli.app import api, cli, db_option
from evo.cli.output import console, print_json, table
from evo.errors import EvoError
from evo.vocab import DEFAULT_BASELINE, SDPA_BACKENDS

FORMATS = ("tree", "dot", "json")
baseline_option = click.option("--baseline", type=click.Choice(SDPA_BACKENDS), default=DEFAULT_BASELINE,
                               show_default=True, help="the SDPA backend speedups are measured against")


@cli.command("lineage")
@click.option("--study", metavar="NAME", help="study name (default: every candidate)")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="tree", show_default=True,
              help="a tree on the terminal, Graphviz DOT, or JSON")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout (same as --format json)")
@baseline_option
@db_option()
def lineage_cmd(study: str | None, fmt: str, as_json: bool, baseline: str, db: str | None) -> None:
    """The search tree: candidates, moves and their effects.

    Candidates with status and score; edges with the move that made the child and its effect.
    """
    fmt = "json" if as_json else fmt
    lin = api.lineage_graph(db, study, baseline)
    if not lin.nodes:
        raise EvoError(f"no candidates{f' in study {study!r}' if study else ''} in the database")
    if fmt == "tree":
        console.print(lin.tree())
    elif fmt == "dot":
        sys.stdout.write(lin.dot())
    else:
        print_json(lin.document())


@cli.command("show")
@click.argument("cand_id", metavar="ID")
@click.option("--source", is_flag=True, help="print only the candidate's CUDA source")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout (raw samples included)")
@baseline_option
@db_option()
def show_cmd(cand_id: str, source: bool, as_json: bool, baseline: str, db: str | None) -> None:
    """Everything stored about one candidate.

    ID is a candidate id or a unique prefix of one.
    """
    report = api.show_candidate(cand_id, db=db, baseline=baseline)
    if source:
        sys.stdout.write(report.source())
    elif as_json:
        print_json(report.document())
    else:
        _print_report(report)


def _status(st: api.Status, reason: str = "") -> str:
    text = f"[{api.STATUS_STYLE.get(st, '')}]{st.value}[/]"
    return text + (f": {escape(reason)}" if reason else "")


def _print_report(report: api.CandidateReport) -> None:
    c, run = report.candidate, report.first_run
    console.print(f"[bold]{c.id}[/]")
    console.print(f"{escape(c.label)}  [dim]{c.family} v{c.family_version}, {c.arch or 'no arch'}, "
                  f"flags {' '.join(c.flags) or '-'}, created {c.created:%Y-%m-%d %H:%M}[/]")
    console.print(f"status: {_status(c.status, c.reason)}")
    if report.replayed_on:
        console.print(f"[yellow]replayed: these results come from a recording made on {escape(report.replayed_on)} "
                      f"(GREEN and FAST ran there, not on this machine) and no GREEN checks are stored, so promote "
                      f"cannot ship it: `evo eval --id {api.short_id(c.id)}` gates and times it on a GPU[/]")
    if run is not None:
        console.print(f"[dim]first seen in run {run.id} ({escape(run.command)}"
                      f"{f', study {run.study}' if run.study else ''}) on {run.host}[/]")
    params = table("parameter", "value", title="parameters")
    for k, v in c.params.items():
        params.add_row(k, api.value_text(v))
    console.print(params)
    if report.record.builds:
        _print_build(report.record)
    for ev in report.record.evaluations:
        _print_evaluation(ev)
    if report.timings:
        _print_timings(report)
    _print_relatives(report.relatives)
    for t in report.record.trials:
        console.print(f"[dim]trial {t.number} of study {escape(t.study)}: {t.state}"
                      f"{'' if t.value is None else f', value {t.value:.4g}'}[/]")


def _print_evaluation(ev: api.EvaluationView) -> None:
    console.print(f"evaluation {ev.id} on {escape(ev.device or '?')}: {_status(ev.status, ev.reason)} "
                  f"[dim](GREEN {ev.green_seconds:.1f} s, FAST {ev.fast_seconds:.1f} s, run {ev.run_id})[/]")
    trust = {k: ev.device_info[k] for k in ("salt", "green_drawn", "fast_outputs_checked", "cubin_sha256", "gpu_uuid")
             if ev.device_info.get(k)}
    if trust:
        console.print("[dim]  " + ", ".join(f"{'board' if k == 'gpu_uuid' else k} "
                                             f"{v[:16] if k in ('cubin_sha256', 'gpu_uuid') else v}"
                                             for k, v in trust.items()) + "[/]")
    if ev.checks:
        _print_checks(ev.checks)


def _print_build(rec: api.CandidateRecord) -> None:
    b = rec.builds[-1]
    console.print(f"build: {_status(b.status)} in {b.seconds:.1f} s{' (cached)' if b.cached else ''}"
                  f"{f', {len(rec.builds)} builds' if len(rec.builds) > 1 else ''}"
                  f"  [dim]{escape(b.cubin_path or 'no cubin')}[/]")
    if b.resources:
        numbers = ("regs", "smem static", "smem dynamic", "spill st", "spill ld", "stack")
        report = table("entry", *numbers, right=numbers, wrap=("entry",), title="ptxas report")
        for name, r in b.resources.items():
            report.add_row(name, *(str(x) for x in (r.registers, r.smem_static, r.smem_dynamic,
                                                    r.spill_stores, r.spill_loads, r.stack_frame)))
        console.print(report)
    elif b.status is api.Status.COMPILE_FAILED and b.log:
        console.print(escape("\n".join(b.log.strip().splitlines()[:20])), style="dim", soft_wrap=True)


def _print_checks(checks: list[api.CheckResult]) -> None:
    out = table("case", "B,H,L,D", "dtype", "seed", "ok", "max err", "ref err", "tolerance", "reason",
                right=("seed", "max err", "ref err", "tolerance"), wrap=("reason",),
                title="GREEN checks")
    for ch in checks:
        s = ch.shape
        out.add_row(f"{s.case}{'c' if s.causal else ''}", s.dims, s.dtype, str(ch.seed),
                    "[green]yes[/]" if ch.passed else "[red]no[/]", f"{ch.max_abs_err:.2e}",
                    f"{ch.ref_err:.2e}", f"{ch.tolerance:.2e}", escape(ch.reason))
    console.print(out)


def _print_timings(report: api.CandidateReport) -> None:
    """The latest timing of each case beside SDPA's backends, and the score. A pruned candidate's
    timings are its screen's (the candidate alone on a few cases, few samples, against cached
    baselines: evo/search/rungs.py), which say why it was dropped, not what it scores in full."""
    ups = report.speedups
    vs = [b.removeprefix("sdpa_") for b in report.backends]
    screened = report.candidate.status is api.Status.PRUNED
    title = ("screen (why it was pruned; never timed in full, never ranked): evo's median us, speedups against "
             "the cached baselines" if screened else
             "FAST: evo's median us (p80-p20 spread); speedup vs each SDPA backend = its time / evo's")
    out = table("case", "B,H,L,D", "evo us", "TFLOP/s", *vs, right=("evo us", "TFLOP/s", *vs), title=title)
    for (tag, backend), t in report.latest.items():
        if backend != api.EVO:
            continue
        s = t.shape
        cells = []
        for b in report.backends:
            x = ups[b].get(tag)
            cells.append("—" if x is None else f"[{'green' if x >= 1 else 'red'}]{x:.2f}x[/]")
        out.add_row(tag, s.dims, f"{t.median_us:.2f} ({t.p80_us - t.p20_us:.2f})",
                    f"{t.tflops:.1f}", *cells)
    console.print(out)
    if report.score is None:
        console.print(f"[dim]no {report.baseline} timings to score against[/]")
    else:
        what = "screen score" if screened else "score"
        console.print(f"{what} vs {report.baseline}: [bold]x{report.score:.3f}[/] "
                      f"(geometric mean over {report.scored_cases} cases{'; a screen, not a rank' if screened else ''})")


def _print_relatives(relatives: list[api.Relative]) -> None:
    """Parents and children with the move and its measured effect (child / parent score)."""
    if not relatives:
        return
    out = table("", "id", "kind", "move", "effect", "status", right=("effect",), wrap=("move", "status"),
                title="lineage")
    for r in relatives:
        out.add_row(r.role, api.short_id(r.id), r.kind, escape(r.move_text),
                    "—" if r.effect is None else f"x{r.effect:.3f}", _status(r.status) if r.status else "?")
    console.print(out)
