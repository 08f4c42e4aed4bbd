"""evo's Python API (evo/api.py) on CPU: every workflow driven through a CPU stand-in worker,
one run-bookkeeping path (done, failed, interrupted), bad input refused before any write, and
``import evo`` staying light."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import evo
from evo import api
from evo.errors import EvoError
from evo.results import Status
from evo.store import Store
from store_fixture import populate

FIXTURES = Path(__file__).parent / "fixtures"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The tiny test family, a private build cache and EVO_HOME, the stand-ins importable."""
    monkeypatch.setenv("EVO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES / "templates"))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    monkeypatch.delenv("EVO_DB", raising=False)
    monkeypatch.syspath_prepend(str(FIXTURES / "worker"))
    yield tmp_path


def runs(store: Store) -> list[tuple[str, str]]:
    """(command, status) of every run so far, oldest first."""
    out = []
    for i in range(1, 100):
        view = store.get_run(i)
        if view is None:
            break
        out.append((view.command, view.status))
    return out


def test_import_evo_loads_neither_the_api_nor_torch_nor_optuna() -> None:
    code = ("import sys, evo; heavy = [m for m in ('evo.api', 'torch', 'optuna', 'evo.store') if m in sys.modules];"
            "assert not heavy, heavy; assert callable(evo.run) and 'evo.api' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_package_names_every_api_function() -> None:
    assert {name for name in evo.__all__ if name != "__version__"} == evo.API
    assert all(getattr(evo, name) is getattr(api, name) for name in evo.API)
    with pytest.raises(AttributeError):
        evo.no_such_thing  # noqa: B018 - the attribute access is what is tested


def test_open_db_refuses_a_missing_file_when_it_must_not_create(tmp_path: Path) -> None:
    with pytest.raises(EvoError, match="no database at"):
        api.open_db(tmp_path / "absent.sqlite", create=False)
    with pytest.raises(EvoError, match="does not exist"):
        api.open_db(tmp_path / "no" / "folder.sqlite")
    assert not (tmp_path / "absent.sqlite").exists()
    with api.open_db(tmp_path / "new.sqlite") as store:
        assert api.open_db(store) is store and store.counts()["evo_candidates"] == 0


def test_a_mapping_of_params_is_checked_against_the_family(env: Path) -> None:
    assert api.candidate("tiny", {"ROWS": 32}).candidate.p["ROWS"] == 32
    assert api.candidate("tiny", {"ROWS": "32"}) == api.candidate("tiny", ["ROWS=32"])
    with pytest.raises(EvoError, match="unknown parameter 'NOPE'"):
        api.candidate("tiny", {"NOPE": 1})
    with pytest.raises(EvoError, match="not allowed"):
        api.candidate("tiny", {"ROWS": 48})


def test_the_run_record_says_done_failed_or_interrupted(tmp_path: Path) -> None:
    with api.open_db(tmp_path / "runs.sqlite") as store:
        with store.recording("a"):
            pass
        with pytest.raises(ValueError), store.recording("b"):
            raise ValueError("boom")
        with pytest.raises(KeyboardInterrupt), store.recording("c"):
            raise KeyboardInterrupt
        assert runs(store) == [("a", "done"), ("b", "failed"), ("c", "interrupted")]


@needs_nvcc
def test_build_compiles_stores_and_reports_progress(env: Path) -> None:
    db = env / "evo.sqlite"
    seen: list[object] = []
    built = api.build_candidates(["tiny"], {"FAULT": "none"}, random=2, seed=3, arch="sm_90a", db=db,
                                 on_start=seen.append, on_done=seen.append)
    assert seen[0] == 2 and len(seen) == 3 and len(built.results) == 2
    assert all(r.status is Status.BUILT for r in built.results) and len(built.compiled) == 2
    again = api.build_candidates(["tiny"], {"FAULT": "none"}, random=2, seed=3, arch="sm_90a", db=db)
    assert not again.compiled and {r.build_id for r in again.results} == set(built.rendered)
    with api.open_db(db, create=False) as store:
        assert runs(store) == [("evo build", "done")] * 2
        assert {store.get(b).candidate.status for b in built.rendered} == {Status.BUILT}


@needs_nvcc
def test_bad_build_input_writes_nothing(env: Path) -> None:
    with pytest.raises(EvoError, match="unsupported arch"):
        api.build_candidates(["tiny"], arch="sm_75", db=env / "evo.sqlite")
    with pytest.raises(EvoError, match="no valid candidate"):
        api.build_candidates(["tiny"], {"ROWS": 128, "SMEM_KB": 2}, random=1, db=env / "evo.sqlite")
    assert not (env / "evo.sqlite").exists()


@needs_nvcc
def test_evaluate_gates_times_and_stores_through_a_worker_target(env: Path) -> None:
    db = env / "evo.sqlite"
    notes: list[str] = []
    done = api.evaluate_candidate("tiny", {"ROWS": 32}, cases="F1", db=db, arch="sm_90a",
                                  target="standins:serve_green", note=notes.append)
    ev = done.evaluation
    assert ev.status is Status.FAST and {t.shape.tag for t in ev.timings} == {"F1-fp16", "F1c-fp16"}
    assert len(notes) == 1 and "tiny(ROWS=32" in notes[0]
    again = api.evaluate_candidate(candidate_id=done.candidate_id[:10], cases=["F1"], db=db,
                                   target="standins:serve_green")
    assert again.candidate_id == done.candidate_id and again.asked is None
    with api.open_db(db, create=False) as store:
        assert runs(store) == [("evo eval", "done")] * 2
        record = store.get(done.candidate_id)
        assert record.candidate.status is Status.FAST and len(record.evaluations) == 2


@needs_nvcc
def test_ctrl_c_during_an_evaluation_is_recorded_as_interrupted(env: Path) -> None:
    def stop(_text: str) -> None:
        raise KeyboardInterrupt

    db = env / "evo.sqlite"
    with pytest.raises(KeyboardInterrupt):
        api.evaluate_candidate("tiny", cases="F1", db=db, target="standins:serve_green", note=stop)
    with api.open_db(db, create=False) as store:
        assert runs(store) == [("evo eval", "interrupted")]


@needs_nvcc
def test_a_candidate_that_does_not_build_is_an_error_and_a_failed_run(env: Path) -> None:
    db = env / "evo.sqlite"
    with pytest.raises(EvoError, match="compile_failed"):
        api.evaluate_candidate("tiny", {"FAULT": "syntax"}, cases="F1", db=db, target="standins:serve_green")
    with api.open_db(db, create=False) as store:
        assert runs(store) == [("evo eval", "failed")]


def test_evaluate_without_a_target_needs_a_gpu(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.gpu.worker.gpu_count", lambda: 0)
    with pytest.raises(EvoError, match="no CUDA GPU"):
        api.evaluate_candidate("tiny", db=env / "evo.sqlite")
    with pytest.raises(EvoError, match="no CUDA GPU"):
        api.benchmark(package="evo_attn")
    assert not (env / "evo.sqlite").exists()


@needs_nvcc
def test_benchmark_times_the_best_stored_candidates_and_writes_the_record(env: Path) -> None:
    db = env / "evo.sqlite"
    done = api.evaluate_candidate("tiny", cases="F1", db=db, target="standins:serve_green")
    bench = api.benchmark(best=1, cases="F1", db=db, out=env / "benchmarks", target="standins:serve_bench")
    assert bench.problems == [] and bench.path.parent == env / "benchmarks"
    record = json.loads(bench.path.read_text())
    assert {c["candidate_id"] for c in record["cases"]} == {done.candidate_id}
    assert (env / "BENCHMARKS.md").is_file()
    with pytest.raises(EvoError, match="choose one"):
        api.benchmark([done.candidate_id], package="x", target="standins:serve_bench")


def test_run_refuses_gpus_with_a_target(env: Path) -> None:
    with pytest.raises(EvoError, match="leave one out"):
        api.run(env / "evo.sqlite", gpus="0", target="standins:serve_green")


def test_run_refuses_a_pruning_bar_it_does_not_know_or_cannot_apply(env: Path) -> None:
    from evo.search.pruner import EvoPruner

    with pytest.raises(EvoError, match="unknown pruning bar 'luckiest'; one of screens, incumbent"):
        api.run(env / "evo.sqlite", prune_bar="luckiest")
    for kw in ({"pruner": EvoPruner()}, {"screen": False}, {"screen_only": True}):
        with pytest.raises(EvoError, match="prune_bar sets the default pruner's bar"):
            api.run(env / "evo.sqlite", prune_bar="incumbent", **kw)
    assert not (env / "evo.sqlite").exists()


def test_read_only_workflows_refuse_a_missing_database(env: Path) -> None:
    with pytest.raises(EvoError, match="no database at"):
        api.lineage_graph(env / "absent.sqlite")
    with pytest.raises(EvoError, match="no database at"):
        api.promote_winners("pkg", env / "out", db=env / "absent.sqlite", verify=False)
    assert not (env / "absent.sqlite").exists()


def test_a_database_url_needs_a_dialect_and_its_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EvoError, match="cannot use database URL 'nosuch://x'"):
        api.open_db("nosuch://x")
    monkeypatch.setitem(sys.modules, "psycopg", None)  # None in sys.modules makes the import fail
    with pytest.raises(EvoError, match=r"postgresql driver .* is not installed: pip install 'evo-kernels\[postgres\]'"):
        api.lineage_graph("postgresql+psycopg://u@h/db")


def test_promote_without_a_gpu_names_the_api_argument_that_skips_verification(
        env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evo.products.verify.gpu_count", lambda: 0)
    db = env / "evo.sqlite"
    with api.open_db(db) as store:
        populate(store)
    with pytest.raises(EvoError, match=r"verify=False") as err:
        api.promote_winners("pkg", env / "out", db=db, study="s1")
    assert "\n" not in str(err.value) and not (env / "out").exists()


def test_the_api_names_what_its_functions_take_and_return() -> None:
    """Everything in ``evo.api.__all__`` exists; its functions are on the package and in docs/api.md."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    assert all(hasattr(api, name) for name in api.__all__)
    functions = {n for n in api.__all__ if inspect.isfunction(getattr(api, n)) and getattr(api, n).__module__ == "evo.api"}
    assert functions == evo.API
    assert [n for n in functions if f"| `evo.{n}(" not in page] == []
    assert [n for n in api.__all__ if not re.search(rf"`(evo\.)?{re.escape(n)}[`(]", page)] == []
    assert not [n for n in ("check_driver", "require_database", "database_url", "new_id_note") if hasattr(api, n)]


@needs_nvcc
def test_bad_input_of_the_other_workflows_is_one_line(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = env / "evo.sqlite"
    with pytest.raises(EvoError, match="does not support sm_80"):
        api.build_candidates(["tiny", "flash_wgmma"], arch="sm_80", db=db)
    with pytest.raises(EvoError, match="-p applies to a FAMILY"):
        api.evaluate_candidate(candidate_id="abc", params={"ROWS": 32}, target="standins:serve_green")
    with pytest.raises(EvoError, match="not both"):
        api.benchmark(["abc"], best=2, target="standins:serve_bench")
    monkeypatch.setattr(api, "list_families", lambda: [])
    with pytest.raises(EvoError, match="no kernel families found"):
        api.build_candidates(db=db)
    assert not db.exists()


@needs_nvcc
def test_stored_candidates_that_cannot_be_timed_as_stored_are_refused(env: Path) -> None:
    db = env / "evo.sqlite"
    built = api.build_candidates(["tiny"], {"SMEM_KB": 300}, arch="sm_90a", db=db)
    (rejected,) = built.results
    with pytest.raises(EvoError, match="resource_rejected"):
        api.benchmark([rejected.build_id[:12]], db=db, target="standins:serve_bench")
    with api.open_db(db) as store:
        invalid = store.record_invalid(api.candidate("tiny").candidate, "made up for the test")
    with pytest.raises(EvoError, match="was never built"):
        api.evaluate_candidate(candidate_id=invalid, db=db, target="standins:serve_green")
    with pytest.raises(EvoError, match="no FAST candidates"):
        api.benchmark(db=db, target="standins:serve_bench")


def test_load_candidate_builds_and_loads_a_stored_or_a_rendered_candidate(env: Path) -> None:
    import torch
    import torch.nn.functional as F

    db = env / "evo.sqlite"
    (stored,) = api.build_candidates(["pytiny"], arch="sm_90a", db=db).results
    loaded = api.load_candidate(stored.build_id[:12], db=db, device="cpu")
    assert loaded.build_id == stored.build_id
    q, k, v = (torch.randn(1, 2, 64, 64, dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    loaded.kernels.launch(q, k, v, o, causal=True, shift=0)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert torch.allclose(o.float(), want, atol=5e-3)
    fresh = api.load_candidate(api.candidate("pytiny", {"WARPS": 1}), arch="sm_90a", device="cpu")
    assert fresh.build_id != stored.build_id and fresh.rendered.candidate.p["WARPS"] == 1
    with api.open_db(db, create=False) as store:
        assert runs(store) == [("evo build", "done")]           # loading records nothing


def test_load_candidate_refuses_an_unknown_id_and_a_failed_build_in_one_line(env: Path) -> None:
    db = env / "evo.sqlite"
    api.build_candidates(["pytiny"], arch="sm_90a", db=db)
    with pytest.raises(EvoError, match="deadbeef00") as unknown:
        api.load_candidate("deadbeef00", db=db, device="cpu")
    with pytest.raises(EvoError, match="did not build for sm_90a") as failed:
        api.load_candidate(api.candidate("pytiny", {"FAULT": "syntax"}), arch="sm_90a", device="cpu")
    assert "\n" not in str(unknown.value) + str(failed.value)
