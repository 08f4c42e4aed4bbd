"""evo: evolve fast attention (SDPA forward) CUDA kernels from Jinja2 template families.

The package is a pipeline of small stages (see docs/design.md): ``space`` validates a candidate
against its family manifest, ``render`` turns it into CUDA source, ``build`` compiles it to a
cubin, the GPU ``worker`` gates (GREEN) and times (FAST) it, ``store`` keeps everything, and
``search`` proposes the next candidates.
"""

__version__ = "0.1.0"
