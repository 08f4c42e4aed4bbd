"""evo: evolve fast attention (SDPA forward) CUDA kernels from Jinja2 template families.

The package is a pipeline of stages, a subpackage each (docs/design.md, Layers): ``family``
validates a candidate against its manifest and renders its CUDA source, ``toolchain`` compiles it
to a cubin, the ``gpu`` worker gates (GREEN) and times (FAST) it, ``store`` keeps everything,
``search`` proposes the next candidates, ``analysis`` and ``products`` turn the store into
lineage, insights, packages and benchmarks.

The Python API (:mod:`evo.api`, docs/api.md) is reachable from here -- its functions, one per
command: ``evo.open_db``, ``evo.run``, ``evo.run_report``, ``evo.lineage_graph``,
``evo.show_candidate``, ``evo.study_insights``, ``evo.evaluate_candidate``, ``evo.benchmark``,
``evo.promote_winners`` and the rest -- and loads on first use, so that ``import evo`` stays
light. The records and constants they use are on :mod:`evo.api`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evo.version import __version__

__all__ = ["__version__", "bench_samplers", "benchmark", "benchmark_seeds", "build_candidates", "candidate", "doctor",
           "evaluate_candidate", "export_sweep", "fast_shapes", "lineage_graph", "load_candidate", "open_db",
           "promote_winners", "run", "run_report", "screen_errors", "show_candidate", "study_insights", "write_report"]
API = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from evo.api import (bench_samplers, benchmark, benchmark_seeds, build_candidates, candidate, doctor,
                         evaluate_candidate, export_sweep, fast_shapes, lineage_graph, load_candidate, open_db,
                         promote_winners, run, run_report, screen_errors, show_candidate, study_insights, write_report)


def __getattr__(name: str) -> Any:
    """The API's functions, imported from :mod:`evo.api` when first asked for."""
    if name in API:
        from evo import api

        return getattr(api, name)
    raise AttributeError(f"module 'evo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
