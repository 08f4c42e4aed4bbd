"""The search: Optuna ask-and-tell over kernel families, with evo's own samplers.

- :mod:`evo.search.driver`: ``evo run`` minus the terminal (:func:`~evo.search.driver.run`).
- :mod:`evo.search.loop`: the batch loop (:class:`~evo.search.loop.Search`), with its
  collaborators: :mod:`evo.search.records` (what it passes around and reports),
  :mod:`evo.search.parents` (lineage edges), :mod:`evo.search.outcomes` (what a measurement
  scores), :mod:`evo.search.tell` (telling trials, the run's summary) and
  :mod:`evo.search.liveness` (dead workers' trials and runs).
- :mod:`evo.search.evaluators`: GPU, replay and build-only measurement sources.
- :mod:`evo.search.sampler_evo` (with :mod:`evo.search.prescreen`), :mod:`evo.search.sampler_gp`
  (with :mod:`evo.search.surrogate`; both encode genes with :mod:`evo.search.encoding`),
  :mod:`evo.search.proposal`, :mod:`evo.search.samplers`: samplers.
- :mod:`evo.samplerbench`: ``evo bench-samplers``, samplers compared on a recording.
- :mod:`evo.search.params`: how a candidate is spelled as Optuna params.
- :mod:`evo.search.study`, :mod:`evo.search.resume`: the study, its settings, heartbeats and
  retries of the trials of a worker that died.
- :mod:`evo.search.fanout`: ``evo run --gpus``, one worker process per GPU.

docs/search.md explains the choices; docs/scale-out.md, many workers.
"""
