"""Where a trial's candidate came from: the lineage edges the search stores for it.

The evolutionary sampler's proposal names its parents and the move (``mutation`` or
``crossover``). Every other trial's parent is the nearest completed candidate of the same
family in the study (Hamming distance over params, ties to the better one), edge kind
``nearest``. A trial imported from another study (:mod:`evo.search.warmstart`) keeps its
ancestry there: an ``import`` edge from the candidate it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from evo.errors import InvalidCandidate
from evo.family.manifest import Family, Value
from evo.family.space import Candidate, diff, make_candidate
from evo.search.params import CANDIDATE, IMPORTED_FROM, from_trial_params
from evo.search.records import Parent
from evo.search.sampler_evo import fitness, proposal_of


def hamming(a: Candidate, b: Candidate) -> int:
    pb = b.p
    return sum(v != pb.get(k) for k, v in a.params)


def parents(number: int, child: Candidate, trials: Sequence[FrozenTrial],
            families: Mapping[str, Family]) -> list[Parent]:
    """(parent candidate id, mutation, kind) for the edges of trial ``number``'s candidate
    ``child``, read from the study's ``trials``."""
    by_number = {t.number: t for t in trials}
    frozen = by_number.get(number)
    if frozen is not None and IMPORTED_FROM in frozen.user_attrs:
        # its ancestry is its source study's; where today's template renders it differently
        # (a new id), an import edge ties it to the candidate it was (evo.search.warmstart)
        src = frozen.user_attrs[IMPORTED_FROM].get(CANDIDATE)
        return [(src, {}, "import")] if src else []
    prop = proposal_of(frozen, by_number) if frozen is not None else None
    if prop and prop.get("op") in ("mutation", "crossover"):
        return _proposed(prop, child, by_number, families)
    return _nearest(child, trials, families)


def _proposed(prop: Mapping[str, Any], child: Candidate, by_number: Mapping[int, FrozenTrial],
              families: Mapping[str, Family]) -> list[Parent]:
    """The parents an evolutionary proposal names, each with the move to ``child``."""
    out = []
    for n in prop["parents"]:
        parent = by_number.get(n)
        pc = candidate_of(parent, families) if parent is not None else None
        if parent is not None and pc is not None and CANDIDATE in parent.user_attrs:
            out.append((parent.user_attrs[CANDIDATE], mutation(pc, child), prop["op"]))
    return out


def _nearest(child: Candidate, trials: Sequence[FrozenTrial], families: Mapping[str, Family]) -> list[Parent]:
    """The nearest completed candidate of ``child``'s family (ties to the better one), if any."""
    best: tuple[int, float, str, Candidate] | None = None
    for t in trials:
        fit = fitness(t)
        if fit is None or CANDIDATE not in t.user_attrs:
            continue
        pc = candidate_of(t, families)
        if pc is None or pc.family != child.family or pc == child:
            continue
        d = hamming(pc, child)
        if best is None or (d, -fit) < (best[0], -best[1]):
            best = (d, fit, t.user_attrs[CANDIDATE], pc)
    return [] if best is None else [(best[2], mutation(best[3], child), "nearest")]


def candidate_of(t: FrozenTrial, families: Mapping[str, Family]) -> Candidate | None:
    """The candidate a trial drew, when it is a valid point of a family searched."""
    got = from_trial_params(t.params)
    if got is None or got[0] not in families:
        return None
    try:
        return make_candidate(families[got[0]], got[1])
    except InvalidCandidate:
        return None


def mutation(parent: Candidate, child: Candidate) -> dict[str, list[Value]]:
    """The move from ``parent`` to ``child``: each changed gene as [old, new]."""
    return {k: [old, new] for k, (old, new) in diff(parent, child).items()}
