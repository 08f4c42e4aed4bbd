"""Plotly figures (plain ``{"data": [...], "layout": {...}}`` dicts) from the report's data.

Each function takes a section of :mod:`evo.report.data` and returns one figure, or None when
the section has nothing to draw (the page then says why instead of showing an empty plot).
Traces that belong to the lineage's nodes carry ``meta: "nodes"`` so the page can count them.
Speedups carry their spread as error bars: from baseline p20 / candidate p80 to baseline p80
/ candidate p20 (the interquantile ranges of both measurements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evo.vocab import EVO

Figure = dict[str, Any]

STATUS_COLORS = {
    "fast": "#1a9850", "green": "#91cf60", "pruned": "#d9ef8b", "built": "#4575b4", "red": "#d73027", "crashed": "#c51b7d",
    "timeout": "#8e0152", "compile_failed": "#f46d43", "resource_rejected": "#e6a117", "invalid": "#9e9e9e",
}
CANDIDATE_COLOR = "#111111"
BACKEND_COLORS = {EVO: CANDIDATE_COLOR, "sdpa_default": "#1f77b4", "sdpa_flash": "#ff7f0e",
                  "sdpa_cudnn": "#2ca02c", "sdpa_efficient": "#9467bd"}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f")
DIVERGING = [[0.0, "#b2182b"], [0.5, "#f7f7f7"], [1.0, "#1a9850"]]  # slower | parity | faster
EDGE_STYLES = {"mutation": "solid", "crossover": "dash", "nearest": "dot", "import": "dashdot"}
EDGE_TEXT_MAX = 150  # edges whose effect is written on the graph; above, it is in the hover only
FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}


def _layout(title: str, **kw: Any) -> dict[str, Any]:
    return {"title": {"text": title, "x": 0, "xanchor": "left"}, "font": FONT, "template": "plotly_white",
            "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "hovermode": "closest", **kw}


def _menu(buttons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A dropdown above the plot area, under the title (views of one figure)."""
    return [{"type": "dropdown", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom",
             "showactive": True, "buttons": buttons}] if len(buttons) > 1 else []


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"x{x:.3f}"


def _backend_color(name: str, i: int) -> str:
    return BACKEND_COLORS.get(name, PALETTE[i % len(PALETTE)])


# ----------------------------------------------------------------------------- progress


def progress(series: Sequence[Mapping[str, Any]]) -> Figure | None:
    """Best value so far against evaluations, one line per study and sampler, every trial's
    value as a faint point of the same color."""
    data: list[dict[str, Any]] = []
    for i, s in enumerate(series):
        color, name = PALETTE[i % len(PALETTE)], f"{s['study']} · {s['sampler']}"
        pts = [p for p in s["points"] if p["best"] is not None]
        if not pts:
            continue
        data.append({"type": "scatter", "mode": "lines", "name": name, "legendgroup": name,
                     "x": [p["evaluations"] for p in pts], "y": [p["best"] for p in pts],
                     "line": {"shape": "hv", "color": color, "width": 2.5},
                     "hovertemplate": "best so far x%{y:.3f} after %{x} evaluations<extra>" + name + "</extra>"})
        vals = [p for p in s["points"] if p["value"] is not None]
        data.append({"type": "scatter", "mode": "markers", "name": f"{name}: trials", "legendgroup": name,
                     "showlegend": False, "x": [p["evaluations"] for p in vals], "y": [p["value"] for p in vals],
                     "marker": {"color": color, "size": 5, "opacity": 0.35},
                     "text": [f"trial {p['trial']}: {p['label']}" for p in vals],
                     "hovertemplate": "%{text}<br>x%{y:.3f}<extra></extra>"})
    if not data:
        return None
    return {"data": data, "layout": _layout(
        "Best so far against evaluations", height=420,
        xaxis={"title": {"text": "evaluations (distinct candidates built and run)"}, "rangemode": "tozero"},
        yaxis={"title": {"text": "value (geometric-mean speedup)"}})}


def sampler_reach(bench: Mapping[str, Any] | None) -> Figure | None:
    """The sampler benchmark: per sampler, the share of its seeded runs that had reached the
    target after each number of evaluations; one view per recording and start mode."""
    if not bench:
        return None
    views = [(sec, mode) for sec in bench["sections"] for mode in sec["modes"]]
    names = list(dict.fromkeys(r["sampler"] for sec in bench["sections"] for r in sec["runs"]))
    colors = {n: CANDIDATE_COLOR if n == EVO else PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    data, owner = [], []
    for v, (sec, mode) in enumerate(views):
        budget = int(sec["size"])
        for name in names:
            rs = [r for r in sec["runs"] if r["sampler"] == name and r["mode"] == mode]
            if not rs:
                continue
            hits = sorted(int(r["evaluations"]) for r in rs if r["evaluations"] is not None)
            xs = [1, *hits, budget]  # no run reaches the target before its first evaluation
            ys = [0.0, *((i + 1) / len(rs) for i in range(len(hits))), len(hits) / len(rs)]
            data.append({"type": "scatter", "mode": "lines", "name": name, "legendgroup": name, "visible": v == 0,
                         "x": xs, "y": ys, "line": {"shape": "hv", "color": colors[name],
                                                    "width": 2.5 if name == "evo" else 1.3,
                                                    "dash": "dot" if name.startswith("kt:") else "solid"},
                         "hovertemplate": f"{name} ({mode}): %{{y:.0%}} of {len(rs)} runs at the best "
                                          "after %{x} evaluations<extra></extra>"})
            owner.append(v)
    if not data:
        return None
    buttons = [{"label": f"{sec['recording'].rsplit('/', 1)[-1]}: {mode} start", "method": "update",
                "args": [{"visible": [o == v for o in owner]}]} for v, (sec, mode) in enumerate(views)]
    return {"data": data, "layout": _layout(
        f"Sampler benchmark: share of {bench['seeds']} seeded runs at the best, against evaluations",
        height=460, margin={"l": 60, "r": 20, "t": 90, "b": 50},
        xaxis={"title": {"text": "evaluations (distinct valid points proposed)"}, "type": "log"},
        yaxis={"title": {"text": "share of runs"}, "range": [0, 1.02], "tickformat": ".0%"},
        updatemenus=_menu(buttons))}


# ----------------------------------------------------------------------------- speedups, roofline


def _speedup_trace(entries: Sequence[Mapping[str, Any]], backend: str, i: int, visible: bool) -> dict[str, Any]:
    xs, ys, hi, lo, text = [], [], [], [], []
    for e in entries:
        evo, base = e["backends"].get(EVO), e["backends"].get(backend)
        if not evo or not base or not evo["median_us"]:
            continue
        y = base["median_us"] / evo["median_us"]
        xs.append(e["tag"])
        ys.append(y)
        hi.append(base["p80_us"] / evo["p20_us"] - y if evo["p20_us"] else 0.0)
        lo.append(y - base["p20_us"] / evo["p80_us"] if evo["p80_us"] else 0.0)
        text.append(f"{e['short']} {e['label']}<br>evo {evo['median_us']:.2f} us "
                    f"({evo['p20_us']:.2f}-{evo['p80_us']:.2f}), {backend} {base['median_us']:.2f} us")
    return {"type": "scatter", "mode": "markers", "name": f"vs {backend}", "x": xs, "y": ys, "visible": visible,
            "error_y": {"type": "data", "symmetric": False, "array": hi, "arrayminus": lo, "thickness": 1.2},
            "marker": {"size": 9, "color": _backend_color(backend, i), "symbol": i % 5},
            "text": text, "hovertemplate": "%{x}: %{y:.3f}x<br>%{text}<extra></extra>"}


def _backends(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    names = {b for e in entries for b in e["backends"] if b != EVO}
    known = [b for b in BACKEND_COLORS if b in names]
    return known + sorted(names - set(known))


def speedups(cases: Mapping[str, Any]) -> Figure | None:
    """Speedup per FAST case against every backend timed beside the kernel: the case's winner,
    or (menu) the best candidate overall on every case."""
    views = [("fastest candidate per case", cases["winners"])]
    if cases["best"] is not None:
        views.append((f"best overall: {cases['best']['short']} (x{cases['best']['score']:.3f})", cases["overall"]))
    data, owner = [], []
    for v, (_, entries) in enumerate(views):
        for i, b in enumerate(_backends(entries)):
            data.append(_speedup_trace(entries, b, i, v == 0))
            owner.append(v)
    if not any(t["x"] for t in data):
        return None
    buttons = [{"label": name, "method": "update", "args": [{"visible": [o == v for o in owner]}]}
               for v, (name, _) in enumerate(views)]
    return {"data": data, "layout": _layout(
        f"Speedup per FAST case (baseline median / evo median) on {cases['device']}", height=460,
        scattermode="group", scattergap=0.5, margin={"l": 60, "r": 20, "t": 90, "b": 50},
        xaxis={"title": {"text": "FAST case"}, "type": "category", "categoryorder": "array",
               "categoryarray": cases["tags"]},
        yaxis={"title": {"text": "speedup (x)"}},
        shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                 "line": {"color": "#888", "width": 1}}],
        updatemenus=_menu(buttons))}


def heatmap(cases: Mapping[str, Any]) -> Figure | None:
    """The top candidates' speedup against the baseline on every case (which kernel wins where)."""
    rows = cases["heatmap"]["rows"]
    if not rows or not cases["tags"]:
        return None
    z = [r["speedups"] for r in rows]
    text = [[_ratio(v) for v in r["speedups"]] for r in rows]
    labels = [f"{r['short']} ({_ratio(r['score'])})" for r in rows]
    return {"data": [{"type": "heatmap", "x": cases["tags"], "y": labels, "z": z, "text": text,
                      "texttemplate": "%{text}", "textfont": {"size": 10}, "zmid": 1.0, "colorscale": DIVERGING,
                      "colorbar": {"title": {"text": "speedup"}},
                      "customdata": [[r["label"]] * len(cases["tags"]) for r in rows],
                      "hovertemplate": "%{y} on %{x}: %{text}<br>%{customdata}<extra></extra>"}],
            "layout": _layout(f"Top {len(rows)} candidates: speedup against {cases['baseline']} per case",
                              height=max(320, 60 + 22 * len(rows)),
                              xaxis={"type": "category", "side": "top", "title": {"text": ""}},
                              yaxis={"autorange": "reversed", "type": "category"},
                              margin={"l": 170, "r": 20, "t": 90, "b": 20})}


def _tflops(flops: float, us: float | None) -> float | None:
    return None if not us else flops / (us * 1e-6) / 1e12


def roofline_views(cases: Mapping[str, Any], bench: Sequence[Any]) -> list[dict[str, Any]]:
    """One view per run: per case and backend, achieved TFLOP/s, and the GEMM rate that run measured.
    The database's view uses each case's winner; each ``evo bench`` record is a view of its own."""
    views = []
    if cases["winners"]:
        per = {e["tag"]: {b: (s["tflops"], e["short"]) for b, s in e["backends"].items()} for e in cases["winners"]}
        views.append({"name": f"database: fastest per case on {cases['device']}", "per": per,
                      "gemm": cases["gemm_tflops"]})
    for b in bench:
        rec = b.record
        per = {}
        for c in rec["cases"]:
            tag = f"{c['case']}{'c' if c['causal'] else ''}-{c.get('dtype', 'fp16')}"
            flops = 4.0 * c["B"] * c["H"] * c["L"] * c["L"] * c["D"] / (2 if c["causal"] else 1)
            cid = str(c.get("candidate_id") or "")
            per[tag] = {k: (_tflops(flops, us), cid[:12]) for k, us in c["us"].items() if us}
        views.append({"name": f"evo bench {b.name} ({rec['gpu']}, git {rec.get('git_sha', '?')})", "per": per,
                      "gemm": rec.get("gemm_tflops")})
    return views


def roofline(cases: Mapping[str, Any], bench: Sequence[Any], case_key: Any) -> Figure | None:
    """Achieved TFLOP/s per case against the dense GEMM rate measured in the same run."""
    views = roofline_views(cases, bench)
    if not views:
        return None
    data, owner = [], []
    for v, view in enumerate(views):
        traces = _roofline_traces(view, sorted(view["per"], key=case_key), v == 0)
        data += traces
        owner += [v] * len(traces)
    if not any(t["x"] for t in data):
        return None
    notes = ["" if view["gemm"] else "no GEMM rate was measured in these runs" for view in views]
    tags = [sorted(view["per"], key=case_key) for view in views]
    buttons = [{"label": view["name"], "method": "update",
                "args": [{"visible": [o == v for o in owner]},
                         {"annotations": _note(notes[v]), "xaxis.categoryarray": tags[v]}]}
               for v, view in enumerate(views)]
    return {"data": data, "layout": _layout(
        "Achieved TFLOP/s per case against the GEMM rate of the same run", height=480,
        margin={"l": 60, "r": 20, "t": 90, "b": 50},
        xaxis={"title": {"text": "FAST case"}, "type": "category", "categoryorder": "array",
               "categoryarray": tags[0]},
        yaxis={"title": {"text": "TFLOP/s (4·B·H·L²·D, halved when causal)"}, "rangemode": "tozero"},
        annotations=_note(notes[0]),
        updatemenus=_menu(buttons))}


def _roofline_traces(view: Mapping[str, Any], tags: Sequence[str], visible: bool) -> list[dict[str, Any]]:
    """One view's traces: each backend's TFLOP/s over the cases ``tags`` (evo's joined by a
    line), and the run's GEMM rate as a dashed line when it measured one."""
    names = {b for per in view["per"].values() for b in per}
    ordered = [b for b in BACKEND_COLORS if b in names] + sorted(names - set(BACKEND_COLORS))
    data = []
    for i, b in enumerate(ordered):
        pts = [(t, view["per"][t][b]) for t in tags if b in view["per"][t] and view["per"][t][b][0]]
        data.append({"type": "scatter", "mode": "markers+lines" if b == EVO else "markers",
                     "name": b, "visible": visible,
                     "x": [t for t, _ in pts], "y": [p[0] for _, p in pts],
                     "text": [p[1] for _, p in pts],
                     "marker": {"size": 10 if b == EVO else 8, "color": _backend_color(b, i),
                                "symbol": "star" if b == EVO else i % 5},
                     "line": {"width": 1, "color": _backend_color(b, i)},
                     "hovertemplate": "%{x}: %{y:.1f} TFLOP/s<br>%{text}<extra>" + b + "</extra>"})
    if view["gemm"] and tags:
        g = float(view["gemm"])
        data.append({"type": "scatter", "mode": "lines", "name": f"dense fp16 GEMM {g:.0f} TFLOP/s (same run)",
                     "visible": visible, "x": [tags[0], tags[-1]], "y": [g, g],
                     "line": {"color": "#b22222", "dash": "dash", "width": 2},
                     "hovertemplate": f"GEMM {g:.1f} TFLOP/s<extra></extra>"})
    return data


def _note(text: str) -> list[dict[str, Any]]:
    return [] if not text else [{"text": text, "xref": "paper", "yref": "paper", "x": 1, "y": 1.02,
                                 "xanchor": "right", "yanchor": "bottom", "showarrow": False,
                                 "font": {"color": "#b22222"}}]


# ----------------------------------------------------------------------------- lineage


def _size(score: float | None, lo: float, hi: float) -> float:
    if score is None:
        return 7.0
    return 9.0 + 19.0 * ((score - lo) / (hi - lo) if hi > lo else 0.5)


def lineage(g: Mapping[str, Any]) -> Figure | None:
    """The lineage graph: nodes colored by status and sized by score, edges by kind, and a point
    on each edge's middle labelled with its move and effect."""
    nodes = g["nodes"]
    if not nodes:
        return None
    at = {n["id"]: n for n in nodes}
    data = [*_edge_lines(g["edges"], at), *_moves(g["edges"], at), *_node_markers(nodes)]
    rows = max(1, int(g["rows"]))
    return {"data": data, "layout": _layout(
        f"Lineage of {g['study'] or 'every candidate'} ({len(nodes)} candidates, score vs {g['baseline']})",
        height=int(min(1600, max(480, 26 * rows + 150))), dragmode="pan",
        margin={"l": 20, "r": 20, "t": 50, "b": 100},
        xaxis={"title": {"text": "generation (depth along the first parent)"}, "zeroline": False, "dtick": 1},
        yaxis={"visible": False, "autorange": "reversed"},
        legend={"orientation": "h", "x": 0, "y": -0.12, "yanchor": "top"})}


def _edge_lines(edges: Sequence[Mapping[str, Any]], at: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One trace of line segments per edge kind that has edges, styled by kind."""
    data = []
    for kind, dash in EDGE_STYLES.items():
        xs: list[float | None] = []
        ys: list[float | None] = []
        for e in edges:
            if e["kind"] == kind:
                p, c = at[e["parent"]], at[e["child"]]
                xs += [p["x"], c["x"], None]
                ys += [p["y"], c["y"], None]
        if xs:
            data.append({"type": "scatter", "mode": "lines", "name": f"{kind} edge", "x": xs, "y": ys,
                         "hoverinfo": "skip", "line": {"color": "#9aa5b1", "width": 1, "dash": dash}})
    return data


def _moves(edges: Sequence[Mapping[str, Any]], at: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A point on each edge's middle with its move and effect (written on the graph up to
    :data:`EDGE_TEXT_MAX` edges, in the hover above); no trace without edges."""
    if not edges:
        return []
    write = len(edges) <= EDGE_TEXT_MAX
    return [{"type": "scatter", "mode": "markers+text" if write else "markers", "name": "moves",
             "x": [(at[e["parent"]]["x"] + at[e["child"]]["x"]) / 2 for e in edges],
             "y": [(at[e["parent"]]["y"] + at[e["child"]]["y"]) / 2 for e in edges],
             "text": [_ratio(e["effect"]) if e["effect"] is not None else "" for e in edges],
             "textposition": "top center", "textfont": {"size": 9, "color": "#52606d"},
             "hovertext": [f"{e['kind']}: {e['move']}<br>effect {_ratio(e['effect'])}"
                           f"<br>{at[e['parent']]['short']} → {at[e['child']]['short']}" for e in edges],
             "hoverinfo": "text", "marker": {"size": 5, "color": "#cbd2d9", "symbol": "diamond"}}]


def _node_markers(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One trace of nodes per status that has any, colored by status and sized by score."""
    scores = [n["score"] for n in nodes if n["score"] is not None]
    lo, hi = (min(scores), max(scores)) if scores else (0.0, 1.0)
    data = []
    for status, color in STATUS_COLORS.items():
        ns = [n for n in nodes if n["status"] == status]
        if not ns:
            continue
        data.append({"type": "scatter", "mode": "markers", "name": status, "meta": "nodes",
                     "x": [n["x"] for n in ns], "y": [n["y"] for n in ns], "customdata": [n["id"] for n in ns],
                     "text": [f"{n['short']} {n['label']}<br>{n['status']} {_ratio(n['score'])}" for n in ns],
                     "hovertemplate": "%{text}<extra></extra>",
                     "marker": {"color": color, "size": [_size(n["score"], lo, hi) for n in ns],
                                "line": {"color": "#333", "width": 0.6}}})
    return data


# ----------------------------------------------------------------------------- failures, insights


def failures(rows: Sequence[Mapping[str, Any]], top: int = 15) -> Figure | None:
    """Failure reasons by count (the largest groups)."""
    shown = list(rows[:top])
    if not shown:
        return None
    labels = [f"{r['status']}: {_cut(r['reason'], 70)}" for r in shown]
    return {"data": [{"type": "bar", "orientation": "h", "name": "failures", "x": [r["count"] for r in shown],
                      "y": labels, "text": [str(r["count"]) for r in shown], "textposition": "auto",
                      "marker": {"color": [STATUS_COLORS.get(r["status"], "#7f7f7f") for r in shown]},
                      "customdata": [r["example"] for r in shown],
                      "hovertemplate": "%{x}<br>e.g. %{customdata}<extra></extra>"}],
            "layout": _layout("Failures by reason", height=max(260, 80 + 28 * len(shown)),
                              yaxis={"autorange": "reversed", "automargin": True},
                              xaxis={"title": {"text": "count"}}, margin={"l": 20, "r": 20, "t": 50, "b": 40})}


def importances(doc: Mapping[str, Any]) -> Figure | None:
    """Optuna's parameter importances, one group of bars per study and family."""
    data: list[dict[str, Any]] = []
    for i, imp in enumerate(doc["importances"]):
        if not imp["values"]:
            continue
        items = sorted(imp["values"].items(), key=lambda kv: kv[1])
        data.append({"type": "bar", "orientation": "h", "name": f"{imp['study']}: {imp['family']} ({imp['trials']} trials)",
                     "x": [v for _, v in items], "y": [f"{imp['study']}: {imp['family']}.{k}" for k, _ in items],
                     "marker": {"color": PALETTE[i % len(PALETTE)]},
                     "hovertemplate": "%{y}: %{x:.3f}<extra></extra>"})
    if not data:
        return None
    bars = sum(len(t["x"]) for t in data)
    return {"data": data, "layout": _layout("Parameter importances (Optuna)", height=max(260, 80 + 24 * bars),
                                            yaxis={"automargin": True}, xaxis={"title": {"text": "importance"}})}


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
