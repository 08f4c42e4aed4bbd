"""A/A check of FAST (GPU host): SDPA timed as the candidate against SDPA as the baseline.

The rows a promoted package routes to SDPA measured 0.96-0.98x of SDPA called directly, in two
runs (git 2e544b5 and c8647bb: F4c, F5, F6-bf16), with the profiler's busy time agreeing,
although the package makes the same SDPA call. Either the package path costs GPU time, or FAST
favours the ops it times after the candidate. Here the candidate slot holds (a) SDPA's default
call itself and (b) the call as the package makes it (explicit ``attn_mask=None,
dropout_p=0.0, scale=None``), each timed by :func:`evo.gpu.timing.time_case` exactly as a search
times a kernel; an unbiased harness gives 1.00 for both, within the spread. Given an installed
package's name, (c) its ``attention`` too (on shapes it routes to SDPA that isolates the package).

Usage: python scripts/aa_probe.py [CASES] [DTYPE] [PACKAGE]   (default F4c,F5f,F6f fp16, no package)
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch.nn.functional as F

from evo.api import fast_shapes
from evo.gpu.timing import sdpa_op, time_case


def package_call(causal: bool) -> Any:
    """SDPA called as a promoted package's fallback calls it."""
    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=causal, scale=None)
    return op


def installed(package: str, causal: bool) -> Any:
    """The installed package's ``attention`` in the candidate's slot."""
    attention = importlib.import_module(package).attention

    def op(q: Any, k: Any, v: Any, o: Any) -> Any:
        return attention(q, k, v, is_causal=causal)
    return op


def main(cases: str, dtype: str, package: str | None) -> None:
    for shape in fast_shapes(cases, dtype):
        slots = [("sdpa_default as candidate", sdpa_op("sdpa_default", shape)),
                 ("package's SDPA call as candidate", package_call(shape.causal))]
        if package:
            slots.append((f"{package}.attention as candidate", installed(package, shape.causal)))
        for label, cand in slots:
            res = time_case(cand, shape, ("sdpa_default",), fidelity=True)
            evo, base = res.timings[0], res.timings[1]
            busy = ""
            if evo.fidelity and base.fidelity:
                busy = f"  busy {base.fidelity.busy_us / evo.fidelity.busy_us:.3f}"
            print(f"{shape.tag:28s} {label:34s} candidate {evo.median_us:9.2f} us  baseline {base.median_us:9.2f} us  "
                  f"ratio {base.median_us / evo.median_us:.3f}{busy}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "F4c,F5f,F6f", sys.argv[2] if len(sys.argv) > 2 else "fp16",
         sys.argv[3] if len(sys.argv) > 3 else None)
