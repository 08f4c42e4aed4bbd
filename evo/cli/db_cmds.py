"""``evo lineage`` (the study's graph as a tree, DOT or JSON) and ``evo show ID`` (everything
stored about one candidate: parameters, status, build report, checks, timings, lineage)."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import click
from rich.markup import escape

from evo import api

from evo.analysis import jsondoc
from evo.toolchain.build import SOURCE, cache_dir
from evo.cli.app import cli, db_option, require_database
from evo.cli.output import console, table
from evo.errors import EvoError
from evo.analysis.lineage import STATUS_STYLE, mutation_text, to_dot, to_json, to_tree
from evo.family.render import render
from evo.results import CheckResult, Status, Timing
from evo.vocab import DEFAULT_BASELINE, EVO
from evo.scoring import edge_effect, latest, score, speedups
from evo.family.space import make_candidate
from evo.store import CandidateRecord, Store, open_store, short_id
from evo.vocab import SDPA_BACKENDS, value_text

FORMATS = ("tree", "dot", "json")
baseline_option = click.option("--baseline", type=click.Choice(SDPA_BACKENDS), default=DEFAULT_BASELINE, show_default=True,
                               help="the SDPA backend speedups are measured against")


@cli.command("lineage")
@click.option("--study", metavar="NAME", help="study name (default: every candidate)")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="tree", show_default=True,
              help="a tree on the terminal, Graphviz DOT, or JSON")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout (same as --format json)")
@baseline_option
@db_option()
def lineage_cmd(study: str | None, fmt: str, as_json: bool, baseline: str, db: str) -> None:
    """The search tree: candidates, moves and their effects.

    Candidates with status and score; edges with the move that made the child and its effect.
    """
    fmt = "json" if as_json else fmt
    lin = api.lineage_graph(db, study, baseline)
    if not lin.nodes:
        raise EvoError(f"no candidates{f' in study {study!r}' if study else ''} in the database")
    if fmt == "tree":
        console.print(to_tree(lin))
    elif fmt == "dot":
        sys.stdout.write(to_dot(lin))
    else:
        sys.stdout.write(jsondoc.dumps(to_json(lin)))


@cli.command("show")
@click.argument("cand_id", metavar="ID")
@click.option("--source", is_flag=True, help="print only the candidate's CUDA source")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout (raw samples included)")
@baseline_option
@db_option()
def show_cmd(cand_id: str, source: bool, as_json: bool, baseline: str, db: str) -> None:
    """Everything stored about one candidate.

    ID is a candidate id or a unique prefix of one.
    """
    with open_store(require_database(db)) as store:
        rec = store.get(cand_id)
        if source:
            sys.stdout.write(_source(rec))
            return
        if as_json:
            sys.stdout.write(jsondoc.dumps(jsondoc.record_doc(store, rec, baseline)))
            return
        _print_record(store, rec, baseline)


def _source(rec: CandidateRecord) -> str:
    """The built source from the cache, else rendered again from today's templates."""
    c = rec.candidate
    cached = cache_dir(c.id) / SOURCE
    if cached.is_file():
        return cached.read_text()
    if c.status is Status.INVALID:
        raise EvoError(f"{short_id(c.id)} is invalid and was never rendered: {c.reason}")
    rendered = render(make_candidate(c.family, c.params))
    if rendered.source_hash != c.source_hash:
        raise EvoError(f"{short_id(c.id)} is not in the build cache and today's {c.family} templates render it "
                       f"differently (hash {rendered.source_hash[:12]}, stored {(c.source_hash or '?')[:12]})")
    return rendered.source


def _status(st: Status, reason: str = "") -> str:
    text = f"[{STATUS_STYLE.get(st, '')}]{st.value}[/]"
    return text + (f": {escape(reason)}" if reason else "")


def _print_record(store: Store, rec: CandidateRecord, baseline: str) -> None:
    c = rec.candidate
    console.print(f"[bold]{c.id}[/]")
    console.print(f"{escape(c.label)}  [dim]{c.family} v{c.family_version}, {c.arch or 'no arch'}, "
                  f"flags {' '.join(c.flags) or '-'}, created {c.created:%Y-%m-%d %H:%M}[/]")
    console.print(f"status: {_status(c.status, c.reason)}")
    if c.first_run_id is not None and (run := store.get_run(c.first_run_id)):
        console.print(f"[dim]first seen in run {run.id} ({escape(run.command)}"
                      f"{f', study {run.study}' if run.study else ''}) on {run.host}[/]")
    params = table("parameter", "value", title="parameters")
    for k, v in c.params.items():
        params.add_row(k, value_text(v))
    console.print(params)
    if rec.builds:
        _print_build(rec)
    for ev in rec.evaluations:
        console.print(f"evaluation {ev.id} on {escape(ev.device or '?')}: {_status(ev.status, ev.reason)} "
                      f"[dim](GREEN {ev.green_seconds:.1f} s, FAST {ev.fast_seconds:.1f} s, run {ev.run_id})[/]")
        trust = {k: ev.device_info[k] for k in ("salt", "green_drawn", "fast_outputs_checked", "cubin_sha256")
                 if k in ev.device_info}
        if trust:
            console.print("[dim]  " + ", ".join(f"{k} {v[:16] if k == 'cubin_sha256' else v}"
                                                 for k, v in trust.items()) + "[/]")
        if ev.checks:
            _print_checks(ev.checks)
    timings = store.timings_for(c.id)
    if timings:
        _print_timings(timings, baseline)
    _print_lineage(store, rec, baseline)
    for t in rec.trials:
        console.print(f"[dim]trial {t.number} of study {escape(t.study)}: {t.state}"
                      f"{'' if t.value is None else f', value {t.value:.4g}'}[/]")


def _print_build(rec: CandidateRecord) -> None:
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
    elif b.status is Status.COMPILE_FAILED and b.log:
        console.print(escape("\n".join(b.log.strip().splitlines()[:20])), style="dim", soft_wrap=True)


def _print_checks(checks: Iterable[CheckResult]) -> None:
    out = table("case", "B,H,L,D", "dtype", "seed", "ok", "max err", "ref err", "tolerance", "reason",
                right=("seed", "max err", "ref err", "tolerance"), wrap=("reason",),
                title="GREEN checks")
    for ch in checks:
        s = ch.shape
        out.add_row(f"{s.case}{'c' if s.causal else ''}", f"{s.B},{s.H},{s.L},{s.D}", s.dtype, str(ch.seed),
                      "[green]yes[/]" if ch.passed else "[red]no[/]", f"{ch.max_abs_err:.2e}",
                    f"{ch.ref_err:.2e}", f"{ch.tolerance:.2e}", escape(ch.reason))
    console.print(out)


def _print_timings(timings: list[Timing], baseline: str) -> None:
    by = latest(timings)
    backends = sorted({b for _, b in by if b != EVO})
    ups = {b: speedups(timings, b) for b in backends}
    vs = [b.removeprefix("sdpa_") for b in backends]
    out = table("case", "B,H,L,D", "evo us", "TFLOP/s", *vs, right=("evo us", "TFLOP/s", *vs),
                title="FAST: evo's median us (p80-p20 spread); speedup vs each SDPA backend = its time / evo's")
    for (tag, backend), t in by.items():
        if backend != EVO:
            continue
        s = t.shape
        cells = []
        for b in backends:
            x = ups[b].get(tag)
            cells.append("—" if x is None else f"[{'green' if x >= 1 else 'red'}]{x:.2f}x[/]")
        out.add_row(tag, f"{s.B},{s.H},{s.L},{s.D}", f"{t.median_us:.2f} ({t.p80_us - t.p20_us:.2f})",
                    f"{t.tflops:.1f}", *cells)
    console.print(out)
    try:
        console.print(f"score vs {baseline}: [bold]x{score(timings, baseline):.3f}[/] "
                      f"(geometric mean over {len(speedups(timings, baseline))} cases)")
    except EvoError:
        console.print(f"[dim]no {baseline} timings to score against[/]")


def _print_lineage(store: Store, rec: CandidateRecord, baseline: str) -> None:
    """Parents and children with the move and its measured effect (child / parent score)."""
    edges = [("parent", e, e.parent_id) for e in rec.parents] + [("child", e, e.child_id) for e in rec.children]
    if not edges:
        return
    others = [oid for _, _, oid in edges]
    statuses = store.statuses(others)
    timed = store.latest_timings([rec.candidate.id, *others])
    out = table("", "id", "kind", "move", "effect", "status", right=("effect",), wrap=("move", "status"),
                title="lineage")
    for role, e, oid in edges:
        parent, child = timed.get(e.parent_id), timed.get(e.child_id)
        effect = (edge_effect(parent[1], child[1], baseline)
                  if parent and child and parent[0] == child[0] else None)
        st = statuses.get(oid)
        out.add_row(role, short_id(oid), e.kind, escape(mutation_text(e.mutation)),
                    "—" if effect is None else f"x{effect:.3f}", _status(st) if st else "?")
    console.print(out)
