"""Statistics of the sampler benchmark: quartiles and the Mann-Whitney U test, censoring aware.

A run that never reached the target within its budget is right-censored: all we know is that
it needed more than the budget. Such runs enter both statistics as ``math.inf`` -- worse than
every run that reached the target, tied with each other -- so a median or quartile that falls
on one is itself infinite and shown as "> budget". Quantiles are order statistics, never
interpolated.

The U test is the normal approximation with tie correction and continuity correction, the
test scipy's ``mannwhitneyu(method="asymptotic")`` computes (with 50 runs per sampler and
ties at the censoring point the exact test does not apply).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Value = float  # an evaluation count, or math.inf for a run that did not reach the target


def quantile(xs: Sequence[Value], q: float) -> Value:
    """The ``q`` quantile as an order statistic: the smallest value with at least a share ``q``
    of the values at or below it (numpy's ``inverted_cdf``). It is always one of the values --
    an evaluation count some run needed, or infinite for a censored run -- never an
    interpolation."""
    if not xs:
        raise ValueError("quantile of no values")
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def quartiles(xs: Sequence[Value]) -> tuple[Value, Value, Value]:
    """(p25, median, p75)."""
    return quantile(xs, 0.25), quantile(xs, 0.5), quantile(xs, 0.75)


def ranks(values: Sequence[Value]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _norm_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2))


def mann_whitney(x: Sequence[Value], y: Sequence[Value], alternative: str = "two-sided") -> tuple[float, float]:
    """U statistic of ``x`` and the p-value. ``alternative``: ``two-sided``, ``less`` (``x``
    tends to be smaller than ``y``: fewer evaluations) or ``greater``."""
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be two-sided, less or greater, not {alternative!r}")
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs two non-empty samples")
    both = list(x) + list(y)
    r = ranks(both)
    u1 = sum(r[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    counts: dict[Value, int] = {}
    for v in both:
        counts[v] = counts.get(v, 0) + 1
    tie = sum(t ** 3 - t for t in counts.values())
    var = n1 * n2 / 12 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return u1, 1.0
    mu, sd = n1 * n2 / 2, math.sqrt(var)
    if alternative == "two-sided":
        z = (max(u1, n1 * n2 - u1) - mu - 0.5) / sd
        return u1, min(1.0, 2 * (1 - _norm_cdf(z)))
    if alternative == "less":
        return u1, _norm_cdf((u1 - mu + 0.5) / sd)
    return u1, 1 - _norm_cdf((u1 - mu - 0.5) / sd)
