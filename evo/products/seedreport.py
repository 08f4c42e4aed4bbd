"""BENCHMARKS.md sections and SVG plots for a seeds record (:mod:`evo.products.seeds`), without a GPU.

A seeds record holds rows (a campaign step: what was claimed, on which GPU, and evo's GREEN
verdict and FAST timings of the candidate that reproduces it) and the SDPA backend sweep. The
section puts each claim beside evo's measurement; the sweep becomes a table, one plot of time
against L per head dim (a panel per batch x heads, a line per backend) and a heatmap of the
fastest backend per point. The SVGs are plain text written by hand: no plotting dependency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evo.vocab import DEFAULT_BASELINE

COLORS = {"sdpa_flash": "#1f77b4", "sdpa_cudnn": "#d62728", "sdpa_efficient": "#2ca02c", "sdpa_default": "#7f7f7f"}


def _us(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.2f} us" if x < 100 else f"{x:.1f} us"


def _tflops(c: Mapping[str, Any], us: float) -> float:
    f = 4.0 * c["B"] * c["H"] * c["L"] * c["L"] * c["D"] / (2 if c.get("causal") else 1)
    return f / (us * 1e-6) / 1e12


def rows_table(record: Mapping[str, Any]) -> str:
    """One line per (row, case): claim and claimed GPU beside evo's time, TFLOP/s, speedups."""
    cols = ["campaign", "step (evo candidate)", "case B,H,L,D", "claimed (GPU)", "evo", "TFLOP/s",
            "vs sdpa_cudnn", f"vs {DEFAULT_BASELINE}", "GREEN"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in record["rows"]:
        green = "passed" if row["status"] == "fast" else f"{row['status']}: {row['reason'][:80]}"
        for i, c in enumerate(row["cases"]):
            evo = c["us"].get("evo")
            claimed = "; ".join(filter(None, [_us(c["claimed_us"]) if c.get("claimed_us") else "",
                                              row["claim"] if i == 0 else ""]))
            speed = [f"{c['us'][b] / evo:.3f}x" if evo and c["us"].get(b) else "—" for b in ("sdpa_cudnn", DEFAULT_BASELINE)]
            out.append("| " + " | ".join([
                row["group"] if i == 0 else "", f"{row['step']} (`{row['candidate_id'][:10]}`)" if i == 0 else "",
                f"{c['B']},{c['H']},{c['L']},{c['D']}", f"{claimed} ({row['claimed_on']})" if claimed else "",
                _us(evo), f"{_tflops(c, evo):.1f}" if evo else "—", *speed, green if i == 0 else ""]) + " |")
    return "\n".join(out) + "\n"


def sweep_table(sweep: Mapping[str, Any]) -> str:
    """Microseconds per backend and point, the fastest in bold."""
    backends = sweep["backends"]
    out = ["| B,H,D | L | " + " | ".join(backends) + " | fastest |", "|---|---|" + "---|" * (len(backends) + 1)]
    for p in sweep["points"]:
        best = min(p["us"], key=p["us"].get) if p["us"] else None
        cells = [(f"**{_us(p['us'][b])}**" if b == best else _us(p["us"][b])) if b in p["us"] else "refused"
                 for b in backends]
        out.append(f"| {p['B']},{p['H']},{p['D']} | {p['L']} | " + " | ".join(cells) + f" | {best or '—'} |")
    return "\n".join(out) + "\n"


def plot_names(name: str, sweep: Mapping[str, Any]) -> list[str]:
    stem = Path(name).stem
    return [f"{stem}-time-d{d}.svg" for d in sweep["grid"]["D"]] + [f"{stem}-heatmap.svg"]


def section(record: Mapping[str, Any], name: str) -> str:
    """The BENCHMARKS.md section of one seeds record (``name``: its file name)."""
    v = record.get("versions", {})
    head = (f"## Seed campaigns on {record['gpu']} — {record['created'][:10]}, git {record['git_sha']}\n\n"
            f"torch {v.get('torch', '?')} · CUDA {v.get('cuda', '?')} · cuDNN {v.get('cudnn', '?')} · "
            f"driver {v.get('driver', '?')} · `{name}` · written by `python -m evo.products.seeds`\n\n"
            "Each step of the hand-run campaigns as an evo candidate, gated by GREEN and timed by FAST "
            f"(rounds {record['fast'].get('rounds')}, reps {record['fast'].get('reps')}, interleaved with "
            "SDPA in the same worker), beside the figure that was claimed and the GPU it was claimed on. "
            "fp16, not causal; speedup = SDPA median / evo median.\n\n")
    text = head + rows_table(record)
    sweep = record.get("sweep")
    if sweep:
        g = sweep["grid"]
        plots = " · ".join(f"[{n}](benchmarks/plots/{n})" for n in plot_names(name, sweep))
        text += (f"\n### SDPA backend sweep ({record['gpu']})\n\nfp16, not causal; B in {g['B']}, H in {g['H']}, "
                 f"D in {g['D']}, L in {g['L']} (trimmed from L = 512..16384: the stated grid's corners at four "
                 f"lengths), median of {sweep['reps']} CUDA-graph samples per backend. Plots: {plots}\n\n"
                 + sweep_table(sweep))
    return text


# ----------------------------------------------------------------------------- SVG


def _svg(width: int, height: int, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def time_plot(sweep: Mapping[str, Any], d: int, gpu: str) -> str:
    """Time against L (log-log), a panel per (B, H), a line per backend, for head dim ``d``."""
    pw, ph, m = 300, 220, 45
    combos = [(b, h) for b in sweep["grid"]["B"] for h in sweep["grid"]["H"]]
    body = [f'<text x="10" y="16" font-size="13">SDPA backends, fp16, D={d}, {gpu}: time per call vs L</text>']
    Ls = sweep["grid"]["L"]
    for i, (b, h) in enumerate(combos):
        ox, oy = (i % 2) * (pw + m) + m, (i // 2) * (ph + m) + 30
        pts = [p for p in sweep["points"] if (p["B"], p["H"], p["D"]) == (b, h, d)]
        vals = [u for p in pts for u in p["us"].values()] or [1.0]
        lo, hi = math.log10(min(vals)), math.log10(max(vals)) + 1e-9
        def x(L: float, ox: float = ox) -> float:
            return ox + pw * (math.log2(L) - math.log2(Ls[0])) / max(1e-9, math.log2(Ls[-1]) - math.log2(Ls[0]))

        def y(u: float, oy: float = oy, lo: float = lo, hi: float = hi) -> float:
            return oy + ph - ph * (math.log10(u) - lo) / max(1e-9, hi - lo)

        body.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        body.append(f'<text x="{ox + 4}" y="{oy + 14}">B={b} H={h}</text>')
        body += [f'<text x="{x(L) - 12:.0f}" y="{oy + ph + 14}">{L}</text>' for L in Ls]
        body.append(f'<text x="{ox - 42}" y="{oy + ph:.0f}">{_us(10 ** lo)}</text>')
        body.append(f'<text x="{ox - 42}" y="{oy + 10:.0f}">{_us(10 ** hi)}</text>')
        for k, backend in enumerate(sweep["backends"]):
            line = [(x(p["L"]), y(p["us"][backend])) for p in pts if backend in p["us"]]
            if line:
                path = " ".join(f"{a:.1f},{c:.1f}" for a, c in line)
                body.append(f'<polyline points="{path}" fill="none" stroke="{COLORS.get(backend, "#000")}" stroke-width="2"/>')
            if i == 0:
                body.append(f'<text x="{ox + pw - 95}" y="{oy + 30 + 13 * k}" fill="{COLORS.get(backend, "#000")}">{backend}</text>')
    rows = (len(combos) + 1) // 2
    return _svg(2 * (pw + m) + 20, rows * (ph + m) + 40, body)


def heatmap(sweep: Mapping[str, Any], gpu: str) -> str:
    """A cell per (B, H, D) x L: the fastest backend's colour, its TFLOP/s, and how much slower
    sdpa_default is than it."""
    Ls = sweep["grid"]["L"]
    keys = [(b, h, d) for d in sweep["grid"]["D"] for b in sweep["grid"]["B"] for h in sweep["grid"]["H"]]
    cw, ch, left, top = 120, 34, 110, 50
    body = [f'<text x="10" y="16" font-size="13">Fastest SDPA backend per shape, fp16, {gpu} '
            f'(TFLOP/s; default/best time ratio)</text>']
    body += [f'<text x="{left + i * cw + 40}" y="{top - 8}">L={L}</text>' for i, L in enumerate(Ls)]
    for r, (b, h, d) in enumerate(keys):
        body.append(f'<text x="8" y="{top + r * ch + 21}">B={b} H={h} D={d}</text>')
        for i, L in enumerate(Ls):
            p = next((p for p in sweep["points"] if (p["B"], p["H"], p["D"], p["L"]) == (b, h, d, L)), None)
            if not p or not p["us"]:
                continue
            best = min(p["us"], key=p["us"].get)
            tf = _tflops(p, p["us"][best])
            ratio = p["us"].get(DEFAULT_BASELINE, float("nan")) / p["us"][best]
            body.append(f'<rect x="{left + i * cw}" y="{top + r * ch}" width="{cw - 2}" height="{ch - 2}" '
                        f'fill="{COLORS.get(best, "#000")}" fill-opacity="0.35"/>')
            body.append(f'<text x="{left + i * cw + 4}" y="{top + r * ch + 13}">{best.removeprefix("sdpa_")}</text>')
            body.append(f'<text x="{left + i * cw + 4}" y="{top + r * ch + 27}">{tf:.0f} TF/s; {ratio:.2f}x</text>')
    return _svg(left + len(Ls) * cw + 20, top + len(keys) * ch + 20, body)


def write_plots(records: Sequence[tuple[str, Mapping[str, Any]]], out_dir: Path) -> list[Path]:
    """The sweep plots of every seeds record, under ``out_dir/plots``."""
    written = []
    for name, rec in records:
        sweep = rec.get("sweep") if rec.get("kind") == "seeds" else None
        if not sweep:
            continue
        folder = out_dir / "plots"
        folder.mkdir(parents=True, exist_ok=True)
        names = plot_names(name, sweep)
        for d, fname in zip(sweep["grid"]["D"], names[:-1], strict=True):
            (folder / fname).write_text(time_plot(sweep, d, rec["gpu"]))
            written.append(folder / fname)
        (folder / names[-1]).write_text(heatmap(sweep, rec["gpu"]))
        written.append(folder / names[-1])
    return written
