"""The sampler benchmark (``evo bench-samplers``): samplers replayed against recordings under
one counting rule, with honest statistics.

- :mod:`~evo.search.bench.problem`: the space, outcomes and target of a recording; the counting rule.
- :mod:`~evo.search.bench.optuna_runner`: evo's and Optuna's samplers, driven like ``evo run --replay``.
- :mod:`~evo.search.bench.kt_runner`: Kernel Tuner's strategies in its simulation mode.
- :mod:`~evo.search.bench.entrants`: which samplers, and each one's budget.
- :mod:`~evo.search.bench.run`: all runs of a problem, in parallel.
- :mod:`~evo.search.bench.stats`, :mod:`~evo.search.bench.report`, :mod:`~evo.search.bench.plot`:
  quartiles and the U test, the markdown tables, the figure.
- :mod:`~evo.search.bench.doc`: the whole of docs/sampler-benchmark.md from one command.
"""
