"""Pinned sub-spaces (issue 35): ``evo.family.space.pinned`` and ``parse_pins``, ``evo run --pin``
(replayed, so no GPU) with its pins kept by the study, ``evo bench-samplers --pin``, and the
flash_wgmma sub-space of scripts/gpu-wgmma-recording.sh (its size, and its printed ``evo run``
run on a recording)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from evo import paths
from evo.errors import EvoError
from evo.family.manifest import load_family
from evo.family.render import build_key, render
from evo.family.space import (Candidate, all_candidates, combinations, listable, make_candidate, mutations,
                              parse_pins, pin_families, pinned, pins_text, random_candidates, sample_valid)
from evo.samplerbench import kt_runner
from evo.samplerbench.problem import Problem
from evo.search.params import from_trial_params
from evo.store.candidates import invalid_id
from evo.store.recording import record_key
from evo.toolchain.build import compile_flags

RECORDING = paths.root() / "data" / "sweep-h200.json.gz"
SCRIPT = paths.root() / "scripts" / "gpu-wgmma-recording.sh"
WGMMA_POINTS = 768   # docs/search.md, "A sub-space of flash_wgmma"


def script_pins() -> list[str]:
    """The ``PINS=`` line of the recording script, as ``--pin`` items."""
    line = next(x for x in SCRIPT.read_text().splitlines() if x.startswith("PINS="))
    return line.removeprefix("PINS=").split(",")


def some_point(fam_name: str, pins: dict[str, object]) -> Candidate:
    """A valid point of the family that keeps ``pins`` and differs from the defaults elsewhere too."""
    fam = load_family(fam_name)
    defaults = make_candidate(fam)
    return next(c for c in all_candidates(fam) if all(c.p[k] == v for k, v in pins.items())
                and sum(c.p[k] != defaults.p[k] for k in c.p if k not in pins) >= 2)


def test_a_pinned_point_is_the_same_candidate() -> None:
    fam = load_family("flash_mma")
    sub = pinned(fam, {"STAGES": 3})
    point = some_point("flash_mma", {"STAGES": 3})
    cand = make_candidate(sub, point.p)
    assert cand == point and cand.key() == point.key() and invalid_id(cand) == invalid_id(point)
    assert record_key(cand.family, cand.p) == record_key(point.family, point.p)
    whole, part = render(point, fam), render(cand, sub)
    assert part.source == whole.source and part.entries == whole.entries
    keys = [build_key(r, compile_flags(f), "sm_90a", "nvcc test", {}) for r, f in ((whole, fam), (part, sub))]
    assert keys[0] == keys[1]   # the build key, whose hash is the candidate id


def test_pinning_shrinks_every_walk_of_the_space() -> None:
    fam = load_family("flash_mma")
    sub = pinned(fam, {"STAGES": 2, "SWIZZLE": "xor"})
    assert sub.params["STAGES"].values == (2,) and sub.defaults()["STAGES"] == 2
    assert combinations(sub) * 3 * len(fam.params["SWIZZLE"].values) == combinations(fam)
    whole = [c for c in all_candidates(fam) if c.p["STAGES"] == 2 and c.p["SWIZZLE"] == "xor"]
    assert list(all_candidates(sub)) == whole and list(all_candidates(fam)) != whole  # listed apart
    rng = random.Random(0)
    drawn = random_candidates(sub, 50, rng) + [c for c in [sample_valid(sub, rng)] if c is not None]
    neighbours = [c for c, _ in mutations(sub, whole[0], 1) + mutations(sub, whole[0], 2)]
    assert drawn and neighbours
    assert all(c.p["STAGES"] == 2 and c.p["SWIZZLE"] == "xor" for c in drawn + neighbours)


def test_the_wgmma_recording_sub_space_is_listable_and_as_documented() -> None:
    fam = load_family("flash_wgmma")
    assert not listable(fam)
    pins = parse_pins(script_pins(), [fam])
    (sub,) = pin_families([fam], pins)
    free = [n for n, p in sub.params.items() if len(p.values) > 1]
    assert free == ["WGS_D64", "BLOCK_N_D64", "WGS_D128", "BLOCK_N_D128", "PINGPONG3", "SOFTMAX_ILP", "Q_IN_REGS"]
    assert all(v == fam.params[g].default for g, v in pins["flash_wgmma"].items())   # pinned at the defaults
    assert not any(g.endswith(("_D96", "_D256")) for g in free) and "PACK_GQA" not in free
    assert listable(sub) and sum(1 for _ in all_candidates(sub)) == WGMMA_POINTS
    assert f"**{WGMMA_POINTS} valid points**" in (paths.root() / "docs" / "search.md").read_text()


@pytest.mark.parametrize(("items", "message"), [
    (["STAGES=2"], "name its family (FAMILY.STAGES=VALUE)"),
    (["flash_mma.NOPE=1"], "--pin flash_mma.NOPE=1: unknown parameter 'NOPE' for family flash_mma"),
    (["flash_mma.STAGES=7"], "--pin flash_mma.STAGES=7: parameter STAGES='7' is not allowed; allowed: 1, 2, 3"),
    (["flash_mma.STAGES"], "--pin takes GENE=VALUE or FAMILY.GENE=VALUE, not 'flash_mma.STAGES'"),
    (["nofamily.X=1"], "unknown family 'nofamily'"),
    (["flash_mma.STAGES=2", "flash_mma.STAGES=3"], "--pin flash_mma.STAGES is given twice"),
])
def test_bad_pins_are_one_line_errors(items: list[str], message: str) -> None:
    with pytest.raises(EvoError) as err:
        parse_pins(items)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unqualified_pins_need_one_owner_and_pinned_checks_its_values() -> None:
    mma, wgmma = load_family("flash_mma"), load_family("flash_wgmma")
    assert parse_pins(["STAGES_D64=3", "flash_mma.Q_IN_REGS=false"], [mma, wgmma]) == {
        "flash_wgmma": {"STAGES_D64": 3}, "flash_mma": {"Q_IN_REGS": False}}
    with pytest.raises(EvoError, match="Q_IN_REGS: a gene of flash_mma, flash_wgmma; spell it FAMILY.Q_IN_REGS"):
        parse_pins(["Q_IN_REGS=true"], [mma, wgmma])
    with pytest.raises(EvoError, match=r"no family of this search \(flash_mma\) has it"):
        parse_pins(["STAGES_D64=3"], [mma])
    with pytest.raises(EvoError, match="flash_wgmma is not a family of this search"):
        parse_pins(["flash_wgmma.STAGES_D64=3"], [mma])
    with pytest.raises(EvoError, match="cannot pin flash_mma.STAGES=2: allowed: 1, 2, 3"):
        pinned(mma, {"STAGES": "2"})   # the text, not the value
    with pytest.raises(EvoError, match="cannot pin NOPE of flash_mma"):
        pinned(mma, {"NOPE": 1})
    with pytest.raises(EvoError, match="its defaults break a constraint"):
        pinned(wgmma, {"PINGPONG3": True})   # needs three consumers somewhere; the defaults have two
    with pytest.raises(EvoError, match="--pin names flash_wgmma, which is not searched here"):
        pin_families([mma], {"flash_wgmma": {"STAGES_D64": 3}})
    assert pins_text({"flash_mma": {"STAGES": 2, "EXP2": False}}) == "flash_mma.STAGES=2,flash_mma.EXP2=false"


# ----------------------------------------------------------------------------- evo run --pin (replayed)


def evo(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVO_")} | {"EVO_HOME": str(cwd / "home")}
    return subprocess.run([sys.executable, "-m", "evo", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def trial_points(cwd: Path, study: str) -> list[dict[str, object]]:
    """The parameters of every trial of ``study`` in the database of ``cwd``'s EVO_HOME."""
    db = f"sqlite:///{cwd / 'home' / 'db' / 'evo.sqlite'}"
    trials = optuna.load_study(study_name=study, storage=db).trials
    return [dict(got[1]) for t in trials if (got := from_trial_params(t.params)) is not None]


REPLAY = ["run", "--replay", str(RECORDING), "--families", "flash_mma", "--seed", "1", "--batch", "4"]


def test_evo_run_searches_the_sub_space_and_the_study_keeps_its_pins(tmp_path: Path) -> None:
    first = evo(tmp_path, *REPLAY, "--trials", "8", "--pin", "STAGES=2", "--pin", "flash_mma.EXP2=false")
    assert first.returncode == 0, first.stderr
    assert "a sub-space, --pin flash_mma.STAGES=2,flash_mma.EXP2=false" in first.stderr + first.stdout
    db = f"sqlite:///{tmp_path / 'home' / 'db' / 'evo.sqlite'}"
    settings = optuna.load_study(study_name="evo-replay", storage=db).user_attrs["evo:settings"]
    assert settings["pins"] == {"flash_mma": {"STAGES": 2, "EXP2": False}}
    other = evo(tmp_path, *REPLAY, "--trials", "12", "--pin", "flash_mma.STAGES=3")
    assert other.returncode != 0 and "Traceback" not in other.stderr and other.stderr.count("\n") == 1
    assert ("study 'evo-replay' was run with --pin flash_mma.STAGES=2,flash_mma.EXP2=false, not "
            "flash_mma.STAGES=3") in other.stderr
    kept = evo(tmp_path, *REPLAY, "--trials", "12")   # no --pin: the study's
    assert kept.returncode == 0, kept.stderr
    points = trial_points(tmp_path, "evo-replay")
    assert len(points) == 12 and all(p["STAGES"] == 2 and p["EXP2"] is False for p in points)


def test_a_study_made_without_pins_refuses_them(tmp_path: Path) -> None:
    assert evo(tmp_path, *REPLAY, "--trials", "4").returncode == 0
    proc = evo(tmp_path, *REPLAY, "--trials", "8", "--pin", "STAGES=2")
    assert proc.returncode != 0 and "was run with --pin (none), not flash_mma.STAGES=2" in proc.stderr


@pytest.mark.parametrize(("pin", "message"), [
    ("NOPE=1", "no family of this search (flash_mma) has it"),
    ("STAGES=9", "parameter STAGES='9' is not allowed"),
    ("flash_wgmma.PACK_GQA=false", "flash_wgmma is not a family of this search (flash_mma)"),
])
def test_bad_pins_exit_non_zero_with_one_line_and_write_nothing(tmp_path: Path, pin: str, message: str) -> None:
    proc = evo(tmp_path, *REPLAY, "--trials", "2", "--pin", pin)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("evo: error: --pin ") and message in proc.stderr and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_the_recording_scripts_evo_run_runs_on_a_recording(tmp_path: Path) -> None:
    """The script's own ``evo run`` line (WR_DRY=1 prints it), replayed instead of timed: its pins
    parse, its study is created with them, and every trial lies in the sub-space."""
    (tmp_path / "out").mkdir()
    printed = subprocess.run(["bash", str(SCRIPT)], cwd=paths.root(), capture_output=True, text=True, timeout=60,
                             env=os.environ | {"WR_DRY": "1", "OUT": str(tmp_path / "out")})
    assert printed.returncode == 0, printed.stderr
    line = next(x for x in printed.stdout.splitlines() if " evo run " in x)
    assert next(x for x in printed.stdout.splitlines() if " evo export-sweep " in x).split()[4:7] == [
        "--fidelity", "screen", "--out"]
    argv = line.split()[3:] + ["--trials", "6", "--replay", str(RECORDING)]   # the last --trials wins
    proc = evo(tmp_path, *argv)
    assert proc.returncode == 0, proc.stderr
    pins = parse_pins(script_pins(), [load_family("flash_wgmma")])["flash_wgmma"]
    points = trial_points(tmp_path, "wgmma-rec")
    assert len(points) == 6 and all(p[g] == v for p in points for g, v in pins.items())


# ----------------------------------------------------------------------------- bench-samplers --pin


def test_a_pinned_problem_is_the_recordings_sub_space() -> None:
    whole = Problem.load(RECORDING, ["flash_mma"])
    part = Problem.load(RECORDING, ["flash_mma"], pins={"flash_mma": {"STAGES": 2}, "flash_wgmma": {"PINGPONG": True}})
    assert part.pins == {"flash_mma": {"STAGES": 2}}   # a family this problem does not benchmark is ignored
    assert part.size == sum(c.p["STAGES"] == 2 for _, c in whole.points) < whole.size
    assert all(c.p["STAGES"] == 2 for _, c in part.points) and part.best <= whole.best
    assert part.defaults[0].p["STAGES"] == 2
    space = kt_runner.Space(part)
    assert "STAGES" not in space.tune_params and len(space.keys) == part.size
    assert all("STAGES" not in space.config(c) for _, c in part.points[:5])


@pytest.mark.skipif(kt_runner.available() is not None, reason="Kernel Tuner is not installed")
def test_kernel_tuner_walks_the_pinned_sub_space(tmp_path: Path) -> None:
    from kernel_tuner.searchspace import Searchspace

    part = Problem.load(RECORDING, ["flash_mma"], pins={"flash_mma": {"STAGES": 2}})
    space = kt_runner.write_cache(part, tmp_path / "c.json")
    listed = Searchspace(space.tune_params, [space.restriction], 1024, **kt_runner.SEARCHSPACE).list
    assert len(listed) == part.size
    trace = kt_runner.run_kt(space, tmp_path / "c.json", "random_sample", 0, False, budget=20)
    assert 0 < trace.tally.evaluations <= 20 and all(k is None or k in dict(part.points) for k in trace.proposed)


def test_bench_samplers_pin_replays_the_sub_space_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "bench.md"
    proc = evo(tmp_path, "bench-samplers", "--recording", f"{RECORDING}:flash_mma", "--pin", "STAGES=2",
               "--seeds", "2", "--samplers", "evo,random", "--kt", "none", "--jobs", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    size = Problem.load(RECORDING, ["flash_mma"], pins={"flash_mma": {"STAGES": 2}}).size
    text = out.read_text()
    assert f"; {size} valid points," in text and "--pin STAGES=2" in text
    assert "Sub-space: `--pin flash_mma.STAGES=2`" in text and "Free genes: flash_mma: BLOCK_M, BLOCK_N" in text
    data = json.loads(out.with_suffix(".json").read_text())["recordings"][0]
    assert data["pins"] == {"flash_mma": {"STAGES": 2}} and data["size"] == size and len(data["runs"]) == 8
