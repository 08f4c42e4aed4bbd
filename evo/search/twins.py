"""A built candidate whose kernels are machine code already timed: answered from that timing, not timed again.

Genes of a head dim a study does not run (a D=96 tile in a study of D=128 cases), and genes that change
nothing at some values of the others, render other sources that compile to the same kernels. In study
spec-l8 (2026-11-29 c, dev/perf-notes.md) 213 screens covered 128 distinct D=128 kernels, and a
candidate whose D=128 code was the incumbent's, timed once more, read 2 % higher and became the study's
new best. Timing the same machine code again measures only the noise (one case moves 1.7 % at the
median, scripts/remeasure_spread.py), and a search that keeps the highest of such draws ranks luck.

So once a candidate is built, the portable digests of the kernels in its cubin
(:func:`evo.toolchain.machine_code.kernel_digests`: code, constants, attributes and shared memory,
without the file's symbol indices; a search builds only the kernels its cases run) are looked up
among the FAST evaluations of the full protocol on the same kind of device. Its *twin* is the
earliest-evaluated other candidate whose recorded digests hold every one of those kernels with the
same code, which launches them alike (its stored parameters through today's manifest: threads,
shared memory, TMA boxes, a persistent grid, a tile counter) and whose stored timings answer the study as a trial answered from the store is answered
(:meth:`Scoring.reuse <evo.search.outcomes.Scoring.reuse>`: timed beside the study's baseline on every
one of its cases). The trial is told the twin's outcome and names the twin as its candidate, where the
timings are; user attr ``evo:built_as`` names the candidate its parameters render to, which stays in
the store as built, with no evaluation (nothing is copied to it). The twin is chosen by time, never by
its reading. Its GREEN margin is told only for the study's head dims: the twin's other kernels are not
the trial's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from evo.errors import InvalidCandidate
from evo.family.manifest import load_family
from evo.family.render import Rendered
from evo.family.space import launch_config, make_candidate
from evo.results import BuildResult, Status
from evo.search.outcomes import Scoring
from evo.search.records import Outcome
from evo.search.storeview import known_outcome
from evo.store import Store, short_id
from evo.toolchain.machine_code import kernel_digests


class Twins:
    """The kernels timed in full on ``device``, by portable digest, read from the store incrementally
    (:meth:`refresh`, which the search calls once a batch, before the batch's twins are looked up)."""

    def __init__(self, store: Store, device: str) -> None:
        self.store, self.device = store, device
        self.after = 0                                    # the newest evaluation read so far
        self.code: dict[str, dict[str, str]] = {}         # candidate -> kernel function -> portable digest
        self.first: dict[str, int] = {}                   # candidate -> its first such evaluation

    def refresh(self) -> None:
        """Read the evaluations stored since the last read (other workers' too)."""
        for eid, cid, digests in self.store.code_digests(self.device, self.after):
            self.code.setdefault(cid, {}).update(digests)
            self.first.setdefault(cid, eid)
            self.after = eid

    def matches(self, digests: Mapping[str, str], exclude: str) -> list[str]:
        """The candidates, earliest evaluated first, whose recorded code holds every kernel of
        ``digests`` with the same digest (``exclude``, the built candidate itself, left out)."""
        return sorted((cid for cid, code in self.code.items()
                       if cid != exclude and all(code.get(fn) == d for fn, d in digests.items())),
                      key=self.first.__getitem__)

    def launched_alike(self, twin: str, rendered: Rendered) -> bool:
        """Whether candidate ``twin``, read from the store and launched as today's manifest launches
        its parameters, launches every entry of ``rendered`` as ``rendered`` does: a gene of the
        launch alone (threads, shared memory, TMA boxes, a persistent grid, a tile counter) leaves
        the machine code as it was and changes what runs."""
        view = self.store.candidate(twin)
        if view is None or view.family != rendered.candidate.family:
            return False
        family = load_family(view.family)
        try:
            cand = make_candidate(family, view.params)
        except InvalidCandidate:   # a value that left the domain since
            return False
        return all(launch_config(family, cand, e.head_dim) == e.launch for e in rendered.entries)

    def answer(self, cid: str, build: BuildResult, rendered: Rendered | None, scoring: Scoring) -> Outcome | None:
        """The outcome of ``cid``'s trial (its build and rendering) from its twin's timings, or None
        when it has none (no cubin, no machine code to digest: a Triton module; or no twin, among the
        evaluations read by the last :meth:`refresh`, that answers the study)."""
        if rendered is None or not build.cubin_path or not Path(build.cubin_path).is_file():
            return None
        digests = kernel_digests(Path(build.cubin_path), portable=True)
        if not digests:
            return None
        dims = {s.D for s in scoring.cases}
        for twin in self.matches(digests, cid):
            if not self.launched_alike(twin, rendered):
                continue
            done = scoring.reuse(known_outcome(self.store, twin, self.device))
            if done is not None and done.status == Status.FAST.value:
                shares = {d: v for d, v in (done.shares or {}).items() if d in dims} or None
                return replace(done, shares=shares, built_as=cid,
                               reason=f"its kernels compile to the machine code of {short_id(twin)}, timed "
                                      "before: answered from that candidate's timings")
        return None

