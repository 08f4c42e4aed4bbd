"""``--sampler`` names."""

from __future__ import annotations

import pytest

from evo.errors import EvoError
from evo.manifest import load_family
from evo.search.sampler_evo import EvoSampler
from evo.search.sampler_ga import GaSampler
from evo.search.samplers import SAMPLERS, make_sampler


def test_every_name_builds_a_sampler_and_evo_is_the_model_guided_one() -> None:
    fams = [load_family("flash_scalar")]
    for name in SAMPLERS:
        assert make_sampler(name, fams, 0) is not None
    assert isinstance(make_sampler("evo", fams, 0), EvoSampler)
    ga = make_sampler("evo-ga", fams, 0, warm=False)
    assert isinstance(ga, GaSampler) and ga.warm is False


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(EvoError, match="unknown sampler"):
        make_sampler("annealing", [load_family("flash_scalar")])
