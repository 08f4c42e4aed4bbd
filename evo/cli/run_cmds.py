"""``evo run`` (start or resume a search), ``evo insights`` and ``evo export-sweep``.

The commands parse options and print; :func:`evo.api.run`, :func:`evo.api.run_report`,
:func:`evo.api.study_insights` and :func:`evo.api.export_sweep` do the work. ``evo run`` ends by
saying where the results are, how many candidates it measured per GPU-hour (and how busy the
GPU was), how its screens fared, how fast the best candidate is against each SDPA baseline (in
words), and what to run next; ``--summary-json`` writes all of it to a file too.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.markup import escape

from evo.cli.app import api, cli, db_option, split_list
from evo.cli.output import check_writable, console, print_json, speedup_words, table, write_json
from evo.cli.progress import TrialProgress
from evo.vocab import (
    BASELINES, DEFAULT_BASELINE, DEFAULT_TOP, GRACE_S, HEARTBEAT_S, OBJECTIVES, PRUNE_BARS, SAMPLERS, SCREENS, SDPA_BACKENDS,
)

REFUSED = {"cmaes": "cmaes is not offered: every evo parameter is categorical, which Optuna's CMA-ES "
                    "does not model (it would draw each one at random); use random for a random baseline"}
SEED_MAX = 2**32 - 1


class SamplerChoice(click.Choice):
    """The offered samplers; a refused one is named with the reason instead of 'not one of'."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        if value in REFUSED:
            self.fail(REFUSED[str(value)], param, ctx)
        return super().convert(value, param, ctx)


@cli.command("run")
@click.option("--trials", type=click.IntRange(min=1), default=100, show_default=True, metavar="N",
              help="the study's total trials (a resumed study runs on to this many)")
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="start no new evaluation after this many seconds (one in progress finishes; the batch's "
              "unevaluated trials are re-queued for the next run)")
@click.option("--families", multiple=True, metavar="LIST", help="families to search, comma-separated (default: those whose manifest says search_default "
              "and that build for the arch, less any a default family supersedes: flash_wgmma alone on sm_90a, "
              "flash_mma on sm_80; the seed families, flash_scalar, flash_decode and triton_flash only when named)")
@click.option("--cases", multiple=True, metavar="LIST",
              help="FAST cases scored: F1, F3c, F3f, F1-F4, F6-bf16 (a dtype suffix), comma-separated (default: all, fp16)")
@click.option("--sampler", type=SamplerChoice([s for s in SAMPLERS if s not in REFUSED]), default="evo",
              show_default=True, help="how trials are proposed (docs/search.md)")
@click.option("--seed", type=click.IntRange(0, SEED_MAX), metavar="N", help="sampler seed")
@db_option()
@click.option("--study", metavar="NAME", help="study name; an existing study continues")
@click.option("--replay", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
              help="take measurements from this recording instead of a GPU")
@click.option("--batch", type=click.IntRange(min=1), default=8, show_default=True, metavar="N",
              help="trials asked, built and evaluated together")
@click.option("--arch", metavar="ARCH", help="nvcc arch: sm_90a or sm_80 (default: the GPU's, else sm_90a)")
@click.option("--baseline", type=click.Choice(BASELINES), help="the SDPA backend scores are against "
              "(default: sdpa_default, or the study's)")
@click.option("--objective", "objective_", type=click.Choice(OBJECTIVES),
              help="one geometric mean, or one per bucket (head dim x causal) (default: geomean, or the study's)")
@click.option("--jobs", type=click.IntRange(min=1), metavar="N", help="parallel nvcc processes (default: CPU count)")
@click.option("--gpus", metavar="all|LIST", help="GPUs to measure on, one worker process each: all, or indices "
              "like 0,1 (0,0: two workers on GPU 0) (default: every visible GPU)")
@click.option("--heartbeat", type=click.IntRange(min=1), default=HEARTBEAT_S, show_default=True, metavar="SECONDS",
              help="seconds between a worker's heartbeats")
@click.option("--grace", type=click.IntRange(min=2), default=GRACE_S, show_default=True, metavar="SECONDS",
              help="seconds without a heartbeat before a worker's trial is failed and retried by another; "
              "its run is marked failed once its lease (the same grace) has passed")
@click.option("--start-from", multiple=True, metavar="LIST",
              help="a new study's first trials: the best candidates of these studies, and these stored "
              "candidates, each named by a unique id prefix of 8 hex digits or more (a study's name comes first), "
              "comma-separated, read through today's manifests (docs/search.md)")
@click.option("--start-top", type=click.IntRange(min=1), default=DEFAULT_TOP, show_default=True, metavar="N",
              help="with --start-from: how many of each study's best (each bucket's leader comes too)")
@click.option("--pin", multiple=True, metavar="LIST",
              help="search a sub-space, these genes held at one value each, comma-separated: FAMILY.GENE=VALUE, "
              "or GENE=VALUE for the one family of --families that has it; a study keeps its pins (default: "
              "the study's; other pins are refused)")
@click.option("--full-only", is_flag=True,
              help="time every candidate with the full protocol (no screen, no pruning), as evo did before "
              "rungs; evo eval and evo bench always do")
@click.option("--screen-only", is_flag=True,
              help="stop every candidate after its screen (stored pruned, never ranked): a run that records "
              "screens for `evo export-sweep --fidelity screen`, timing none in full")
@click.option("--screen-alone", is_flag=True,
              help="time a screen's long cases with the candidate alone against a cached baseline, not beside "
              "it as the full rung does (the full rung then times them again): a cheaper screen that reads "
              "1-3 % high on long cases")
@click.option("--prune-bar", type=click.Choice(PRUNE_BARS), default=SCREENS, show_default=True,
              help="what a screen must reach to be timed in full when it leads no bucket: the highest screen "
              "seen (screens), or the screen of the best candidate timed in full (incumbent), so that a lucky "
              "screen stops barring the candidates after it once its full score is known")
@click.option("--summary-json", type=click.Path(path_type=Path), metavar="FILE",
              help="also write the summary to this file as JSON: trials by status, the best candidate, wall "
              "seconds, GPUs, device, git sha, candidates measured and per GPU-hour, screens (replaced atomically)")
def run_cmd(trials: int, time_budget: float | None, families: tuple[str, ...], cases: tuple[str, ...],
            sampler: str, seed: int | None, db: str | None, study: str | None, replay: Path | None, batch: int,
            arch: str | None, baseline: str | None, objective_: str | None, jobs: int | None,
            gpus: str | None, heartbeat: int, grace: int, start_from: tuple[str, ...], start_top: int,
            pin: tuple[str, ...], full_only: bool, screen_only: bool, screen_alone: bool, prune_bar: str,
            summary_json: Path | None) -> None:
    """Start or resume an evolution.

    Ctrl-C stops it; a later run continues the study. With a GPU every candidate is built,
    gated (GREEN, stopping at the first failing check) and screened: timed on a few FAST cases
    (alone on the short ones, beside SDPA on the long ones, which the full rung reuses); only a candidate whose screen leads some bucket (head dim x causal) goes on to the
    full protocol on every case, the others are stored as pruned and never ranked (--full-only:
    every candidate in full). Without a GPU the newest recording under data/ is replayed
    (measured values looked up, never invented).

    The summary counts this run's trials by status, says why it stopped, and gives its
    throughput: the candidates it measured itself (each once, however many trials drew it; not
    those answered from the database, invalid, failing to build or missing from a recording),
    the wall time of its search, the GPUs it used, and candidates per GPU-hour (a replay uses
    no GPU: candidates replayed per hour), with the share of that GPU time the worker was busy
    (priming its cached baselines included) and how long after the start it began the first candidate;
    the candidates screened, pruned and timed in full, and how far the screens were off the full
    scores. Then the best candidate against each SDPA backend, where the results are and what to
    run next.
    """
    if full_only and screen_only:
        raise click.UsageError("--full-only and --screen-only exclude each other")
    if full_only and screen_alone:
        raise click.UsageError("--screen-alone shapes the screen; --full-only has none")
    if prune_bar != SCREENS and (full_only or screen_only):
        raise click.UsageError("--prune-bar sets what a screen must reach for the full rung; "
                               "--full-only and --screen-only have no such choice")
    if summary_json is not None:
        check_writable(summary_json)
    reporter = TrialProgress(console)
    try:
        summary = api.run(db, trials=trials, time_budget_s=time_budget, families=split_list(families),
                          cases=split_list(cases), sampler=sampler, seed=seed, study=study, replay=replay,
                          batch=batch, arch=arch, baseline=baseline, objective=objective_, jobs=jobs, gpus=gpus,
                          heartbeat_s=heartbeat, grace_s=grace, start_from=split_list(start_from),
                          start_top=start_top, reporter=reporter, screen=not full_only, pins=split_list(pin),
                          screen_only=screen_only, screen_alone=screen_alone, prune_bar=prune_bar)
    finally:
        reporter.stop()
    report = api.run_report(summary, db)
    print_summary(report)
    if summary_json is not None:
        write_json(summary_json, report.document())
    if summary.interrupted:
        raise KeyboardInterrupt  # Ctrl-C was handled (trials re-queued): main() exits 130


def print_summary(report: api.RunReport) -> None:
    """Counts per status, why the run stopped, the best candidate against every baseline, where
    the results are and what to run next."""
    s = report.summary
    console.print(f"study [bold]{escape(s.study)}[/] ({s.source}): {s.finished} trial(s) this run, "
                  f"{s.total}/{s.requested} in the study; stopped: {escape(s.stopped)}")
    if report.done_before:
        console.print(f"[yellow]{escape(report.done_before)}[/]", soft_wrap=True)
    counts = table("status", "trials", right=("trials",), title="this run")
    for status, n in s.counts.most_common():
        counts.add_row(status, str(n))
    if s.reused:
        counts.add_row("(answered from the store)", str(s.reused))
    if s.twins:
        counts.add_row("(of them: kernels timed before, as another candidate's)", str(s.twins))
    if s.waited:
        counts.add_row("(measured by another worker meanwhile)", str(s.waited))
    if s.recovered:
        counts.add_row("(re-queued from a dead worker)", str(s.recovered))
    if s.lost:
        counts.add_row("(failed as stale before told)", str(s.lost))
    if counts.rows:
        console.print(counts)
    if s.not_evaluated:
        console.print(f"[yellow]{escape(s.not_evaluated)}[/]")
    if s.counts.get("unmeasured"):
        console.print(f"[yellow]{s.counts['unmeasured']} candidate(s) are not in the recording: "
                      f"reported as unmeasured, not invented[/]")
    console.print(throughput(s), soft_wrap=True)
    if s.screened:
        console.print(screens(s), soft_wrap=True)
    if s.best is None:
        console.print("best: no candidate timed yet")
    else:
        _print_best(report)
    console.print(f"results: {escape(report.location)} (study {escape(s.study)})", soft_wrap=True)
    _print_next(report.next_steps)


def throughput(s: api.RunSummary) -> str:
    """One line: the candidates the run measured, in what wall time, on how many GPUs, and per
    GPU-hour (:class:`~evo.search.records.RunSummary` says what is counted); a replay's are
    replayed, per hour of wall time; a build-only run measures nothing."""
    took = clock_text(s.wall_s)
    if s.source == "build-only":
        return f"throughput: nothing measured in {took} (building only: no GPU, no recording)"
    n = f"{s.measured} candidate{'' if s.measured == 1 else 's'}"
    if s.gpus:
        line = f"throughput: {n} measured in {took} on {s.gpus} GPU{'' if s.gpus == 1 else 's'}"
        rate, per = s.candidates_per_gpu_hour, "per GPU-hour"
    else:
        line, rate, per = f"throughput: {n} replayed in {took}", s.per_hour(s.measured), "per hour (replay: no GPU)"
    line = f"{line} = {rate_text(rate)} {per}" if rate is not None else line
    busy = s.busy_share if s.gpus else None
    if busy is None or not s.gpu_s:
        return line
    parts = ", ".join(f"{part} {sec / s.wall_s / s.gpus:.0%}" for part, sec in s.gpu_s.items() if sec)
    per_busy = s.candidates_per_busy_gpu_hour
    tail = f" = {rate_text(per_busy)} per busy GPU-hour" if per_busy else ""
    start = "" if s.first_gpu_s is None else f"; the first candidate on the GPU {s.first_gpu_s:.0f} s after the start"
    return f"{line}; GPU busy {busy:.0%} of it ({parts}){tail}{start}"


def screens(s: api.RunSummary) -> str:
    """One line: the candidates screened, how many the pruner kept for the full protocol, and
    the screen's error on those timed on both rungs (screened / full score - 1)."""
    n = f"{s.screened} candidate{'' if s.screened == 1 else 's'}"
    line = f"screens: {n} screened, {s.kept} kept for the full protocol"
    errs = sorted(abs(x) for x in s.screen_errors)
    if not errs:
        return line
    worst = max(s.screen_errors, key=abs)
    return f"{line}; screen vs full: median |error| {errs[len(errs) // 2]:.1%}, worst {worst:+.1%} (n={len(errs)})"


def clock_text(seconds: float) -> str:
    """Wall time as a clock shows it: ``10:02``, ``1:05:09`` past an hour."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def rate_text(rate: float) -> str:
    """A rate in whole units, or with two decimals below ten."""
    return f"{rate:.0f}" if rate >= 10 else f"{rate:.2f}"


def _print_best(report: api.RunReport) -> None:
    """The best candidate's score against each baseline it was timed beside, in numbers and words."""
    best = report.summary.best
    assert best is not None
    console.print(f"best: [bold]{api.short_id(best.candidate_id)}[/] {escape(best.label)}")
    rows = table("vs", "speedup", "in words", right=("speedup",), wrap=("in words",), show_header=False)
    for backend, x in report.speedups.items():
        rows.add_row(f"vs {backend}", f"x{x:.3f}", speedup_words(x, backend))
    console.print(rows)
    if report.margin:
        console.print(f"[yellow]{escape(report.margin)}[/]", soft_wrap=True)
    n_cases = f"the study's {report.cases}" if report.cases else "its"
    console.print(f"[dim](speedup = SDPA's time / evo's time, geometric mean over {n_cases} FAST cases; "
                  f"above x1 evo is faster)[/]")


def _print_next(steps: list[api.NextStep]) -> None:
    """The commands to run next, each with what it gives."""
    console.print("next:")
    for step in steps:
        console.print(f"  {escape(step.command)}", soft_wrap=True)
        console.print(f"      [dim]{step.purpose}[/]")


@cli.command("insights")
@click.option("--study", metavar="NAME", help="one study (default: every edge in the database)")
@db_option()
@click.option("--baseline", type=click.Choice(SDPA_BACKENDS), default=DEFAULT_BASELINE, show_default=True,
              help="speedups against this SDPA backend")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, metavar="N", help="rows per table")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout (every row, not --top)")
def insights_cmd(study: str | None, db: str | None, baseline: str, top: int, as_json: bool) -> None:
    """Which moves help, on which shapes; what fails to build.

    Moves (child score / parent score per parameter change), parameter values that co-occur with
    spills or too much shared memory, and Optuna's parameter importances (of every study when
    --study is left out); then how well the screens foretold the full scores of the candidates
    they kept (median and 90th percentile of |screened / full - 1|, the worst, the mean).
    """
    report = api.study_insights(db, study, baseline=baseline)
    screened = api.screen_errors(db, study)
    if as_json:
        print_json(report.document() | {"screen": screened.document()})
        return
    _show_insights(report, top)
    if screened.screened:
        console.print(f"screens: {escape(screened.line())}", soft_wrap=True)


def _fmt_effect(x: float) -> str:
    return "-" if math.isnan(x) else f"x{x:.3f}"


def _show_insights(r: api.InsightsReport, top: int) -> None:
    t = table("family", "move", "bucket", "n", "median effect", "wins", "children failed",
              right=("n", "median effect", "wins", "children failed"), wrap=("move", "bucket"),
              title="moves (child score / parent score)")
    for m in r.moves[:top]:
        t.add_row(m.family, m.move_text, m.bucket, str(m.n), _fmt_effect(m.median_effect),
                  f"{m.win_rate:.0%}" if m.n else "-", str(m.failed))
    console.print(t)
    t = table("family", "param=value", "built", "spills", "smem over", "rate",
              right=("built", "spills", "smem over", "rate"), title="resources (over built candidates)")
    for x in r.resources[:top]:
        t.add_row(x.family, api.assignment_text(x.param, x.value), str(x.built), str(x.spills), str(x.smem_over),
                  f"{x.rate:.0%}")
    console.print(t)
    _show_importances(r)


def _show_importances(r: api.InsightsReport) -> None:
    """Each family's importances (named by study when the report covers several), or why none."""
    if r.importances_note:
        console.print(f"parameter importances: {escape(r.importances_note)}")
    for imp in r.importances:
        who = imp.family if r.study is not None else f"{imp.family} in study {imp.study}"
        if imp.skipped:
            console.print(f"importances for {escape(who)}: {escape(imp.skipped)}")
            continue
        t = table("param", "importance", right=("importance",),
                  title=f"parameter importances: {who} ({imp.trials} trials)")
        for name, v in imp.values.items():
            t.add_row(name, f"{v:.3f}")
        console.print(t)


@cli.command("export-sweep")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="recording to write or extend (default: <EVO_HOME>/data/sweep-<gpu>.json.gz)")
@db_option()
@click.option("--gpu", metavar="NAME", help="device name (default: the one with most evaluations)")
@click.option("--fidelity", type=click.Choice(["full", "screen"]), default="full", show_default=True,
              help="the timings recorded: the full protocol's, or each candidate's search screen (pruned "
              "candidates included; about 2 s of GPU a candidate instead of 15)")
def export_sweep_cmd(out: Path | None, db: str | None, gpu: str | None, fidelity: str) -> None:
    """Write the database's GPU results to a replayable recording.

    Every candidate with a final status (any study) is merged into OUT; a file holds one fidelity.
    """
    done = api.export_sweep(out, db=db, gpu=gpu, fidelity=fidelity)
    console.print(f"{done.path}: {done.candidates} candidate(s) measured on {done.gpu} ({done.added} new or updated)")
