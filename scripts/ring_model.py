"""A model of flash_wgmma's barrier protocol, run under random schedules (no GPU needed).

The kernel's producer and consumer warpgroups synchronise through mbarriers (a full and an empty
barrier per K and V stage, a full and an empty barrier for Q) and, with ping-pong, two named
barriers that hand the GEMM turn back and forth (three consumers: round a ring). CAUSAL_TRIM lets
a consumer stop at its own last KV tile and only wait for and release the CTA's later ones, with an
empty turn each; a consumer whose rows all lie past Lq or (causal) see no key (idle) does that for
every tile, releasing Q unread and taking one more empty turn where the overlap gives a computing
consumer n + 1. A causal tile whose rows all precede key 0's diagonal (shift < 0) has no KV tile
at all: the producer loads its Q alone, and every consumer is idle. With PACK_GQA the producer
thread issues only K and V, and Q comes from loaders of their own (warps 1-3 of the producer
warpgroup: one agent here, as each of them waits for the same phase and arrives once a tile).
Tiles come from random query
and key lengths and shifts (kernel ABI v2: query i sees key j <= i + shift). A
mistake there does not show as a wrong number but as a hang or a race, so this model plays the
protocol as the template writes it (the order of waits, turns and releases per warpgroup), picks
which agent moves next at random, and checks, over many schedules and tile sequences:

- nothing deadlocks: every agent finishes;
- every release lands in the phase it is meant for: a consumer releasing use u of a stage finds
  that stage's empty barrier with exactly u completed phases (an early arrival would count
  toward an earlier use and let the producer overwrite a buffer still being read);
- the producer refills a stage only after every consumer has released its previous use;
- a named barrier never holds two hand-overs at once (a second arrive would complete the
  barrier without its partner).

Usage: python scripts/ring_model.py [SCHEDULES]   (prints a summary; exits 1 on a violation)
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar


class Violation(Exception):
    """The protocol broke one of the checked rules."""


@dataclass
class MBarrier:
    """An mbarrier: ``count`` arrivals complete a phase; ``phases`` completed so far. ``arrivals``
    counts the arrivals on every barrier: each one changes its barrier's state (``phases`` only
    grows, ``pending`` drops until it does), so an unchanged count means unchanged barriers."""

    count: int
    pending: int = 0
    phases: int = 0
    arrivals: ClassVar[int] = 0

    def __post_init__(self) -> None:
        self.pending = self.count

    def arrive(self) -> None:
        MBarrier.arrivals += 1
        self.pending -= 1
        if self.pending == 0:
            self.phases += 1
            self.pending = self.count

    def done(self, use: int) -> bool:
        """Whether phase ``use`` has completed (what ``mbar_wait(bar, use & 1)`` waits for)."""
        return self.phases > use


@dataclass
class World:
    stages: int
    wgs: int
    pingpong: bool
    overlap: bool
    tiles: list[tuple[int, list[int], list[bool]]]   # per CTA tile: n_tiles, n_mine and idle per consumer
    pack: bool = False                                 # PACK_GQA: Q from the loaders, not the TMA thread
    full_k: list[MBarrier] = field(default_factory=list)
    full_v: list[MBarrier] = field(default_factory=list)
    empty_k: list[MBarrier] = field(default_factory=list)
    empty_v: list[MBarrier] = field(default_factory=list)
    full_q: MBarrier = field(default_factory=lambda: MBarrier(1))
    empty_q: MBarrier = field(default_factory=lambda: MBarrier(1))
    turn_tokens: list[int] = field(default_factory=list)   # per consumer: hand-overs waiting at its named barrier
    reading: dict[tuple[str, int], set[int]] = field(default_factory=dict)   # (K|V, stage) -> consumers in it

    def snapshot(self) -> tuple[int, ...]:
        """What changes with every barrier's state and the turn tokens: a schedule that leaves it
        unchanged for long is stuck. The arrivals stand for the barriers' states (one arrival
        always changes one), read in O(1) where a tuple of every barrier took most of a run."""
        return (MBarrier.arrivals, *self.turn_tokens)

    def __post_init__(self) -> None:
        self.full_k = [MBarrier(1) for _ in range(self.stages)]
        self.full_v = [MBarrier(1) for _ in range(self.stages)]
        self.empty_k = [MBarrier(self.wgs) for _ in range(self.stages)]   # one arrival per consumer here
        self.empty_v = [MBarrier(self.wgs) for _ in range(self.stages)]
        self.empty_q = MBarrier(self.wgs)
        self.turn_tokens = [0] * self.wgs


Step = Iterator[None]   # an agent yields while it waits; the scheduler resumes it


def wait(cond) -> Step:
    while not cond():
        yield


def producer(w: World, mutant: str = "") -> Step:
    """``mutant`` ``no_lone_q``: a tile without KV tiles gets no Q either (its consumers would
    wait for it forever)."""
    it = 0
    for tc, (n_tiles, _, _) in enumerate(w.tiles):
        if n_tiles == 0 and mutant != "no_lone_q" and not w.pack:   # no row sees a key: Q alone
            if tc > 0:
                yield from wait(lambda tc=tc: w.empty_q.done(tc - 1))
            w.full_q.arrive()
            yield
        for j in range(n_tiles):
            s, use = it % w.stages, it // w.stages
            if use > 0:
                yield from wait(lambda s=s, use=use: w.empty_k[s].done(use - 1))
            if w.reading.get(("K", s)):
                raise Violation(f"K stage {s} refilled while consumers {w.reading[('K', s)]} read it")
            w.full_k[s].arrive()
            if j == 0 and not w.pack:
                if tc > 0:
                    yield from wait(lambda tc=tc: w.empty_q.done(tc - 1))
                w.full_q.arrive()
            if use > 0:
                yield from wait(lambda s=s, use=use: w.empty_v[s].done(use - 1))
            if w.reading.get(("V", s)):
                raise Violation(f"V stage {s} refilled while consumers {w.reading[('V', s)]} read it")
            w.full_v[s].arrive()
            it += 1
            yield


def loader(w: World) -> Step:
    """PACK_GQA's Q loaders: each tile's Q once the consumers released the last one."""
    for tc in range(len(w.tiles)):
        if tc > 0:
            yield from wait(lambda tc=tc: w.empty_q.done(tc - 1))
        yield                                   # the cp.async copies, their wait and the proxy fence
        w.full_q.arrive()


def consumer(w: World, c: int, trim: bool, mutant: str = "") -> Step:
    """One consumer warpgroup as the template orders it; ``mutant`` breaks the trimmed path on
    purpose (``no_wait``: release without waiting for the load; ``no_turns``: no empty turns;
    ``idle_turn``: an idle consumer without its extra turn under the overlap), to show that the
    checks catch it."""
    pp = w.pingpong and w.wgs >= 2                # two consumers: PINGPONG; three: PINGPONG3's ring
    nxt = (c + 1) % w.wgs

    def turn() -> Step:                       # turn_begin(); ...; turn_end()
        if pp:
            yield from wait(lambda: w.turn_tokens[c] > 0)
            w.turn_tokens[c] -= 1
        yield
        if pp:
            w.turn_tokens[nxt] += 1
            if w.turn_tokens[nxt] > 1:
                raise Violation(f"named barrier of consumer {nxt} holds two hand-overs")

    def take(kind: str, j: int, it: int) -> Step:
        s, use = (it + j) % w.stages, (it + j) // w.stages
        full = (w.full_k if kind == "K" else w.full_v)[s]
        yield from wait(lambda: full.done(use))
        w.reading.setdefault((kind, s), set()).add(c)

    def release(kind: str, j: int, it: int) -> None:
        s, use = (it + j) % w.stages, (it + j) // w.stages
        bar = (w.empty_k if kind == "K" else w.empty_v)[s]
        if bar.phases != use:
            raise Violation(f"consumer {c} released {kind} use {use} of stage {s} in phase {bar.phases}")
        w.reading.get((kind, s), set()).discard(c)
        bar.arrive()

    if pp and c == w.wgs - 1:
        w.turn_tokens[0] += 1                  # the last consumer hands consumer 0 the first turn
    it = 0
    for tc, (n_tiles, mine, idle) in enumerate(w.tiles):
        n = mine[c] if trim else 0 if idle[c] else n_tiles
        q_last = n - 1
        yield from wait(lambda tc=tc: w.full_q.done(tc))
        if n == 0:
            w.empty_q.arrive()                 # Q loaded, unread
            if w.overlap and mutant != "idle_turn":
                yield from turn()
        elif w.overlap:
            yield from take("K", 0, it)
            yield from turn()
            release("K", 0, it)
            if q_last == 0:
                w.empty_q.arrive()
            for j in range(1, n):
                yield from take("K", j, it)
                yield from take("V", j - 1, it)
                yield from turn()
                release("K", j, it)
                if j == q_last:
                    w.empty_q.arrive()
                yield
                release("V", j - 1, it)
            yield from take("V", n - 1, it)
            yield from turn()
            release("V", n - 1, it)
        else:
            for j in range(n):
                yield from take("K", j, it)
                yield from turn()
                release("K", j, it)
                if j == q_last:
                    w.empty_q.arrive()
                yield from take("V", j, it)
                yield from turn()
                release("V", j, it)
        for j in range(n, n_tiles):            # CAUSAL_TRIM (keys past this consumer's rows) or idle
            for _ in range(0 if mutant == "no_turns" else 1 if w.overlap else 2):
                yield from turn()
            for kind in ("K", "V"):
                if mutant != "no_wait":
                    yield from take(kind, j, it)
                release(kind, j, it)
        it += n_tiles
    if pp and c == 0:
        yield from wait(lambda: w.turn_tokens[0] > 0)   # the last hand-over
        w.turn_tokens[0] -= 1


def cta_tiles(lq: int, lk: int, shift: int, causal: bool, wgs: int, block_n: int,
              m0s: list[int], group: int = 0) -> list[tuple[int, list[int], list[bool]]]:
    """(n_tiles, n_mine and idle per consumer) of the query tiles at ``m0s``, as the template
    computes them (kv_end, kv_tiles, wg_keys, idle, n_mine); ``group`` > 0: PACK_GQA's packed
    rows (row p at position p // group, group * lq rows)."""
    rows = lq * group if group else lq

    def kv_end(r: int) -> int:                  # keys [0, kv_end(r)) the rows below r (and Lq) see
        if not causal:
            return lk
        return max(0, min(lk, (min(rows, r) - 1) // group + 1 + shift if group else min(lq, r) + shift))

    out = []
    for m0 in m0s:
        n_tiles = (kv_end(m0 + 64 * wgs) + block_n - 1) // block_n
        keys = [kv_end(m0 + 64 * c + 64) for c in range(wgs)]
        idle = [m0 + 64 * c >= rows or (causal and keys[c] <= 0) for c in range(wgs)]
        mine = [0 if idle[c] else min(n_tiles, (keys[c] + block_n - 1) // block_n) for c in range(wgs)]
        assert all(idle[c] or mine[c] >= 1 for c in range(wgs)) and (n_tiles > 0 or all(idle))
        out.append((n_tiles, mine, idle))
    return out


def play(rng: random.Random, trim: bool, mutant: str = "") -> None:
    wgs = rng.choice([1, 2, 3])
    block_n = rng.choice([64, 96, 128])
    block_m = 64 * wgs
    lq, lk = rng.choice([1, 100, 700, 2048]), rng.choice([1, 100, 700, 2048])
    shift = rng.choice([0, lk - lq, rng.randint(-lq, lk)])   # top left, bottom right, anywhere
    causal = rng.random() < 0.8
    pack = mutant != "no_lone_q" and rng.random() < 0.3
    group = rng.choice([1, 2, 3, 4, 8]) if pack else 0
    rows = lq * group if pack else lq
    m0s = rng.sample(range(0, rows, block_m), k=min(6, len(range(0, rows, block_m))))
    if mutant == "no_lone_q":                  # a query length with tiles that see no key
        lq, lk, shift, m0s = 2048, 100, -1948, [0, 1024, 1920]
    tiles = cta_tiles(lq, lk, shift, causal or mutant == "no_lone_q", wgs, block_n, m0s, group)
    w = World(stages=rng.choice([2, 3, 4]), wgs=wgs, pingpong=rng.random() < 0.7, overlap=rng.random() < 0.7,
              tiles=tiles, pack=pack)
    agents = {"producer": producer(w, mutant)} | {f"consumer {c}": consumer(w, c, trim, mutant) for c in range(wgs)}
    if w.pack:
        agents["loader"] = loader(w)
    stalled = 0
    while agents:
        name = rng.choice(sorted(agents))
        before = w.snapshot()
        try:
            next(agents[name])
        except StopIteration:
            del agents[name]
            stalled = 0
            continue
        after = w.snapshot()
        stalled = 0 if after != before else stalled + 1
        if stalled > 20000:
            raise Violation(f"deadlock: {sorted(agents)} wait forever (wgs {wgs}, Lq {lq}, Lk {lk}, "
                            f"shift {shift}, tiles {tiles})")


def main(schedules: int) -> int:
    rng = random.Random(0)
    for trim in (False, True):
        for k in range(schedules):
            try:
                play(rng, trim)
            except Violation as err:
                print(f"CAUSAL_TRIM={trim}: schedule {k}: {err}")
                return 1
        print(f"CAUSAL_TRIM={trim}: {schedules} random schedules, no deadlock, every release in its phase")
    # the checks must catch a broken trim or idle path, or a tile without KV tiles left without Q
    for mutant in ("no_wait", "no_turns", "idle_turn", "no_lone_q"):
        caught = []
        for _ in range(schedules):
            try:
                play(rng, True, mutant)
            except Violation as err:
                caught.append(str(err))
        print(f"mutant {mutant}: caught in {len(caught)} of {schedules} schedules"
              + (f", e.g. {caught[0]}" if caught else ""))
        if not caught:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
