"""GREEN's margin: how close a kernel's error came to the tolerance, per head dim, and whether
promote will ship it.

GREEN passes a check at max|err| <= tolerance. Promote checks every kernel it ships again over
its dispatch buckets, at :data:`TOLERANCE_SHARE` of that tolerance (:mod:`evo.products.verify` says why),
so a kernel that passed GREEN with a check above that share will most likely be refused there.
A search that breeds from such kernels spends its budget on what it cannot ship (study wgmma8:
63 of 83 candidates carried conditional rescaling, which passes GREEN at 0.7-0.95 of the
tolerance and fails promote's 0.75). So the search loop records each timed candidate's worst
share per head dim in its trial (user attr :data:`GREEN_SHARE`), and the evo sampler keeps
candidates over the share out of its elites and counts them against the move that made them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from evo.results import CheckResult

# A shipped kernel's error must stay within this share of GREEN's tolerance over its buckets.
# The package's own tests draw other inputs at the full tolerance, and a kernel whose error sits
# near it passes one draw and fails the next: twice a conditional-rescaling (LAZY_D128) kernel
# passed GREEN and promote's verification, then failed the package's stress test at 1.06x the
# tolerance (studies wgmma5, wgmma6). Over every stored check of flash_wgmma kernels with exact
# rescaling (about 10,000, the GPU-run databases of dev/gpu-runs/DATABASES.md) the worst error was 0.57 of the
# tolerance; with conditional rescaling, up to 1.03.
TOLERANCE_SHARE = 0.75
GREEN_SHARE = "green_share"    # trial user attr: {"64": worst share, "128": ...}


def worst_shares(checks: Iterable[CheckResult]) -> dict[int, float]:
    """Per head dim, the largest max|err| / tolerance over ``checks`` (checks without a finite
    error or a tolerance, such as a NaN or an unwritten output, are red anyway and skipped)."""
    out: dict[int, float] = {}
    for c in checks:
        if c.tolerance > 0 and math.isfinite(c.max_abs_err):
            d = c.shape.D
            out[d] = max(out.get(d, 0.0), c.max_abs_err / c.tolerance)
    return out


def over_share(shares: Mapping[str, float] | Mapping[int, float]) -> list[int]:
    """The head dims whose worst share is above :data:`TOLERANCE_SHARE` (keys as stored in a
    trial, strings, or as :func:`worst_shares` gives them)."""
    return sorted(int(d) for d, s in shares.items() if s > TOLERANCE_SHARE)
