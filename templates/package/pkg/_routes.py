"""The dispatch rule in Python: which route of ``dispatch.json`` serves a problem, or why none does.

A package serves only what promote checked. A route is a key (head dim, dtype, causal) and a
bucket ``min_len..max_len`` of the *longer* of the query and key lengths; it serves a problem when

- max(Lq, Lk) lies in its bucket (so Lq and Lk are both at most ``max_len``);
- B * Hq is at most ``max_bh`` and Hq / Hkv at most ``max_group``;
- when Lq != Lk: the route serves uneven lengths (``cross``) and, for a causal mask, its alignment
  is one of the route's ``aligns``;

and its kernel is not None (None: no kernel beat SDPA there). A decode route (``max_lq`` set: promote
planned it on the decode cases, a few query rows against a long cache) serves only problems of at
most ``max_lq`` query rows; a key's decode routes are tried before its other routes, so a decode
problem goes to the decode route of its bucket when there is one, and to the other routes otherwise.
A chunk route (``chunk``: promote planned it on query chunks on longer caches, chunked prefill and
cross-attention) serves at most ``max_lq`` query rows and max(Lq, Lk) from ``min_len``, above
``max_lq``, so only problems with fewer queries than keys; chunk routes are tried after the decode
routes and before the others, and a problem outside every chunk route falls through to the others.
A layout route (``layout`` ``lens`` or ``paged``: promote planned it on decode cases with per-sequence
lengths, or in pages) serves only calls with ``seqlens=`` (``block_table=`` too for ``paged``), through
its kernel's ``_lens`` / ``_paged`` entry, bucketed by the capacity (Lk: the cache's length, a paged
one's pages_per_seq x page_size), each sequence's causal mask at its own bottom right; such a call
takes no other route. Each limit is what promote ran the
route's kernel on before it wrote the package (the bucket's edges and ragged lengths, with the other
length drawn shorter both ways, grouped heads, both corners of a causal mask, the many-heads checks
with one key/value head per query head and one per batch). Past it, SDPA serves the call.

The C++ launcher (``csrc/launcher.cpp``, ``pick``) applies the same rule on every call; this copy
is what ``explain()`` reports, and what the CPU tests check against the shipped table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

Route = Mapping[str, Any]


class Problem(NamedTuple):
    """One attention call: q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D), the causal mode and, when
    causal, where the mask is aligned."""

    B: int
    Hq: int
    Hkv: int
    Lq: int
    Lk: int
    D: int
    dtype: str
    causal: bool
    align: str = "top_left"
    layout: str = "contiguous"     # "lens": a call with seqlens (Lk its capacity); "paged": with block_table too

    @property
    def length(self) -> int:
        """What a route's bucket is of: the longer of the two lengths."""
        return max(self.Lq, self.Lk)

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.Hq // self.Hkv


def key_text(route: Route) -> str:
    """``D=64 fp16 causal``: a route's key."""
    return f"D={route['head_dim']} {route['dtype']} {'causal' if route['causal'] else 'full'}"


def is_decode(route: Route) -> bool:
    """Whether ``route`` is a decode route (serving at most ``max_lq`` query rows)."""
    return bool(route.get("max_lq")) and not route.get("chunk")


def is_chunk(route: Route) -> bool:
    """Whether ``route`` is a chunk route (at most ``max_lq`` query rows on caches from ``min_len``)."""
    return bool(route.get("chunk"))


def layout_of(route: Route) -> str:
    """The calls ``route`` serves: ``contiguous`` (no seqlens), ``lens`` or ``paged``."""
    return str(route.get("layout") or "contiguous")


def limits(route: Route) -> str:
    """What a route serves, in words: its query rows (a decode route), its bucket of max(Lq, Lk),
    heads, group and uneven lengths (a layout route: where each sequence's causal mask is)."""
    rows = f"Lq <= {route['max_lq']}, " if route.get("max_lq") else ""
    text = (f"{rows}max(Lq, Lk) {route['min_len']}..{route['max_len']}, B*Hq <= {route['max_bh']}, "
            f"Hq/Hkv <= {route.get('max_group', 1)}")
    if layout_of(route) != "contiguous":
        return text + (", each sequence's causal mask at its bottom right" if route["causal"] else "")
    if not route.get("cross"):
        return text + ", Lq == Lk only"
    aligns = route.get("aligns") or []
    if route["causal"]:
        corners = " and ".join(a.replace("_", "-") for a in aligns) or "no"
        return text + f", Lq != Lk with the causal mask at the {corners} corner{'s' if len(aligns) > 1 else ''}"
    return text + ", Lq != Lk"


def _kind(route: Route) -> str:
    """``route``, ``decode route``, ``chunk route``, ``lens route`` or ``paged route``."""
    layout = layout_of(route)
    if layout != "contiguous":
        return f"{layout} route"
    return "decode route" if is_decode(route) else "chunk route" if is_chunk(route) else "route"


def served(route: Route) -> str:
    """Why ``route``'s kernel serves a problem, in words (explain() says it): the entry that runs (a
    layout route's: the kernel's ``_lens`` / ``_paged`` entry) and what the route serves."""
    layout = layout_of(route)
    entry = route["entry"] + ("" if layout == "contiguous" else f"_{layout}")
    return (f"kernel {entry} of candidate {route['candidate'][:12]} (its {_kind(route)} {key_text(route)} "
            f"serves {limits(route)}: what promote verified it on)")


def ordered(routes: Sequence[Route]) -> list[Route]:
    """The routes in the order the dispatch tries them: decode routes first, then chunk routes, then
    the others, each by increasing ``max_len`` (the C++ launcher takes them in this order)."""
    return sorted(routes, key=lambda r: (not is_decode(r), not is_chunk(r), r["max_len"]))


def route_for(routes: Sequence[Route], p: Problem) -> tuple[Route | None, str]:
    """The route that serves ``p`` and "", or None and why SDPA serves it (one clause): the first of
    its key's routes of its layout (in :func:`ordered` order) whose query rows and bucket take it."""
    key = f"D={p.D} {p.dtype} {'causal' if p.causal else 'full'}"
    mine = [r for r in ordered(routes) if (r["head_dim"], r["dtype"], bool(r["causal"])) == (p.D, p.dtype, p.causal)
            and layout_of(r) == p.layout]
    if not mine:
        which = "kernel" if p.layout == "contiguous" else f"{p.layout} route"
        return None, f"no {which} was promoted for {key}"
    fits = [r for r in mine if not r.get("max_lq") or p.Lq <= r["max_lq"]]
    if not fits:
        kind = "decode" if p.layout == "contiguous" else p.layout
        return None, (f"Lq={p.Lq} is past {max(r['max_lq'] for r in mine)}, the most query rows of the {kind} "
                      f"routes promoted for {key} (and it has no other route)")
    route = next((r for r in fits if r.get("min_len", 1) <= p.length <= r["max_len"]), None)
    if route is None:
        top = max(r["max_len"] for r in fits)
        if p.length > top:
            return None, f"max(Lq, Lk)={p.length} is past {top}, the longest length promote verified for {key}"
        return None, (f"Lq={p.Lq} on Lk={p.Lk} is in none of the routes promoted for {key}: its chunk routes "
                      f"serve query chunks on longer caches only, and it has no other route there")
    return (None, why) if (why := _outside(route, p, _where(route))) else (route, "")


def _where(route: Route) -> str:
    """``the route D=64 fp16 full max(Lq, Lk) 1..256`` (a decode, chunk or layout route: with its query rows)."""
    if route.get("max_lq"):
        return (f"the {_kind(route)} {key_text(route)} Lq <= {route['max_lq']}, "
                f"max(Lq, Lk) {route['min_len']}..{route['max_len']}")
    return f"the route {key_text(route)} max(Lq, Lk) {route['min_len']}..{route['max_len']}"


def _outside(route: Route, p: Problem, where: str) -> str:
    """Why ``p``, in ``route``'s bucket, is past one of its other limits ("" when it is not)."""
    if route["kernel"] is None:
        return f"no kernel beat SDPA in {where} when the package was promoted"
    if p.B * p.Hq > route["max_bh"]:
        return f"B*Hq={p.B * p.Hq} is past {route['max_bh']}, the most heads promote verified in {where}"
    if p.group > route.get("max_group", 1):
        return (f"Hq/Hkv={p.group} is past {route.get('max_group', 1)}, the most query heads per key/value "
                f"head promote verified in {where}")
    if p.Lq != p.Lk and not route.get("cross"):
        return f"Lq={p.Lq} != Lk={p.Lk}: promote verified {where} on equal lengths only"
    if p.Lq != p.Lk and p.causal and p.align not in (route.get("aligns") or []):
        return (f"a causal mask at the {p.align.replace('_', '-')} corner with Lq != Lk, which promote did "
                f"not verify in {where}")
    return ""
