"""GREEN's draws: what a kernel could key on, drawn afresh per evaluation from a stored seed.

The fixed core (5 shapes x 2 causal modes, acceptance/green.toml) is comparable across runs,
and a kernel could be tuned, or cheat, to pass exactly it. So each evaluation also draws, from
a seed stored with its result (the evaluation's salt), one check per length *kind* and dtype:

- ``one``: L = 1; ``short``: below one tile (``[draws] tile``, 64); ``edge``: a multiple of
  half a tile, a tile or two (32, 64, 128), or one off it; ``odd``: an odd length beyond a
  tile (up to 32 tiles); ``long``: 2049..4608 (``[draws] long``); ``spiked``: up to 16 tiles,
  with a spiked key; ``long_spiked``: a ``long`` length with the stress inputs of ``spiked``
  (a stale row maximum, FlashAttention-4's conditional rescaling, shows only when a peaked row
  runs over many tiles: such a kernel passed every other kind and failed the promoted package's
  stress test at L = 4096); ``wide``: an odd length of 4 to 16 tiles over ``wide_heads`` (96-192)
  batch x heads, more query tiles than a GPU has SMs, so a persistent grid's CTAs each walk several
  tiles, the last of a head ragged (the fixed core's many-tile shapes G2 and G3 have aligned
  lengths, and every other kind has at most 8 heads: one tile per CTA).
- the problems language models run (kernel ABI v2): ``gqa``: 2 to 8 query heads on each of 2 or 3
  key/value heads (so that a kernel reading the wrong K/V head is always wrong here); ``mqa``: up to 16 query heads on one; ``chunk``: a chunk of queries against a
  longer key cache (prefill, the causal mask mostly at the bottom right); ``q_longer``: more queries
  than keys (a bottom-right mask then leaves the first rows seeing no key: they must be zeros);
  ``cross``: query and key lengths drawn apart; ``long_kv``: a few tiles of queries on a ``long``
  key cache with grouped heads. Each draws its mask's alignment (top left or bottom right) but
  ``chunk``, always at the bottom right; ``chunk``, ``q_longer`` and ``long_kv`` take a causal
  entry where the kernel has one. So every evaluation checks a wrong K/V head (``gqa``), a
  mask ignoring or mis-placing the shift and keys past Lq ignored (``chunk``) in each dtype.
- decode (docs/decode.md): ``decode``: 1-16 query rows per head, 1-32 query heads per key/value head,
  against a cache of 1 to tens of thousands of keys (``[draws] decode_keys``), the mask at the bottom
  right; ``decode_spikes``: a long cache with two spiked keys far apart, the larger in the last split
  of a split-KV kernel (a combine that ignores a split's maximum overflows, one that drops the last
  split is wrong); ``decode_masked``: a long cache under a top-left mask, every split past the first
  holding only keys no row sees (causal wherever the kernel has a causal entry).
- cache layouts (docs/kernel-abi.md, "Ragged and paged caches"), only for a kernel whose entries
  export them (``[launch] layouts``; any other is never asked): ``decode_lens``: 3-8 sequences of
  their own lengths in one cache (the longest at the capacity, one of no keys, one of a single key),
  two spiked keys per sequence far apart; ``decode_paged``: the same in shuffled pages of 1, 16, 48
  or 256 keys.
- B and H vary (B * H at most ``max_heads``, 2 for long ones); the head dim and causal mode
  are drawn from the ones the kernel has.
- Three in four use a non-default scale, well away from ``1/sqrt(D)``; inputs are normal with
  a drawn standard deviation up to ``std`` high (3-4); a spiked key (one key row per head
  multiplied so its scores reach about ``spike``) overflows exp in float32 unless the kernel
  subtracts the row maximum.
- ``long`` draws keep a softmax spread over many keys (scale at most the default, inputs of
  std 2-3): large outputs summed over many keys are where a low-precision accumulator shows.

Everything here is pure: the same (settings, kernel keys, seed) gives the same cases on any
machine (``random.Random`` seeded with an int is stable across Python versions), and each
case's name spells its inputs (``R07 sc=0.0389 sd=2.6 spike``: at most 32 characters, the
store's limit), so a stored check says what it ran. :func:`bucket_cases` draws the checks promote runs over one dispatch bucket,
:func:`llm_bucket_cases` the problems of kernel ABI v2 over it (grouped heads, a query length and a key
length of their own, the causal mask at either corner), :func:`domain_cases` the rest of its domain, and
:func:`stress_cases` and :func:`grouped_cases` add the promoted package's own GPU tests at the bucket's
measured lengths. What a route then serves (:func:`route_length`, :func:`verified_heads`,
:func:`verified_group`, :data:`ROUTE_ALIGNS`) is exactly what these checks cover (docs/trust.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection

from evo.results import Shape
from evo.gpu.suites import DTYPES, INPUTS, DrawSettings, GreenCase

LONG_KINDS = ("long", "long_spiked", "flat", "mixed")  # lengths in ``[draws] long``, at most 2 heads
INPUT_KINDS = {"flat": "flat", "mixed": "mixed", "heavy": "heavy", "equal_keys": "equal_keys", "placed": "placed"}
LONG_STD = (2.0, 3.0)            # long draws: large values, softmax still spread over many keys
LONG_SCALE = (0.3, 1.0)
NON_DEFAULT = 0.75               # share of draws with a non-default scale
SPIKED = 0.25                    # share of other draws that also get a spiked key
FP16_SAFE = 8000.0               # spike * std stays below this: 6 sigma is inside fp16's range
MAX_BUCKET_LEN = 16384           # promote's checks stop here in an open-ended top bucket
MAX_GRID_Y = 65535               # B * H of one launch: the grid's y limit (the kernel ABI's, and the package's)
HEADS_CHECK_BYTES = 1 << 30      # promote's many-heads check: at most this many bytes per input tensor

Key = tuple[int, str, bool]      # head dim, dtype, causal


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _scale_factor(rng: random.Random, settings: DrawSettings) -> float:
    """A scale in units of 1/sqrt(D): default (1) for one draw in four, else well below or above."""
    lo, hi = settings.scale
    sides = [(lo, min(0.5, hi))] if lo <= 0.5 else []
    sides += [(max(2.0, lo), hi)] if hi >= 2.0 else []
    if not sides or rng.random() >= NON_DEFAULT:
        return 1.0
    return _log_uniform(rng, *rng.choice(sides))


def _length(kind: str, settings: DrawSettings, rng: random.Random) -> int:
    tile = settings.tile
    if kind == "one":
        return 1
    if kind == "short":
        return rng.randint(2, tile - 1)
    if kind == "edge":    # every family's tiles are multiples of half the tile
        step = rng.choice((tile // 2, tile, 2 * tile))
        return max(2, step * rng.randint(1, 16) + rng.choice((-1, 0, 1)))
    if kind in ("odd", "heavy", "equal_keys", "placed"):
        return min(rng.randint(tile + 1, 32 * tile - 1) | 1, 32 * tile - 1)
    if kind == "many_heads":
        return rng.randint(1, tile)
    if kind in LONG_KINDS:
        return rng.randint(*settings.long)
    if kind == "spiked":
        return rng.randint(2, 16 * tile)
    if kind == "wide":
        return rng.randint(4 * tile + 1, 16 * tile - 1) | 1
    raise ValueError(f"unknown draw kind {kind!r}")


def _batch_heads(long: bool, settings: DrawSettings, rng: random.Random, wide: bool = False,
                 many: bool = False) -> tuple[int, int]:
    if long:
        return 1, rng.randint(1, 2)
    if many:
        b = rng.choice((1, 8, 32, 64))
        return b, max(1, rng.randint(*settings.many_heads) // b)
    if wide:
        b = rng.randint(1, 4)
        return b, max(1, rng.randint(*settings.wide_heads) // b)
    b = rng.randint(1, min(3, settings.max_heads))
    return b, rng.randint(1, max(1, settings.max_heads // b))


def spike_factor(settings: DrawSettings, factor: float, std: float) -> float:
    """The key multiplier that makes the spiked key's scores about ``settings.spike`` in size:
    its score is scale * q.k, of standard deviation ``factor * std**2 * multiplier``."""
    return min(settings.spike / (factor * std * std), FP16_SAFE / std)


def case_name(prefix: str, index: int, scale: float | None, std: float, spike: float, inputs: str = "normal") -> str:
    """``R07 sc=0.0389 sd=2.6 spike flat``: the draw index and its inputs (no ``sc``: default scale;
    the last word: how the inputs were drawn, :data:`evo.gpu.suites.INPUTS`)."""
    parts = [f"{prefix}{index:02d}"]
    if scale is not None:
        parts.append(f"sc={scale:.3g}")
    parts.append(f"sd={std:.1f}")
    if spike:
        parts.append("spike")
    if INPUTS[inputs]:
        parts.append(INPUTS[inputs])
    return " ".join(parts)


Attention = tuple[int, str, int]  # Hkv, align, Lk of a case (0, "top_left", 0: multi-head self-attention)
SELF: Attention = (0, "top_left", 0)
LLM_KINDS = ("gqa", "mqa", "chunk", "q_longer", "cross", "long_kv")
CAUSAL_KINDS = ("chunk", "q_longer", "long_kv", "decode_masked")  # drawn causal wherever the kernel has a
# causal entry: so every evaluation of such a kernel has a bottom-right chunk (Lk > Lq, shift > 0) per dtype
DECODE_KINDS = ("decode", "decode_spikes", "decode_masked")
LAYOUT_KINDS = {"decode_lens": "lens", "decode_paged": "paged"}  # drawn only for kernels with that cache layout
PAGE_SIZES = (1, 16, 48, 256)           # decode_paged: pages of one key, shorter than any key tile, not a power of two, longer
LAYOUT_BATCH = (3, 8)                   # decode_lens / decode_paged: sequences (3 at least: the longest, 0 and 1 keys)
DECODE_GROUPS = (1, 2, 4, 8, 16, 32)   # query heads per key/value head in decode draws
DECODE_ROWS = 16                       # the most query rows per head of a decode draw (and of a decode route)
DECODE_SCORES = 1 << 25                # B * Hq * Lq * Lk of a decode draw: the reference's score matrix
SPIKES_ROWS = (16, 128)                 # decode_spikes: query rows per K/V head (Hq / Hkv * Lq), fewest and most
GROUPS = (2, 3, 4, 7, 8)          # query heads per key/value head in ``gqa`` draws


def _alignment(rng: random.Random, bottom_right: float = 0.5) -> str:
    return "bottom_right" if rng.random() < bottom_right else "top_left"


def _llm_problem(kind: str, settings: DrawSettings, rng: random.Random) -> tuple[int, int, int, Attention]:
    """(B, Hq, Lq, (Hkv, align, Lk)) of one draw of an ABI v2 kind (:data:`LLM_KINDS`)."""
    tile = settings.tile
    if kind == "gqa":   # at least 2 K/V heads: with one, any head-to-K/V map is right (mqa's case)
        hkv, group = rng.randint(2, 3), rng.choice(GROUPS)
        L = min(rng.randint(tile + 1, 16 * tile) | 1, 16 * tile - 1)
        return rng.randint(1, 2), hkv * group, L, (hkv, _alignment(rng), L)
    if kind == "mqa":
        L = rng.randint(2, 8 * tile)
        return rng.randint(1, 2), rng.randint(2, 16), L, (1, _alignment(rng), L)
    if kind == "chunk":  # chunked prefill: the mask at the bottom right, as FlashAttention aligns it
        Lq = rng.randint(1, 4 * tile)
        hkv = rng.randint(1, 2)
        return 1, hkv * rng.choice((1, *GROUPS)), Lq, (hkv, "bottom_right", Lq + rng.randint(1, 32 * tile))
    if kind == "q_longer":
        Lk = rng.randint(1, 4 * tile)
        B, H = _batch_heads(False, settings, rng)
        return B, H, Lk + rng.randint(1, 8 * tile), (H, _alignment(rng), Lk)
    if kind == "cross":
        B, H = _batch_heads(False, settings, rng)
        return B, H, rng.randint(1, 16 * tile), (H, _alignment(rng), rng.randint(1, 16 * tile))
    if kind == "long_kv":
        return 1, 8, rng.randint(1, 2 * tile), (rng.choice((2, 4)), _alignment(rng, 0.75), rng.randint(*settings.long))
    raise ValueError(f"unknown draw kind {kind!r}")


def _decode_problem(kind: str, settings: DrawSettings, rng: random.Random) -> tuple[int, int, int, Attention]:
    """(B, Hq, Lq, (Hkv, align, Lk)) of one decode draw (:data:`DECODE_KINDS`): 1-16 query rows per
    head against a key cache of ``settings.decode_keys`` keys, 1-32 query heads per key/value head.

    ``decode``: any cache length from the range (log-uniform: 1 and a few keys as often as tens of
    thousands), the mask at the bottom right (a row may see no key when Lk < Lq); ``decode_spikes``:
    a long cache (the top eighth of the range) on one sequence and one or two key/value heads, so a
    split-KV kernel splits it, with two spiked keys far apart (inputs ``spikes``: the larger among
    the last keys, in the last split) and 16 to 128 query rows per key/value head
    (:data:`SPIKES_ROWS`: enough rows that some see the last spike far above every other score,
    few enough tiles that a kernel splits the keys); ``decode_masked``: a long cache under a mask at the top left, so
    every split past the first holds only keys no row sees. B * Hq * Lq * Lk stays within
    :data:`DECODE_SCORES` (the reference's score matrix)."""
    lo, hi = settings.decode_keys
    group = rng.choice(DECODE_GROUPS)
    if kind == "decode":
        Lk, Lq, align = round(_log_uniform(rng, lo, hi)), rng.randint(1, DECODE_ROWS), "bottom_right"
    elif kind == "decode_spikes":
        fewest = -(-SPIKES_ROWS[0] // group)
        Lk, align = round(_log_uniform(rng, max(lo, hi // 8), hi)), "bottom_right"
        Lq = rng.randint(fewest, max(fewest, min(DECODE_ROWS, SPIKES_ROWS[1] // group)))
    elif kind == "decode_masked":
        Lk, Lq, align = round(_log_uniform(rng, max(lo, hi // 8), hi)), rng.randint(2, DECODE_ROWS), "top_left"
    else:
        raise ValueError(f"unknown draw kind {kind!r}")
    heads = max(1, DECODE_SCORES // (group * Lq * Lk))   # B * Hkv within the budget
    B = 1 if kind == "decode_spikes" else rng.randint(1, max(1, min(4, heads)))   # few tiles: many splits
    hkv = rng.randint(1, max(1, min(2 if kind == "decode_spikes" else 4, heads // B)))
    return B, hkv * group, Lq, (hkv, align, Lk)


Cache = tuple[str, int, int, int]  # layout, lens_min, lens_seed, page_size of a case (evo.results.Shape)
CONTIGUOUS: Cache = ("contiguous", 0, 0, 0)


def _layout_problem(kind: str, settings: DrawSettings, rng: random.Random) -> tuple[int, int, int, Attention, Cache]:
    """(B, Hq, Lq, (Hkv, align, Lk), cache) of one draw of a cache-layout kind (:data:`LAYOUT_KINDS`):
    3 to 8 sequences of their own lengths (:meth:`evo.results.Shape.seqlens`: the longest at the
    capacity, one of no keys, one of a single key, the rest drawn from 0 to the capacity, so splits
    are ragged and some lie past a sequence's end) on a capacity from the top half (log-uniform) of
    ``settings.decode_keys``, 1-16 query rows, 1-32 query heads per key/value head, the mask at each
    sequence's bottom right; ``decode_paged`` keeps them in shuffled pages of :data:`PAGE_SIZES`
    keys, at least two to the capacity (so a wrong page-table entry always reads another page). B * Hq * Lq * Lk stays within :data:`DECODE_SCORES`."""
    lo, hi = settings.decode_keys
    group, Lq = rng.choice(DECODE_GROUPS), rng.randint(1, DECODE_ROWS)
    B, hkv = rng.randint(*LAYOUT_BATCH), rng.randint(1, 2)
    Lk = round(_log_uniform(rng, max(lo, math.isqrt(hi)), hi))
    Lk = max(2, min(Lk, DECODE_SCORES // (B * hkv * group * Lq)))
    page = rng.choice([p for p in PAGE_SIZES if 2 * p <= Lk]) if kind == "decode_paged" else 0   # 2+ pages
    return B, hkv * group, Lq, (hkv, "bottom_right", Lk), (LAYOUT_KINDS[kind], 0, rng.randint(0, 99999), page)


def _stressed(prefix: str, index: int, shape_of: tuple[int, int, int, int, bool, str], long: bool,
              spiked: bool, settings: DrawSettings, rng: random.Random, inputs: str = "normal",
              attention: Attention = SELF, cache: Cache = CONTIGUOUS) -> GreenCase:
    """One case with drawn scale, spread and (if ``spiked``) a spiked key; values rounded to
    what the name prints, so the name states the inputs exactly. ``attention`` gives the key/value
    heads, mask alignment and key length where they are not those of self-attention, ``cache`` the
    cache layout where it is not contiguous."""
    B, H, L, D, causal, dtype = shape_of
    if long:
        factor = _log_uniform(rng, *LONG_SCALE) if rng.random() < NON_DEFAULT else 1.0
        std = rng.uniform(*LONG_STD)
    else:
        factor = _scale_factor(rng, settings)
        std = rng.uniform(*settings.std)
    std = round(min(max(std, settings.std[0]), settings.std[1]), 1)
    scale = None if factor == 1.0 else float(f"{factor / math.sqrt(D):.3g}")
    real = 1.0 if scale is None else scale * math.sqrt(D)
    spike = round(spike_factor(settings, real, std), 1) if spiked else 0.0
    name = case_name(prefix, index, scale, std, spike, inputs)
    Hkv, align, Lk = attention
    return GreenCase(Shape(name, B, H, L, D, causal, dtype, Hkv, Lk, align, *cache), scale, std, spike, seeds=(0,),
                     inputs=inputs)


def drawn_cases(settings: DrawSettings, keys: Collection[Key], seed: int,
                layouts: Collection[str] = ()) -> list[GreenCase]:
    """One case per (kind, dtype the kernel has), in kind order, for the evaluation's ``seed``; a
    cache-layout kind (:data:`LAYOUT_KINDS`) only where the kernel has that layout (``layouts``:
    its entries' ``[launch] layouts``). Those kinds come last, so leaving them out changes no
    other draw."""
    ordered = sorted(set(keys))
    if not ordered:
        return []
    rng = random.Random(seed)
    dtypes = [dt for dt in DTYPES if any(k[1] == dt for k in ordered)]
    out: list[GreenCase] = []
    for kind in settings.kinds:
        if kind in LAYOUT_KINDS and LAYOUT_KINDS[kind] not in layouts:
            continue
        for dt in dtypes:
            mine = [k for k in ordered if k[1] == dt]
            if kind in CAUSAL_KINDS and any(k[2] for k in mine):
                mine = [k for k in mine if k[2]]
            D, _, causal = rng.choice(mine)
            if kind in LAYOUT_KINDS:
                B, H, L, attention, cache = _layout_problem(kind, settings, rng)
                out.append(_stressed("R", len(out), (B, H, L, D, causal, dt), False, True, settings, rng, "spikes",
                                     attention, cache))
                continue
            if kind in DECODE_KINDS:
                B, H, L, attention = _decode_problem(kind, settings, rng)
                spikes = kind == "decode_spikes"
                out.append(_stressed("R", len(out), (B, H, L, D, causal, dt), False, spikes or rng.random() < SPIKED,
                                     settings, rng, "spikes" if spikes else "normal", attention))
                continue
            if kind in LLM_KINDS:
                B, H, L, attention = _llm_problem(kind, settings, rng)
                out.append(_stressed("R", len(out), (B, H, L, D, causal, dt), kind == "long_kv",
                                     rng.random() < SPIKED, settings, rng, attention=attention))
                continue
            L = _length(kind, settings, rng)
            B, H = _batch_heads(kind in LONG_KINDS, settings, rng, wide=kind == "wide", many=kind == "many_heads")
            spiked = kind in ("spiked", "long_spiked", "mixed") or (
                kind not in ("one", "long", "flat", "equal_keys") and rng.random() < SPIKED)
            out.append(_stressed("R", len(out), (B, H, L, D, causal, dt), kind in ("long", "flat", "mixed"),
                                 spiked, settings, rng, INPUT_KINDS.get(kind, "normal")))
    return out


def bucket_top(lo: int, hi: int | None, measured: Collection[int]) -> int:
    """The longest length to check in a bucket: ``hi``, or for an open-ended top bucket twice
    the longest length measured in it (at least 2*lo+1), at most ``MAX_BUCKET_LEN``."""
    if hi is not None:
        return max(hi, lo)
    return max(lo, min(max(2 * lo + 1, 2 * max(measured, default=lo)), MAX_BUCKET_LEN))


def bucket_lengths(lo: int, top: int, rng: random.Random, ragged: int = 3) -> list[int]:
    """A bucket's edges (lo, lo+1, top-1, top) and ``ragged`` odd lengths drawn inside it,
    ascending, no repeats."""
    picks = {lo, min(lo + 1, top), max(top - 1, lo), top}
    picks |= {min(rng.randint(lo, top) | 1, top) for _ in range(ragged)}
    return sorted(picks)


STRESS_FACTORS = (0.3, 2.5)      # the promoted package's stress test (templates/package/.../test_gpu.py.j2)
STRESS_STD = 3.0


def stress_cases(settings: DrawSettings, key: Key, lengths: Collection[int], *, prefix: str = "P",
                 start: int = 0) -> list[GreenCase]:
    """The promoted package's stress test as checks (B=2, H=3): at each length, inputs of standard
    deviation 3 with a spiked key whose scores reach about ``settings.spike``, at 0.3 and 2.5 times
    the default scale. Names count from ``start``."""
    D, dtype, causal = key
    out: list[GreenCase] = []
    for L in sorted(set(lengths)):
        for factor in STRESS_FACTORS:
            scale = float(f"{factor / math.sqrt(D):.3g}")
            spike = round(spike_factor(settings, scale * math.sqrt(D), STRESS_STD), 1)
            name = case_name(prefix, start + len(out), scale, STRESS_STD, spike)
            out.append(GreenCase(Shape(name, 2, 3, L, D, causal, dtype), scale, STRESS_STD, spike, seeds=(0,)))
    return out


def verified_heads(length: int, head_dim: int) -> int:
    """B * H of promote's many-heads check at ``length``: the grid's limit where that fits
    :data:`HEADS_CHECK_BYTES` per tensor (2-byte elements), else as many heads as do."""
    return max(1, min(MAX_GRID_Y, HEADS_CHECK_BYTES // (length * head_dim * 2)))


def heads_split(heads: int) -> tuple[int, int]:
    """(B, H) of promote's many-heads checks of ``heads`` = B * H query heads: the largest batch
    of at most 4 that divides them."""
    B = next(b for b in (4, 3, 2, 1) if heads % b == 0)
    return B, heads // B


def verified_group(heads: int) -> int:
    """Query heads per key/value head of promote's multi-query many-heads check of ``heads``
    (B * Hq) query heads (:func:`domain_cases`): every query head of a batch on one key/value head."""
    return heads_split(heads)[1]


def route_length(L: int, Lk: int) -> int:
    """The length a dispatch route is bucketed by: the longer of a problem's query length ``L`` and
    key length ``Lk`` (a route serves both lengths up to its top; promote checks each bucket with the
    other length drawn shorter, :func:`llm_bucket_cases`)."""
    return max(L, Lk)


ROUTE_ALIGNS = ("top_left", "bottom_right")
"""The causal alignments promote checks a causal route at with Lq != Lk (:func:`llm_bucket_cases`,
:func:`grouped_cases`): both corners, at the edges of every bucket."""


def domain_cases(settings: DrawSettings, key: Key, lo: int, top: int, heads: int, seed: int, *,
                 prefix: str = "P", start: int = 0) -> list[GreenCase]:
    """Promote's checks of the rest of a bucket's domain: ``heads`` (B * H, up to the grid's limit)
    at its shortest length ``lo``, once with a key/value head per query head and once with one
    key/value head per batch (multi-query: the most query heads per key/value head a route serves,
    :func:`verified_group`), and at its longest, ``top``, a flat softmax (queries near zero) and
    flat and peaked rows mixed in one head. Names count from ``start``."""
    D, dtype, causal = key
    rng = random.Random(seed)
    B, H = heads_split(heads)
    return [_stressed(prefix, start, (B, H, lo, D, causal, dtype), False, False, settings, rng),
            _stressed(prefix, start + 1, (1, 2, top, D, causal, dtype), True, False, settings, rng, "flat"),
            _stressed(prefix, start + 2, (1, 2, top, D, causal, dtype), True, True, settings, rng, "mixed"),
            _stressed(prefix, start + 3, (B, H, lo, D, causal, dtype), False, False, settings, rng,
                      attention=(1, "top_left", lo))]


def _other_length(L: int, rng: random.Random) -> int:
    """A length below ``L`` (a query chunk, or a shorter key cache): one in four 1, else drawn."""
    return 1 if rng.random() < 0.25 else rng.randint(1, L - 1)


def llm_bucket_cases(settings: DrawSettings, key: Key, lo: int, top: int, seed: int, *,
                     prefix: str = "P", start: int = 0) -> list[GreenCase]:
    """Promote's checks of one kernel over one bucket ``lo..top`` on the problems of kernel ABI v2:
    at each of the bucket's lengths L (its edges and ragged lengths, :func:`bucket_lengths`) as the
    longer length, a query chunk on L keys and L queries on fewer keys (the other length drawn
    below L), each with grouped heads (1 or 2 key/value heads, 1-8 query heads on each); a causal
    kernel sees the chunk's mask at the bottom right and the other's at the top left at one length
    and the other way round at the next, so both corners are checked both ways at the two shortest
    and the two longest. (L = 1 has no shorter length; bucket_cases and the many-heads checks of
    :func:`domain_cases` cover it.) Names count from ``start``."""
    D, dtype, causal = key
    rng = random.Random(seed * 1_000_003 + 7)
    out: list[GreenCase] = []
    for i, L in enumerate(n for n in bucket_lengths(lo, top, rng) if n > 1):
        corners = ROUTE_ALIGNS[::-1] if i % 2 == 0 else ROUTE_ALIGNS
        problems = [(_other_length(L, rng), (L, corners[0])), (L, (_other_length(L, rng), corners[1]))]
        for Lq, (Lk, align) in problems:
            hkv, group = rng.randint(1, 2), rng.choice((1, *GROUPS))
            B = 1 if L > 4096 else rng.randint(1, 2)
            out.append(_stressed(prefix, start + len(out), (B, hkv * group, Lq, D, causal, dtype), False,
                                 len(out) % 2 == 1, settings, rng, attention=(hkv, align, Lk)))
    return out


GROUPED_HEADS = (8, 2)            # Hq, Hkv of the promoted package's grouped-heads route test


def grouped_problems(length: int, causal: bool) -> list[tuple[int, int, str]]:
    """(Lq, Lk, alignment) of the promoted package's grouped-heads route test at one measured
    ``length`` (templates/package/.../test_gpu.py.j2 spells the same): a query chunk of a quarter of
    it on ``length`` keys and ``length`` queries on a third as many keys, each in both corners when
    causal."""
    chunk, fewer = (length + 3) // 4, (length + 2) // 3
    aligns = ROUTE_ALIGNS if causal else ROUTE_ALIGNS[:1]
    return [(Lq, Lk, a) for Lq, Lk in ((chunk, length), (length, fewer)) for a in aligns]


def grouped_cases(key: Key, lengths: Collection[int], *, prefix: str = "P", start: int = 0) -> list[GreenCase]:
    """The promoted package's grouped-heads route test as checks (B=1, Hq=8 on Hkv=2, normal inputs,
    the default scale) at each length: :func:`grouped_problems`. Names count from ``start``."""
    D, dtype, causal = key
    Hq, Hkv = GROUPED_HEADS
    out: list[GreenCase] = []
    for L in sorted(set(lengths)):
        for Lq, Lk, align in grouped_problems(L, causal):
            name = case_name(prefix, start + len(out), None, 1.0, 0.0)
            out.append(GreenCase(Shape(name, 1, Hq, Lq, D, causal, dtype, Hkv, Lk, align), seeds=(0,)))
    return out


def layout_bucket_cases(settings: DrawSettings, key: Key, layout: str, lo: int, top: int, heads: int, seed: int, *,
                        pages: Collection[int] = (), prefix: str = "P", start: int = 0) -> list[GreenCase]:
    """Promote's checks of one kernel's ``layout`` entry (``lens`` or ``paged``) over a layout route's
    bucket of capacities ``lo..top`` (:mod:`evo.products.routes`): at each of the bucket's lengths
    (:func:`bucket_lengths`) as the capacity, :data:`LAYOUT_BATCH` sequences of their own lengths
    (the capacity, 0 and 1 keys among them, :meth:`evo.results.Shape.seqlens`), two spiked keys in
    each far apart, 1 to :data:`DECODE_ROWS` query rows (all of them at the top), query heads per
    key/value head from :data:`DECODE_GROUPS`, each sequence's mask at its bottom right, B * Hq * Lq *
    Lk within :data:`DECODE_SCORES`; paged in shuffled pages whose size goes round
    :data:`PAGE_SIZES` and ``pages`` (the route's measured page sizes), two pages to a capacity at
    least where that fits. Then, as :func:`domain_cases` checks a contiguous route, the route's
    ``heads`` (B * Hq) at capacity ``lo``, with a key/value head per query head and with one per
    sequence (:func:`verified_group`). Names count from ``start``."""
    D, dtype, causal = key
    rng = random.Random(seed * 1_000_003 + 11)
    sizes = sorted({*PAGE_SIZES, *pages})

    def cache(capacity: int, i: int) -> Cache:
        fit = [p for p in sizes if 2 * p <= capacity] or [1]
        return layout, 0, rng.randint(0, 99999), fit[i % len(fit)] if layout == "paged" else 0

    out: list[GreenCase] = []
    for i, L in enumerate(bucket_lengths(lo, top, rng)):
        B, hkv = rng.randint(*LAYOUT_BATCH), rng.randint(1, 2)
        room = max(1, DECODE_SCORES // (B * hkv * L))            # query rows x query heads per K/V head
        Lq = min(DECODE_ROWS if top == L else rng.randint(1, DECODE_ROWS), room)
        group = min(rng.choice(DECODE_GROUPS), max(1, room // Lq))
        out.append(_stressed(prefix, start + len(out), (B, hkv * group, Lq, D, causal, dtype), False, True, settings,
                             rng, "spikes", (hkv, "bottom_right", L), cache(L, i)))
    B, H = heads_split(heads)
    for hkv in (H, 1):
        out.append(_stressed(prefix, start + len(out), (B, H, 1, D, causal, dtype), False, False, settings, rng,
                             attention=(hkv, "bottom_right", lo), cache=cache(lo, len(out))))
    return out


def bucket_cases(settings: DrawSettings, key: Key, lo: int, top: int, seed: int, *,
                 prefix: str = "P", start: int = 0) -> list[GreenCase]:
    """Promote's checks of one kernel over one dispatch bucket ``lo..top``: its edges and ragged
    lengths, each with drawn B, H, scale, spread; every other one with a spiked key. Names
    count from ``start``."""
    D, dtype, causal = key
    rng = random.Random(seed)
    out = []
    for i, L in enumerate(bucket_lengths(lo, top, rng)):
        B, H = _batch_heads(L > 4096, settings, rng)
        out.append(_stressed(prefix, start + i, (B, H, L, D, causal, dtype), False, i % 2 == 1,
                             settings, rng))
    return out
