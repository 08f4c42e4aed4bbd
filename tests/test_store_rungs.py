"""The store's part in a search's rungs: a stored screen marked pruned (with its candidate), and
the cached baselines a host's workers measured, shared newest first, per rung."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from store_fixture import F1, F1C, FIXTURES, PARENT, built, copied_store, evaluation, migrated, tiny  # noqa: F401 (migrated: fixture)

from evo.results import Evaluation, Status, Timing
from evo.store import Store


@pytest.fixture
def store(migrated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:  # noqa: F811
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    for s in copied_store(migrated, tmp_path):
        item = tiny()
        s.record_build(item, built(item, PARENT))
        yield s


def test_a_stored_screen_is_marked_pruned_with_its_candidate(store: Store) -> None:
    eid = store.record_evaluation(Evaluation(PARENT, Status.GREEN, "screened", device={"name": "g", "rung": "screen"}))
    store.set_status(eid, Status.PRUNED, "pruned after its screen: leads no bucket")
    rec = store.get(PARENT)
    assert rec.candidate.status is Status.PRUNED and rec.evaluations[-1].status is Status.PRUNED
    assert rec.candidate.reason == rec.evaluations[-1].reason == "pruned after its screen: leads no bucket"


def _with_baselines(store: Store, us: float, measured: dict[str, list[str]], host: str = "h") -> None:
    ev = evaluation(PARENT)
    ev.timings = [Timing(F1, "evo", 5.0, 5.0, 5.0), Timing(F1, "sdpa_flash", us, us, us),
                  Timing(F1C, "sdpa_flash", us, us, us)]
    ev.device |= {"host": host, "baselines_measured": json.dumps(measured)}
    store.record_evaluation(ev)


def test_shared_baselines_are_the_newest_each_host_worker_measured_since_a_time(store: Store) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    _with_baselines(store, 9.0, {"full": ["F1-fp16|sdpa_flash", "F1c-fp16|sdpa_flash"]})
    _with_baselines(store, 8.0, {"full": ["F1-fp16|sdpa_flash"]})               # F1 again, not F1c
    _with_baselines(store, 1.0, {"full": ["F1-fp16|sdpa_flash"]}, host="elsewhere")
    store.record_evaluation(evaluation(PARENT))                                  # copies only: names none
    got = store.measured_baselines("NVIDIA H200", "h", since)
    assert {(t.shape.tag, t.median_us) for t in got["full"]} == {("F1-fp16", 8.0), ("F1c-fp16", 9.0)}
    assert store.measured_baselines("NVIDIA H200", "h", datetime.now(UTC) + timedelta(seconds=5)) == {}
    assert store.measured_baselines("another GPU", "h", since) == {}
