"""``--sampler`` names."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from pathlib import Path

import optuna
import pytest

from evo.cli import main
from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.space import make_candidate
from evo.search.params import FAMILY, from_trial_params, param_name
from evo.search.proposal import PROPOSAL, SweepSampler, drawn_params
from evo.search.sampler_evo import EvoSampler
from evo.search.sampler_gp import GpSampler
from evo.search.samplers import SAMPLERS, make_sampler
from evo.store.recording import record_key
from synthetic_sweep import make_recording


def test_every_name_builds_a_sampler_and_evo_is_the_evolutionary_one() -> None:
    fams = [load_family("flash_scalar")]
    for name in SAMPLERS:
        assert make_sampler(name, fams, 0) is not None
    evo = make_sampler("evo", fams, 0)
    assert isinstance(evo, EvoSampler) and evo.warm is True
    gp = make_sampler("evo-gp", fams, 0, warm=False)
    assert isinstance(gp, GpSampler) and gp.warm is False
    assert make_sampler("evo", fams, 0, warm=False).warm is False  # type: ignore[attr-defined]


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(EvoError, match="unknown sampler"):
        make_sampler("annealing", [load_family("flash_scalar")])


def test_evo_gp_without_scikit_learn_is_one_line_before_any_database_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    with pytest.raises(EvoError, match=r"needs scikit-learn: pip install 'evo-kernels\[gp\]'"):
        make_sampler("evo-gp", [load_family("flash_scalar")])
    rec = make_recording(tmp_path / "sweep-synthetic.json.gz", seed=1)
    db = tmp_path / "evo.sqlite"
    assert main(["run", "--sampler", "evo-gp", "--replay", str(rec), "--db", str(db), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evo: error: the evo-gp sampler needs scikit-learn") and err.count("\n") == 1
    assert not db.exists()


def test_optunas_gp_without_scipy_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)
    with pytest.raises(EvoError, match=r"needs scipy: pip install 'evo-kernels\[gp\]'"):
        make_sampler("gp", [load_family("flash_scalar")])


def test_drafts_are_asked_in_order_unless_another_worker_took_their_candidate_meanwhile() -> None:
    """A worker drafts its batch before the ask lock (ProposalSampler.draft); a candidate that
    another worker's trial holds by the time of the asks is skipped, and an ask past the drafts
    proposes afresh, from the study as the batch read it."""
    sampler = SweepSampler([load_family("flash_scalar")], seed=0, order="grid")
    study = optuna.create_study(sampler=sampler)
    sampler.draft(study, study.get_trials(deepcopy=False), 2)
    first, second = sampler._drafts
    assert record_key(first["family"], first["params"]) != record_key(second["family"], second["params"])
    other = optuna.load_study(study_name=study.study_name, storage=study._storage)  # another worker
    other.enqueue_trial({FAMILY: first["family"]} | {param_name(first["family"], n): v
                                                      for n, v in first["params"].items()})
    other.ask()
    with sampler.batch(study.get_trials(deepcopy=False)):
        study.ask(), study.ask()
    held = [from_trial_params(drawn_params(t)) for t in study.get_trials(deepcopy=False)]
    assert held[0] == (first["family"], first["params"]) and held[1] == (second["family"], second["params"])
    assert held[2] is not None and held[2] not in held[:2]  # past the drafts: a fresh, unseen proposal
    assert sampler._drafts == []


def test_a_batch_may_leave_its_proposals_to_its_caller() -> None:
    """batch(write=False): the asks store no proposal on their trials; unwritten() hands them to
    the caller once, by storage id (the search loop stores them with the batch's other system
    attrs, in one write), and the proposals still answer the trials' parameters."""
    sampler = SweepSampler([load_family("flash_scalar")], seed=0, order="grid")
    study = optuna.create_study(sampler=sampler)
    with sampler.batch(study.get_trials(deepcopy=False), write=False):
        a, b = study.ask(), study.ask()
        kept = sampler.unwritten()
        assert list(kept) == [a._trial_id, b._trial_id] and sampler.unwritten() == {}
    assert all(PROPOSAL not in t.system_attrs for t in study.get_trials(deepcopy=False))
    assert a.suggest_categorical(FAMILY, ["flash_scalar"]) == kept[a._trial_id]["family"]
    assert sampler.unwritten() == {}  # outside a batch there is nothing to hand over


def test_the_evolutionary_sampler_mutates_only_genes_the_studys_kernels_read() -> None:
    """A study of the D=64 non-causal kernels (L7's) never gets a child that changes only the D=96, D=128 or
    D=256 tiles (the same machine code for every case it times, tests/test_manifest_reads.py); a sampler told
    no kernels, or every kernel, mutates them all."""
    fam = load_family("flash_wgmma")
    parent = make_candidate(fam, {"BLOCK_N_D64": 64, "BLOCK_N_D96": 64, "BLOCK_N_D128": 64, "BLOCK_N_D256": 48})
    others = {n for n, p in fam.params.items() if p.reads and p.reads != "D == 64"}
    l7 = EvoSampler([fam], 0, kernels=[(64, "bf16", False), (64, "fp16", False)])
    changed = {n for g in (1, 2) for _, m, _ in l7.mutations_of(fam, parent, g) for n in m}
    assert others and not changed & others
    assert {"WGS_D64", "BLOCK_N_D64", "PINGPONG", "LAZY_D128"} <= changed   # its own tiles, shared genes
    every = [(d, dt, c) for d in fam.head_dims for dt in fam.dtypes for c in (False, True)]
    for sampler in (EvoSampler([fam], 0), EvoSampler([fam], 0, kernels=every)):
        assert others <= {n for _, m, _ in sampler.mutations_of(fam, parent, 1) for n in m}
    assert make_sampler("evo", [fam], 0, kernels=[(64, "bf16", False)]).kernels == ((64, "bf16", False),)  # type: ignore[attr-defined]


def test_a_crossover_takes_the_genes_no_study_kernel_reads_from_its_first_parent() -> None:
    """Two elites that differ in their D=128 tiles alone, in a study of D=64 kernels: any mix of them would
    compile as one of them, so no crossover is proposed. With their D=64 tiles differing too, every child
    has the D=128 tiles of the parent it names first."""
    fam = load_family("flash_wgmma")
    d128 = ("BLOCK_N_D128", "STAGES_D128")
    a = make_candidate(fam, {"BLOCK_N_D128": 64, "STAGES_D128": 3})
    b = make_candidate(fam, {"BLOCK_N_D128": 96, "STAGES_D128": 2})
    c = make_candidate(fam, {"BLOCK_N_D128": 96, "STAGES_D128": 2, "BLOCK_N_D64": 64, "STAGES_D64": 3})
    sampler = EvoSampler([fam], 0, kernels=[(64, "bf16", False)])
    elites = {0: a, 1: b, 2: c}
    trials = {n: SimpleNamespace(number=n) for n in elites}
    assert sampler.crossover([(trials[0], a), (trials[1], b)], set()) is None    # type: ignore[list-item]
    children = [sampler.crossover([(trials[0], a), (trials[2], c)], set()) for _ in range(20)]  # type: ignore[list-item]
    made = [p for p in children if p is not None]
    assert made and all(tuple(p.candidate.p[g] for g in d128) == tuple(elites[p.parents[0]].p[g] for g in d128)
                        for p in made)
    assert {p.parents[0] for p in made} == {0, 2}       # either elite may come first
