"""Test helpers: records of the tiny fixture family and a small stored lineage (no nvcc, no GPU)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from evo.family.render import Rendered, render
from evo.results import BuildResult, CheckResult, Evaluation, Resources, Shape, Status, Timing
from evo.family.space import make_candidate
from evo.store import Store, open_store

FIXTURES = Path(__file__).parent / "fixtures" / "templates"
F1 = Shape("F1", 1, 8, 512, 64, False)
F1C = Shape("F1", 1, 8, 512, 64, True)
PARENT, CHILD = "aa" + "0" * 62, "ab" + "0" * 62


def tiny(**params: object) -> Rendered:
    """A rendered candidate of the tiny fixture family (EVO_TEMPLATE_PATH must include FIXTURES)."""
    return render(make_candidate("tiny", params))  # type: ignore[arg-type]


def built(item: Rendered, bid: str, status: Status = Status.BUILT, cached: bool = False) -> BuildResult:
    return BuildResult(bid, item.source_hash, "sm_90a", ("-O3",), status, cubin_path="/x/kernel.cubin",
                       log="ptxas info", seconds=1.5, cached=cached,
                       resources={"evo_attn_d64_fp16_full": Resources(40, 0, 0, 0, 0, 1024)})


def timings(evo_us: float, base_us: float = 10.0) -> list[Timing]:
    return [Timing(s, b, m, m * 0.9, m * 1.1, [m, m]) for s in (F1, F1C)
            for b, m in (("evo", evo_us), ("sdpa_default", base_us))]


def evaluation(bid: str, evo_us: float = 5.0) -> Evaluation:
    checks = [CheckResult(F1, 0, True, 1e-3, 1e-3, 3e-3), CheckResult(F1C, 1, False, math.nan, 1e-3, 3e-3, "nan")]
    return Evaluation(bid, Status.FAST, checks=checks, timings=timings(evo_us),
                      device={"name": "NVIDIA H200", "cc": "9.0"}, green_seconds=2.0, fast_seconds=3.0)


def populate(store: Store) -> dict[str, object]:
    """Run 1 of study s1: PARENT (5 us) -> CHILD (4 us, ROWS 64->32), both FAST vs 10 us SDPA;
    trial 0 links CHILD."""
    run = store.start_run("evo run", study="s1", options={"trials": 2})
    a, b = tiny(), tiny(ROWS=32)
    store.record_build(a, built(a, PARENT), run)
    store.record_build(b, built(b, CHILD), run)
    store.add_edge(PARENT, CHILD, {"ROWS": (64, 32)}, "mutation", run)
    store.record_evaluation(evaluation(PARENT, 5.0), run)
    store.record_evaluation(evaluation(CHILD, 4.0), run)
    store.record_trial("s1", 0, CHILD, run, "COMPLETE", 2.5)
    store.finish_run(run)
    return {"run": run, "parent": PARENT, "child": CHILD}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database file for a module (import this fixture): migrating is the slow part."""
    path = tmp_path_factory.mktemp("db") / "evo.sqlite"
    open_store(f"sqlite:///{path}").close()
    return path


def copied_store(migrated: Path, folder: Path) -> Iterator[Store]:
    """A store opened on a copy of ``migrated`` in ``folder`` (yield from it in a fixture)."""
    shutil.copy(migrated, folder / "evo.sqlite")
    with open_store(f"sqlite:///{folder / 'evo.sqlite'}") as s:
        yield s
