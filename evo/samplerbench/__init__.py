"""The sampler benchmark (``evo bench-samplers``): samplers replayed against recordings under
one counting rule, with honest statistics.

- :mod:`~evo.samplerbench.problem`: the space, outcomes and target of a recording; the counting rule.
- :mod:`~evo.samplerbench.optuna_runner`: evo's and Optuna's samplers, driven like ``evo run --replay``.
- :mod:`~evo.samplerbench.kt_runner`: Kernel Tuner's strategies in its simulation mode.
- :mod:`~evo.samplerbench.entrants`: which samplers, and each one's budget.
- :mod:`~evo.samplerbench.run`: all runs of a problem, in parallel.
- :mod:`~evo.samplerbench.stats`, :mod:`~evo.samplerbench.report`, :mod:`~evo.samplerbench.plot`:
  quartiles and the U test, the markdown tables, the figure.
- :mod:`~evo.samplerbench.doc`: the whole of docs/sampler-benchmark.md from one command.
"""
