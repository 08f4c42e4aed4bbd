"""The seed campaigns' run (evo/products/seeds.py) end to end on CPU: the seed rows of the Python-module
families are really built, then gated and timed, and the SDPA sweep timed, by a stand-in for
evo.products.seeds' GPU worker target (tests/fixtures/worker/seed_standins.py); the record and
BENCHMARKS.md are written as on the GPU host. Also ``python -m evo.products.seeds`` and
``evo bench --seeds/--sweep``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evo.products import seeds
from evo.cli import main
from evo.gpu.worker import Worker

FIXTURES = Path(__file__).parent / "fixtures"
GROUPS = ("pipeline", "triton")  # Python-module families: "building" them needs no nvcc


@pytest.fixture
def gpu_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, object]:
    """A GPU (as far as seeds.run asks) whose worker is the stand-in; what the worker was started
    for is recorded. ``env`` goes into the worker's environment."""
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    monkeypatch.setattr(seeds, "require_gpu", lambda: 1)
    host: dict[str, object] = {"targets": [], "env": {}}

    def worker(device: int, target: str) -> Worker:
        host["targets"].append(target)  # type: ignore[attr-defined]
        return Worker(device, "seed_standins:serve", env=host["env"])  # type: ignore[arg-type]

    monkeypatch.setattr(seeds, "Worker", worker)
    return host


def test_the_seed_rows_and_the_sweep_are_measured_and_recorded(gpu_host: dict[str, object], tmp_path: Path) -> None:
    out = tmp_path / "benchmarks"
    lines: list[str] = []
    path = seeds.run(out, GROUPS, sweep=True, timeout_s=120, log=lines.append)
    assert gpu_host["targets"] == ["evo.products.seeds:serve"]  # one worker, seeds' own target
    record = json.loads(path.read_text())
    day = record["created"][:10].replace("-", "")
    assert path == out / f"seeds-h100-80gb-hbm3-{day}-{record['git_sha']}.json"
    assert record["kind"] == "seeds" and record["gpu"] == "NVIDIA H100 80GB HBM3" and record["complete"] is True
    assert record["versions"]["cudnn"] == "91900" and record["fast"] == {"rounds": 3, "reps": 5,
                                                                        "backends": list(seeds.SEED_BACKENDS)}
    rows = [r for r in seeds.ROWS if r.group in GROUPS]
    assert [(r["group"], r["step"]) for r in record["rows"]] == [(r.group, r.step) for r in rows]
    for got, row in zip(record["rows"], rows, strict=True):
        assert got["status"] == "fast" and re.fullmatch(r"[0-9a-f]{64}", got["candidate_id"])
        assert got["green_checks"] == len(row.shapes) and [c["case"] for c in got["cases"]] == [s.case for s in row.shapes]
        assert all(c["us"] == {"evo": 7.0, **{b: 10.0 for b in seeds.SEED_BACKENDS}} for c in got["cases"])
    # the two Triton rows share their shapes; each candidate was built and evaluated once
    assert len({r["candidate_id"] for r in record["rows"]}) == len(rows)
    sweep = record["sweep"]
    assert sweep["backends"] == list(seeds.SWEEP_BACKENDS) and sweep["grid"]["L"] == [512, 2048, 8192, 16384]
    assert len(sweep["points"]) == len(seeds.sweep_shapes()) and sweep["points"][0]["us"]["sdpa_flash"] == 5.12
    assert lines[0] == f"built {len(rows)} seed candidates in " + lines[0].split(" in ")[1]
    assert sum(" fast " in line for line in lines) == len(rows) and lines[-1].startswith("sweep    48 shapes x 4 backends")
    md = (tmp_path / "BENCHMARKS.md").read_text()
    assert "Seed campaigns" in md and "Triton flash BM=64 BN=128 + TMA descriptors" in md
    assert list((out / "plots").glob("*.svg"))


def test_a_failed_sweep_is_an_error_and_writes_nothing(gpu_host: dict[str, object], tmp_path: Path) -> None:
    gpu_host["env"] = {"STANDIN_SWEEP": "fail"}
    with pytest.raises(seeds.EvoError, match="the SDPA sweep failed: crashed: CUDA error: out of memory"):
        seeds.run(tmp_path / "benchmarks", (), sweep=True, timeout_s=60, log=lambda s: None)
    assert not (tmp_path / "benchmarks").exists()


def test_a_run_cut_short_keeps_the_rows_it_measured(gpu_host: dict[str, object], tmp_path: Path) -> None:
    """The rows are written as they are measured: a sweep that fails afterwards (or a kill)
    leaves them in a record marked incomplete."""
    gpu_host["env"] = {"STANDIN_SWEEP": "fail"}
    out = tmp_path / "benchmarks"
    with pytest.raises(seeds.EvoError, match="the SDPA sweep failed"):
        seeds.run(out, ("pipeline",), sweep=True, timeout_s=60, log=lambda s: None)
    (path,) = out.glob("seeds-*.json")
    record = json.loads(path.read_text())
    assert record["complete"] is False and [r["group"] for r in record["rows"]] == ["pipeline"]
    assert record["rows"][0]["status"] == "fast" and record["sweep"] is None and not list(out.glob("*.part"))


def test_python_m_evo_seeds_writes_the_rows_it_is_asked_for(gpu_host: dict[str, object], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    assert seeds.main(["--only", "pipeline", "--no-sweep", "--out", str(out), "--timeout", "60"]) == 0
    (path,) = out.glob("seeds-*.json")
    record = json.loads(path.read_text())
    assert [r["group"] for r in record["rows"]] == ["pipeline"] and record["sweep"] is None
    assert capsys.readouterr().out.strip().endswith(f"wrote {path} and {tmp_path / 'BENCHMARKS.md'}")


def test_evo_bench_sweep_runs_the_sweep_alone(gpu_host: dict[str, object], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    assert main(["bench", "--sweep", "--out", str(out), "--timeout", "60"]) == 0
    (path,) = out.glob("seeds-*.json")
    record = json.loads(path.read_text())
    assert record["rows"] == [] and len(record["sweep"]["points"]) == 48
    assert f"wrote {path}" in capsys.readouterr().out.replace("\n", "")


@pytest.mark.parametrize("extra", [["--best", "2"], ["--clocks", "burst"]])
def test_evo_bench_seeds_refuses_candidate_options(gpu_host: dict[str, object], tmp_path: Path, extra: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--seeds", *extra, "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err == ("evo: error: --seeds / --sweep measure their own shapes their own way: leave "
                                       "out --package, --id, --best, --cases and --clocks\n")
    assert gpu_host["targets"] == [] and not (tmp_path / "b").exists()


# ----------------------------------------------------------------------------- the worker side


class SweepGpu:
    """What time_sweep uses of evo.gpu.timing and torch.cuda, on CPU: inputs are tagged lists, each
    backend behaves as ``behaviour[backend]`` says (``time``: samples of L / 100 us; ``refuse``:
    SDPA refuses the shape; ``capture``: graph capture fails; ``oom``: out of memory while
    capturing), and every timer closed, input list cleared and cache emptied is counted."""

    def __init__(self, behaviour: dict[str, str]) -> None:
        self.behaviour = behaviour
        self.closed: list[str] = []
        self.synced = self.emptied = 0
        self.inputs: list[list[object]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        from evo.gpu import timing

        gpu = self

        class Timer:
            def __init__(self, rotation: timing.Rotation, *, warmup: int) -> None:
                self.backend, self.shape = rotation.op.backend, rotation.sets[0]
                what = gpu.behaviour[self.backend]
                if what == "capture":
                    raise RuntimeError("operation not permitted when stream is capturing")
                if what == "oom":
                    raise torch.cuda.OutOfMemoryError("CUDA out of memory")

            def sample(self, reps: int) -> list[float]:
                return [self.shape.L / 100 + i for i in range(reps)]  # median: L / 100 + 1

            def close(self) -> None:
                gpu.closed.append(self.backend)

        def sdpa_op(backend: str, shape: object) -> object:
            def op(q: object, k: object, v: object, o: object) -> None:
                pass

            op.backend = backend  # type: ignore[attr-defined]
            return op

        def make_inputs(shape: object, seed: int) -> list[object]:
            sets = [shape, shape]
            gpu.inputs.append(sets)
            return sets

        def synchronize() -> None:
            gpu.synced += 1

        def empty_cache() -> None:
            gpu.emptied += 1

        monkeypatch.setattr(timing, "GraphTimer", Timer)
        monkeypatch.setattr(timing, "sdpa_op", sdpa_op)
        monkeypatch.setattr(timing, "make_inputs", make_inputs)
        monkeypatch.setattr(timing, "runs", lambda op, inputs: gpu.behaviour[op.backend] != "refuse")
        monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
        monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
        monkeypatch.setattr(seeds, "progress", lambda note: None)


def test_the_sweep_times_each_backend_that_takes_a_shape_and_leaves_out_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = SweepGpu({"sdpa_flash": "time", "sdpa_cudnn": "refuse", "sdpa_efficient": "capture",
                    "sdpa_default": "oom"})
    gpu.install(monkeypatch)
    shapes = seeds.sweep_shapes()[:2]
    points = seeds.time_sweep(shapes, seeds.SWEEP_BACKENDS, reps=3)
    assert points == [{"B": s.B, "H": s.H, "L": s.L, "D": s.D, "us": {"sdpa_flash": s.L / 100 + 1}} for s in shapes]
    assert gpu.closed == ["sdpa_flash"] * 2  # every timer made is closed
    assert gpu.synced == 4                   # after each failed capture (it raises if the context is lost)
    assert gpu.inputs == [[], []] and gpu.emptied == 2  # each shape's inputs freed before the next


def test_seeds_worker_target_answers_sweeps_itself_and_passes_the_rest_to_evaluate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from evo.gpu import evaluate
    from evo.results import Evaluation, Status
    from evo.gpu.worker import EvalRequest

    SweepGpu({b: "time" for b in seeds.SWEEP_BACKENDS}).install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(evaluate, "_warm_up", lambda: None)
    monkeypatch.setattr(evaluate, "device_info", lambda: {"name": "Fake GPU"})
    evaluated: list[str] = []
    monkeypatch.setattr(evaluate, "evaluate", lambda request, session: evaluated.append(request.build_id)
                        or Evaluation(request.build_id, Status.FAST, "gated and timed"))

    class Conn:
        def __init__(self, requests: list[object]) -> None:
            self.requests, self.sent = requests, []

        def recv(self) -> object:
            return self.requests.pop(0)

        def send(self, obj: object) -> None:
            self.sent.append(obj)

    shapes = tuple(seeds.sweep_shapes()[:3])
    conn = Conn([EvalRequest("row", "x.py", (), green=True, fast_cases=shapes[:1]),
                 EvalRequest("sdpa-sweep", "", (), green=False, fast_cases=shapes,
                             options={"sweep": True, "backends": ("sdpa_flash", "sdpa_default")}),
                 None])
    seeds.serve(conn)  # type: ignore[arg-type]
    row, sweep = conn.sent
    assert evaluated == ["row"] and (row.build_id, row.status) == ("row", Status.FAST)
    assert (sweep.build_id, sweep.status, sweep.reason) == ("sdpa-sweep", Status.FAST, "sweep timed")
    assert sweep.device["name"] == "Fake GPU"
    points = json.loads(sweep.device["sweep"])
    assert [(p["L"], sorted(p["us"])) for p in points] == [(s.L, ["sdpa_default", "sdpa_flash"]) for s in shapes]
