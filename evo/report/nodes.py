"""The lineage graph as the report draws it: nodes placed by :mod:`evo.report.graph`, edges
with their move and measured effect, and what selecting a node shows (its stored record).

A node's details are its ``evo show --json`` document, slimmed for the page: the latest
timings only, grouped per case (no raw samples), numbers to 6 significant digits; plus its
CUDA source. Sources are long and nearly alike (one template, different traits), so the page
stores every distinct line once and each source as a list of line numbers.
"""

from __future__ import annotations

from typing import Any

from evo.toolchain.build import SOURCE, cache_dir
from evo.errors import EvoError
from evo.analysis.candidate import describe
from evo.analysis.jsondoc import clean
from evo.analysis.lineage import Lineage, mutation_text
from evo.report.graph import layout
from evo.results import Status
from evo.vocab import EVO
from evo.store import Store, short_id
from evo.store.views import CandidateView




class LineTable:
    """Distinct source lines, each stored once; a text becomes a list of indices into them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, text: str) -> list[int]:
        out = []
        for line in text.split("\n"):
            i = self._index.get(line)
            if i is None:
                i = self._index[line] = len(self.lines)
                self.lines.append(line)
            out.append(i)
        return out


def source_of(c: CandidateView) -> tuple[str | None, str]:
    """The candidate's CUDA source and where it came from, or None and why there is none."""
    cached = cache_dir(c.id) / SOURCE
    if cached.is_file():
        return cached.read_text(), "from the build cache"
    if c.status is Status.INVALID:
        return None, "invalid: never rendered"
    try:
        rendered = c.rendered()
    except EvoError as exc:
        return None, f"cannot render it today: {exc}"
    if rendered.source_hash != c.source_hash:
        return None, (f"not in the build cache, and today's {c.family} templates render it differently "
                      f"(hash {rendered.source_hash[:12]}, stored {(c.source_hash or '?')[:12]})")
    return rendered.source, "rendered again from today's templates (same source hash as stored)"


def details(store: Store, cid: str, baseline: str, lines: LineTable) -> dict[str, Any]:
    """What the panel shows for one node: its record (no raw samples; build logs only of
    failed compiles) and its source as line numbers into ``lines``."""
    rec = store.get(cid)
    doc = describe(store, rec, baseline).document(samples=False)
    for b in doc["builds"]:  # a log says why a compile failed, or where a build without a report came from
        if b["status"] != Status.COMPILE_FAILED.value and b["resources"]:
            b.pop("log", None)
    for e in doc["evaluations"]:  # the panel shows the latest timings (doc["timings"]), not each pass's
        e["timed"] = len(e.pop("timings"))
    doc["cases"] = case_rows(doc.pop("timings"))
    del doc["speedups"]  # the page divides the medians itself
    text, note = source_of(rec.candidate)
    doc["source"] = None if text is None else lines.add(text)
    doc["source_note"] = note
    return rounded(doc)


def case_rows(timings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Timings per case: the shape, evo's TFLOP/s, and ``us: {backend: [median, p20, p80]}``."""
    rows: dict[str, dict[str, Any]] = {}
    for t in timings:
        row = rows.setdefault(t["tag"], {k: t[k] for k in ("tag", "B", "H", "L", "D")} | {"us": {}, "flagged": ""})
        row["us"][t["backend"]] = [t["median_us"], t["p20_us"], t["p80_us"]]
        if t["backend"] == EVO:
            row["tflops"], row["flagged"] = t["tflops"], t["flagged"]
    return [r for r in rows.values() if EVO in r["us"]]


def rounded(x: Any) -> Any:
    """``x`` with floats cut to 6 significant digits (the page shows 2-3; the database keeps all)."""
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def graph(store: Store, lin: Lineage) -> dict[str, Any]:
    """Nodes with positions and scores, edges with their move and effect, details and lines."""
    pos = layout(lin)
    lines = LineTable()
    nodes = [{"id": n.id, "short": short_id(n.id), "label": n.label, "family": n.family, "status": n.status.value,
              "reason": n.reason, "score": n.score, "device": n.device, "x": pos.x[n.id], "y": pos.y[n.id]}
             for n in lin.nodes.values()]
    edges = [{"parent": link.parent, "child": link.child, "kind": link.kind, "move": mutation_text(link.mutation),
              "mutation": {k: list(v) for k, v in link.mutation.items()}, "effect": link.effect,
              "primary": pos.primary.get(link.child) == link.parent}
             for link in lin.links if link.parent in lin.nodes and link.child in lin.nodes]
    info = {n.id: details(store, n.id, lin.baseline, lines) for n in lin.nodes.values()}
    return clean({"study": lin.study, "baseline": lin.baseline, "rows": pos.rows, "nodes": nodes, "edges": edges,
                  "details": info, "lines": lines.lines})
