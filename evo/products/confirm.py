"""Promote's speed confirmation (``evo promote --confirm``): route to a kernel only on a win
measured beside SDPA.

A search times each candidate alone against SDPA baselines its worker measured earlier
(:mod:`evo.gpu.evaluate`), which is cheap enough to rank thousands of candidates by, but not the
protocol `evo bench` quotes: there every SDPA backend is interleaved with the candidate, round by
round. On the H200 the two disagree by 2-4 % on the long non-causal cases, in the search's
favour, in every package benchmarked so far (dev/perf-notes.md, 2026-11-26): enough to route a
bucket to a kernel that loses to SDPA in the package (F4c at x1.02 in the database, x0.97 in
the package). With confirmation, each bucket winner is timed again on the bucket's FAST cases,
interleaved (:func:`evo.products.verify.confirm_speed`), the evaluation is stored (so later promotions
and reports read the interleaved numbers: they are the newest), and the table is planned again
from them. A bucket whose winner loses its lead goes to the next contender, which is confirmed
in turn, or to SDPA. After :data:`ROUNDS` rounds, the FAST cases still served by an unconfirmed
winner keep only confirmed measurements, so no bucket is routed on a search-time number alone.

Each confirmation is stored as soon as it is measured, marked :data:`CONFIRMED` (the baseline it
was timed beside) and with the board it ran on (the GPU's UUID), and a (winner, case) whose newest
evaluation on this GPU kind is such a confirmation from a board of this host is not timed again
(:func:`stored`): a promote killed mid-way (an H100's call limit ended one after 6 of its minutes
of confirmation, 2026-11-28) resumes where it stopped, and a later promote on the same machine
confirms only what is new. A confirmation from another machine of the same kind is timed again, so
that the routes and the provenance are this machine's numbers: one kernel's speedup over SDPA moved
7 % between two H200 machines with its code byte for byte the same (a tail reading; the median move
is 1.8 % across sessions: dev/perf-notes.md, 2026-11-29 w and c), more than many routes are won by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo.family.render import Entry
from evo.products.routes import Contender, Measured, Route, Shipped, measurements
from evo.results import Evaluation, Shape, Timing

ROUNDS = 4
CONFIRMED = "confirmed_beside"   # device info of a stored confirmation: the baseline it was timed beside
Todo = tuple[str, Path, list[Entry], list[Shape]]
Recalled = dict[Shape, list[float | None]]   # per FAST case: [the speedup before it, the confirmed one]


def stored(store: Any, cid: str, device: str, baseline: str, boards: Collection[str]) -> Recalled:
    """The FAST cases of ``cid`` whose newest evaluation on ``device`` is a confirmation beside
    ``baseline`` measured on one of ``boards`` (this host's GPUs: :func:`evo.toolchain.smi.boards`),
    each with the speedup of the newest evaluation before it that was not a confirmation (None if
    none) and the confirmed speedup. A confirmation from another board is not one here."""
    newest: dict[Shape, tuple[bool, Measured]] = {}
    before: dict[Shape, Measured] = {}
    for ev in store.evaluations(cid, device):           # oldest first
        marked = ev.device_info.get(CONFIRMED) == baseline
        confirmed = marked and ev.device_info.get("gpu_uuid") in boards   # stored as smi.board() writes it
        if marked and not confirmed:                    # another machine's: neither recalled nor "before"
            continue
        for m in measurements(ev.timings, baseline):
            if not confirmed:
                before[m.shape] = m
            newest[m.shape] = (confirmed, m)
    return {shape: [before[shape].speedup if shape in before else None, m.speedup]
            for shape, (confirmed, m) in newest.items() if confirmed}


@dataclass
class Confirmation:
    """Which (candidate, FAST case) pairs were timed beside SDPA, with the speedup the database
    held and the one measured interleaved."""

    rounds: int = 0
    done: set[tuple[str, Shape]] = field(default_factory=set)
    speedups: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    recall: Callable[[str], Recalled] | None = None   # a candidate's confirmations stored earlier (:func:`stored`)
    recalled: set[str] = field(default_factory=set)

    def todo(self, routes: Sequence[Route], shipped: Sequence[Shipped]) -> list[Todo]:
        """Each winner with the FAST cases of its buckets not yet timed beside SDPA, in this
        promotion or (``recall``) an earlier one."""
        by_id = {s.view.id: s for s in shipped}
        need: dict[str, list[Shape]] = {}
        for r in routes:
            if r.winner is not None:
                self._recall(r.winner)
                need.setdefault(r.winner, []).extend(s for s in r.shapes if (r.winner, s) not in self.done)
        return [(cid, by_id[cid].cubin, list(by_id[cid].entries.values()), shapes)
                for cid, shapes in need.items() if shapes]

    def _recall(self, cid: str) -> None:
        """Count ``cid``'s stored confirmations as done, once per candidate."""
        if self.recall is None or cid in self.recalled:
            return
        self.recalled.add(cid)
        for shape, pair in self.recall(cid).items():
            self.done.add((cid, shape))
            self.speedups.setdefault(cid, {})[shape.tag] = pair

    def take(self, contenders: Sequence[Contender], todo: Sequence[Todo], evaluations: Sequence[Evaluation],
             fresh: Callable[[Sequence[Timing]], Sequence[Measured]]) -> list[Contender]:
        """The contenders with each confirmed case's measurement replaced by the interleaved one
        (``fresh(timings)`` gives its Measured; a case it lacks is dropped, not kept at the
        database's number), and a case of its buckets the database never had for it added: at
        2026-11-28q such a number (L3's winner on F7c, 0.95x SDPA) was measured and then lost, and
        the plan went on reading that winner's bucket as L3 alone."""
        self.rounds += 1
        asked = {cid: set(shapes) for cid, _, _, shapes in todo}
        got = {ev.build_id: {m.shape: m for m in fresh(ev.timings)} for ev in evaluations}
        out = []
        for c in contenders:
            cid = c.view.id
            if cid not in asked:
                out.append(c)
                continue
            before = {m.shape: m for m in c.cases}
            for s in asked[cid]:
                self.done.add((cid, s))
                now = got.get(cid, {}).get(s)
                self.speedups.setdefault(cid, {})[s.tag] = [
                    before[s].speedup if s in before else None, now.speedup if now else None]
            mine = got.get(cid, {})
            kept = [mine.get(m.shape) if m.shape in asked[cid] else m for m in c.cases]
            kept += [mine[s] for s in sorted(asked[cid] - before.keys(), key=lambda x: x.tag) if s in mine]
            out.append(dataclasses.replace(c, cases=tuple(m for m in kept if m is not None)))
        return out

    def only_confirmed(self, contenders: Sequence[Contender], routes: Sequence[Route]) -> list[Contender]:
        """After the last round: on every FAST case an unconfirmed winner still serves, only the
        confirmed measurements stay."""
        open_ = {s for r in routes if r.winner is not None for s in r.shapes if (r.winner, s) not in self.done}
        return [dataclasses.replace(c, cases=tuple(m for m in c.cases
                                                   if m.shape not in open_ or (c.view.id, m.shape) in self.done))
                for c in contenders]

    def as_dict(self) -> dict[str, Any]:
        return {"interleaved": True, "rounds": self.rounds, "speedups": self.speedups}
