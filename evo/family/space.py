"""Candidates: one family plus one point of its parameter space, validated before anything else.

``make_candidate`` fills defaults, checks every value against its domain and every manifest
constraint, and raises :class:`InvalidCandidate` naming the parameter and what is allowed.
``launch_config`` evaluates the family's launch formulas for a head dim; ``all_candidates``
lists a small space's valid points and ``sample_valid`` draws from a large one;
``random_candidates`` and ``mutations`` give valid points for batch builds and for the
evolutionary sampler, and
``switch`` moves a candidate to a successor family, keeping the genes the two share.
``pinned`` holds some genes of a family at one value each (a sub-space: ``evo run --pin``,
``evo bench-samplers --pin``), and ``parse_pins`` reads those options.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from evo.errors import EvoError, InvalidCandidate
from evo.family.expr import evaluate, names_in
from evo.family import splitkv
from evo.family.manifest import SPLIT_FORMULAS, SPLIT_OPTIONAL, Family, Value, load_family
from evo.family.splitkv import WORKSPACE_ALIGN as WORKSPACE_ALIGN  # re-exported: the workspace's padding
from evo.family.splitkv import SplitConfig, SplitPlan
from evo.vocab import assignment_text, value_text


@dataclass(frozen=True)
class Candidate:
    """A family name and a full, ordered parameter assignment (hashable, canonical)."""

    family: str
    params: tuple[tuple[str, Value], ...]

    @property
    def p(self) -> dict[str, Value]:
        return dict(self.params)

    def key(self, omit: Collection[str] = ()) -> str:
        """Canonical JSON of family + params (stable across runs and processes), without the
        genes named in ``omit`` (the rendered header's: :func:`evo.family.render.render`)."""
        return json.dumps({"family": self.family, "params": {k: v for k, v in self.params if k not in omit}},
                          sort_keys=True)

    def label(self) -> str:
        return self.family + "(" + ", ".join(f"{k}={value_text(v)}" for k, v in self.params) + ")"


TMA_TENSORS = ("q", "k", "v", "o")


def split_plan(split: SplitConfig, rows_per_cta: int, B: int, Hq: int, Hkv: int, Lq: int, Lk: int,
               sms: int, ragged: bool = False) -> SplitPlan:
    """The split-KV launch of one problem on a GPU of ``sms`` SMs (docs/kernel-abi.md), ``ragged``
    for a lens or paged cache of capacity ``Lk``, as :func:`evo.family.splitkv.plan` computes it
    (the one spelling, which promoted packages copy), after refusing a problem it has no plan for."""
    if min(B, Hq, Hkv, Lq, Lk, sms) < 1 or Hq % Hkv:
        raise EvoError(f"no split-KV plan for B={B} Hq={Hq} Hkv={Hkv} Lq={Lq} Lk={Lk} on {sms} SMs")
    return splitkv.plan(split, rows_per_cta, B, Hq, Hkv, Lq, Lk, sms, ragged)


@dataclass(frozen=True)
class LaunchConfig:
    """How to launch one kernel entry of a candidate for head dim ``D``.

    ``abi`` is ``"ptr"`` (pointers and sizes only), ``"tma"`` (four 3-D tensor maps first, see
    docs/kernel-abi.md; ``tma_rows`` are then the box rows of the q, k, v and o tensor maps) or
    ``"split_kv"`` (a workspace pointer and the split length last; ``split`` says how the keys are
    split, :func:`split_plan`). A ``persistent`` kernel gets one CTA per SM (at most one per tile)
    and walks the tiles. ``layouts`` names the cache layouts (``lens``, ``paged``) a split-KV entry
    also exports, each as its own kernel ``NAME_LAYOUT`` (docs/kernel-abi.md, "Ragged and paged caches").
    A ``tile_counter`` entry (abi ``"tma"`` only) takes one more argument after ``scale``, a zeroed
    device word the host keeps per stream, from which the kernel takes its tiles dynamically
    (docs/kernel-abi.md, "The TMA variant").
    """

    threads: int
    rows_per_cta: int
    smem_bytes: int
    abi: str = "ptr"
    tma_rows: tuple[int, ...] = ()
    persistent: bool = False
    split: SplitConfig | None = None      # abi "split_kv" only (left out of the build key when None)
    layouts: tuple[str, ...] = ()         # cache layouts also exported, as NAME_lens, NAME_paged (split_kv only;
    # left out of the build key when empty)
    tile_counter: bool = False            # abi "tma" only (left out of the build key when False)

    def grid(self, B: int, H: int, L: int, sms: int = 0) -> tuple[int, int, int]:
        """Grid of the forward kernel: (query tiles, batch*heads, 1), or (min(tiles, sms), 1, 1)."""
        m_tiles = (L + self.rows_per_cta - 1) // self.rows_per_cta
        if self.persistent:
            if sms < 1:
                raise EvoError("a persistent kernel's grid needs the device's SM count")
            return (min(m_tiles * B * H, sms), 1, 1)
        return (m_tiles, B * H, 1)


def violations(family: Family, params: Mapping[str, Value]) -> list[str]:
    """All reasons ``params`` is not a valid point of ``family`` (empty when valid)."""
    problems = []
    for name in params:
        if name not in family.params:
            problems.append(f"unknown parameter {name!r} for family {family.name}; "
                            f"parameters: {', '.join(family.params)}")
    for name, spec in family.params.items():
        if name not in params:
            problems.append(f"parameter {name} is missing")
        elif params[name] not in spec.values or type(params[name]) is not type(spec.default):
            problems.append(f"parameter {name}={value_text(params[name])} is not allowed; "
                            f"allowed: {spec.allowed()}")
    return problems or _constraint_violations(family, params)


def _constraint_violations(family: Family, params: Mapping[str, Value]) -> list[str]:
    """The manifest constraints ``params`` (a point of the domains) breaks."""
    problems = []
    for c in family.constraints:
        if not evaluate(c.expr, params):
            shown = ", ".join(f"{k}={value_text(v)}" for k, v in params.items() if k in c.expr)
            problems.append(f"constraint violated: {c.message} ({c.expr}; got {shown})")
    return problems


def make_candidate(family: Family | str, params: Mapping[str, Value] | None = None) -> Candidate:
    """Validate ``params`` (defaults fill the rest) and return the canonical Candidate."""
    fam = load_family(family) if isinstance(family, str) else family
    full = fam.defaults() | dict(params or {})
    problems = violations(fam, full)
    if problems:
        raise InvalidCandidate(f"{fam.name}: " + "; ".join(problems))
    return Candidate(fam.name, tuple((n, full[n]) for n in fam.params))


def parse_assignments(family: Family, items: list[str]) -> dict[str, Value]:
    """Parse CLI ``KEY=VALUE`` strings against the family's domains."""
    out: dict[str, Value] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise EvoError(f"expected KEY=VALUE, got {item!r}")
        if key not in family.params:
            raise EvoError(f"unknown parameter {key!r} for family {family.name}; "
                           f"parameters: {', '.join(family.params)}")
        out[key] = family.params[key].parse(text)
    return out


def launch_config(family: Family, cand: Candidate, head_dim: int) -> LaunchConfig:
    """Evaluate the manifest's ``[launch]`` formulas for ``cand`` at head dim ``head_dim``."""
    names = cand.p | {"D": head_dim}
    launch = family.launch
    sizes = {k: int(evaluate(launch[k], names)) for k in ("threads", "rows_per_cta", "smem_bytes")}
    abi = str(launch.get("abi", "ptr"))
    rows: tuple[int, ...] = ()
    if abi == "tma":
        boxes = launch["tma_rows"]
        rows = tuple(int(evaluate(str(boxes[t]), names)) for t in TMA_TENSORS)
    persistent = bool(evaluate(str(launch.get("persistent", "False")), names))
    split = None
    if abi == "split_kv":
        formulas = {k: launch[k] for k in SPLIT_FORMULAS} | {k: launch.get(k, v) for k, v in SPLIT_OPTIONAL.items()}
        split = SplitConfig(**{k: int(evaluate(str(f), names)) for k, f in formulas.items()})
    layouts = tuple(str(x) for x in launch.get("layouts", ()))
    tile_counter = bool(evaluate(str(launch.get("tile_counter", "False")), names))
    return LaunchConfig(**sizes, abi=abi, tma_rows=rows, persistent=persistent, split=split, layouts=layouts,
                        tile_counter=tile_counter)


def is_valid(family: Family, params: Mapping[str, Value]) -> bool:
    return not violations(family, params)


_VALID: dict[tuple[str, int, str, str], tuple[Candidate, ...]] = {}


def all_candidates(family: Family) -> Iterator[Candidate]:
    """Every valid point of the family, in manifest order (that of ``itertools.product`` over
    the parameters' values). Enumerated once per process and family version, then served from
    memory (keyed by the domains too: a :func:`pinned` family is listed apart)."""
    key = (str(family.path), family.version, json.dumps([c.expr for c in family.constraints]),
           json.dumps([[n, spec.values] for n, spec in family.params.items()]))
    if key not in _VALID:
        _VALID[key] = tuple(_valid_points(family))
    yield from _VALID[key]


def _valid_points(family: Family) -> list[Candidate]:
    """Depth-first over the parameters in manifest order; each constraint is checked once its
    last parameter is bound, so a broken one prunes the whole subtree under it. (Checking every
    constraint on every full combination took 64 s for flash_wgmma's 4.5 million combinations;
    this lists its 9 million in about 30 s. Searches no longer list it at all: LIST_UP_TO.)"""
    names = list(family.params)
    position = {n: i for i, n in enumerate(names)}
    checks: list[list[str]] = [[] for _ in names]      # constraints whose last parameter is names[i]
    constant: list[str] = []                           # constraints that read no parameter
    for c in family.constraints:
        read = [position[n] for n in names_in(c.expr) if n in position]
        (checks[max(read)] if read else constant).append(c.expr)
    bound: dict[str, Value] = {}
    out: list[Candidate] = []

    def walk(depth: int) -> None:                      # appends, not yields: 16 nested generators cost more than the checks
        if depth == len(names):
            out.append(Candidate(family.name, tuple(bound.items())))
            return
        name = names[depth]
        for value in family.params[name].values:
            bound[name] = value
            if all(evaluate(expr, bound) for expr in checks[depth]):
                walk(depth + 1)
        del bound[name]

    if all(evaluate(expr, {}) for expr in constant):
        walk(0)
    return out


# Above this many combinations of values a family's valid set is never listed: it is sampled
# (flash_wgmma has 9 million combinations and 1.9 million valid points; listing them took a
# minute of the GPU host's time at every search start, and twice that with one gene more).
LIST_UP_TO = 250_000
SAMPLE_TRIES = 20_000


def combinations(family: Family) -> int:
    """How many points the parameters' domains span, valid or not."""
    return math.prod(len(spec.values) for spec in family.params.values())


def listable(family: Family) -> bool:
    """Whether the valid set is small enough to list (:func:`all_candidates`) rather than sample."""
    return combinations(family) <= LIST_UP_TO


def sample_valid(family: Family, rng: random.Random, accept: Callable[[Candidate], bool] = lambda c: True,
                 fixed: Mapping[str, Value] | None = None) -> Candidate | None:
    """A valid point drawn uniformly (among those ``accept`` takes, with the ``fixed`` values),
    by drawing uniform combinations until one is valid and accepted; None after
    ``SAMPLE_TRIES`` draws. Meant for spaces too large to list, where valid points are common."""
    fixed = dict(fixed or {})
    names = list(family.params)
    for _ in range(SAMPLE_TRIES):
        params = {n: fixed[n] if n in fixed else rng.choice(family.params[n].values) for n in names}
        if all(evaluate(c.expr, params) for c in family.constraints):   # no messages for the rejected draws
            cand = Candidate(family.name, tuple(params.items()))
            if accept(cand):
                return cand
    return None


def random_candidates(family: Family, n: int, rng: random.Random,
                      fixed: Mapping[str, Value] | None = None) -> list[Candidate]:
    """``n`` distinct valid points (with the ``fixed`` values) drawn uniformly from the valid
    set, fewer if it is smaller: listed and shuffled where the space is listable, else sampled."""
    fixed = dict(fixed or {})
    if listable(family):
        pool = [c for c in all_candidates(family) if all(c.p[k] == v for k, v in fixed.items())]
        rng.shuffle(pool)
        return pool[:n]
    out: dict[Candidate, None] = {}
    while len(out) < n and (c := sample_valid(family, rng, lambda c: c not in out, fixed)) is not None:
        out[c] = None
    return list(out)


def mutations(family: Family, cand: Candidate, genes: int = 1) -> list[tuple[Candidate, dict[str, tuple[Value, Value]]]]:
    """Valid neighbours that change exactly ``genes`` parameters, each with its mutation record
    ``{param: (old, new)}``."""
    base = cand.p
    out = []
    for names in itertools.combinations(family.params, genes):
        choices = [[v for v in family.params[n].values if v != base[n]] for n in names]
        for combo in itertools.product(*choices):
            params = base | dict(zip(names, combo, strict=True))
            if is_valid(family, params):
                out.append((Candidate(family.name, tuple(params.items())),
                            {n: (base[n], params[n]) for n in names}))
    return out


def switch(cand: Candidate, target: Family) -> Candidate:
    """``cand`` moved to the family ``target`` (a successor in its manifest): the genes both
    families have keep their values where ``target`` allows them, the rest take ``target``'s
    defaults; if that point breaks a constraint of ``target``, its defaults alone."""
    kept = {n: v for n, v in cand.params if n in target.params and v in target.params[n].values
            and type(v) is type(target.params[n].default)}
    try:
        return make_candidate(target, kept)
    except InvalidCandidate:
        return make_candidate(target)


def diff(a: Candidate, b: Candidate) -> dict[str, tuple[Value, Value]]:
    """The mutation that turns ``a`` into ``b`` (same family), as ``{param: (old, new)}``."""
    if a.family != b.family:
        return {"family": (a.family, b.family)}
    pa, pb = a.p, b.p
    return {k: (pa[k], pb[k]) for k in pa if pa[k] != pb[k]}


Pins = dict[str, dict[str, Value]]  # family name -> gene -> the one value it is held at


def pinned(family: Family, pins: Mapping[str, Value]) -> Family:
    """``family`` with each gene of ``pins`` held at its one value: the gene's domain becomes that
    value alone, and its default that value, so everything that walks the space (listing,
    :func:`combinations`, :func:`listable`, sampling, mutations, the samplers) sees only the
    sub-space. Name, version, template and constraints are the family's, so a point of the
    sub-space is the same candidate (same params, key and build id). EvoError, one line, for an
    unknown gene, a value outside the gene's domain, or pins under which the defaults break a
    constraint (every search and benchmark may start from the defaults: pin other genes too)."""
    if not pins:
        return family
    params = dict(family.params)
    for name, value in pins.items():
        spec = params.get(name)
        if spec is None:
            raise EvoError(f"cannot pin {name} of {family.name}: no such parameter; parameters: "
                           f"{', '.join(family.params)}")
        if value not in spec.values or type(value) is not type(spec.default):
            raise EvoError(f"cannot pin {family.name}.{assignment_text(name, value)}: "
                           f"allowed: {spec.allowed()}")
        params[name] = replace(spec, values=(value,), default=value)
    sub = replace(family, params=params)
    broken = _constraint_violations(sub, sub.defaults())
    if broken:
        raise EvoError(f"{family.name} pinned at {pins_text({family.name: dict(pins)})}: its defaults "
                       f"break a constraint ({broken[0]}); pin the genes it reads too")
    return sub


def parse_pins(items: Sequence[str], families: Sequence[Family] | None = None) -> Pins:
    """``GENE=VALUE`` and ``FAMILY.GENE=VALUE`` texts (``--pin``) as pins per family, each value
    checked against the gene's domain. ``families`` are those in view (default: the families the
    qualified pins name): a qualified pin must name one of them, an unqualified ``GENE`` must be
    a gene of exactly one of them. EvoError, one line, for anything else, or for one gene pinned
    twice to different values."""
    split = [(item, *item.partition("=")) for item in items]
    if families is None:
        named = dict.fromkeys(key.strip().rpartition(".")[0] for _, key, _, _ in split)
        families = [load_family(n) for n in named if n]
    by_name = {f.name: f for f in families}
    out: Pins = {}
    for item, key, sep, text in split:
        family_name, _, gene = key.strip().rpartition(".")
        if not sep or not gene:
            raise EvoError(f"--pin takes GENE=VALUE or FAMILY.GENE=VALUE, not {item!r}")
        fam = by_name.get(family_name) if family_name else _owner(list(by_name.values()), gene)
        if fam is None:
            raise EvoError(f"--pin {item}: {family_name} is not a family of this search "
                           f"({', '.join(by_name)})")
        try:
            value = parse_assignments(fam, [f"{gene}={text}"])[gene]
        except EvoError as exc:
            raise EvoError(f"--pin {item}: {exc}") from None
        if out.setdefault(fam.name, {}).setdefault(gene, value) != value:
            raise EvoError(f"--pin {fam.name}.{gene} is given twice, to different values")
    return out


def _owner(families: list[Family], gene: str) -> Family:
    """The one family of ``families`` that has ``gene`` (an unqualified ``--pin``), or EvoError."""
    owners = [f for f in families if gene in f.params]
    if not families:
        raise EvoError(f"--pin {gene}: name its family (FAMILY.{gene}=VALUE) or the families searched (--families)")
    if not owners:
        raise EvoError(f"--pin {gene}: no family of this search ({', '.join(f.name for f in families)}) has it")
    if len(owners) > 1:
        raise EvoError(f"--pin {gene}: a gene of {', '.join(f.name for f in owners)}; spell it FAMILY.{gene}=VALUE")
    return owners[0]


def pin_families(families: Sequence[Family], pins: Mapping[str, Mapping[str, Value]]) -> list[Family]:
    """``families`` with their pins applied (:func:`pinned`); EvoError when a pin names a family
    that is not among them."""
    names = {f.name for f in families}
    stray = [n for n in pins if n not in names]
    if stray:
        raise EvoError(f"--pin names {', '.join(stray)}, which is not searched here "
                       f"({', '.join(sorted(names))})")
    return [pinned(f, pins.get(f.name, {})) for f in families]


def pins_text(pins: Mapping[str, Mapping[str, Value]]) -> str:
    """Pins as ``--pin`` takes them, qualified and comma-separated (``flash_mma.STAGES=2,...``)."""
    return ",".join(f"{fam}.{assignment_text(g, v)}" for fam, genes in pins.items() for g, v in genes.items())
