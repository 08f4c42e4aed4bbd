"""Worker supervision with CPU stand-in targets: crash, hang, restart, pool order, shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.family.render import Entry
from evo.results import Shape, Status, Timing
from evo.family.space import LaunchConfig
from evo.gpu.worker import EvalRequest, Worker, WorkerPool, _child_env, gpu_count, require_gpu

FIXTURES = Path(__file__).parent / "fixtures" / "worker"


@pytest.fixture(autouse=True)
def _standins_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # spawn copies the parent's sys.path into the child, so the child can import the stand-ins
    monkeypatch.syspath_prepend(str(FIXTURES))


def req(build_id: str = "b", **options: object) -> EvalRequest:
    return EvalRequest(build_id, "unused.cubin", (), options=options)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def worker() -> Worker:
    w = Worker(0, "standins:serve")
    yield w
    w.close()


def test_answers_from_a_child_process(worker: Worker) -> None:
    ev = worker.evaluate(req("x"), timeout_s=30)
    assert (ev.build_id, ev.status) == ("x", Status.FAST)
    assert int(ev.reason) not in (os.getpid(), None)


@pytest.mark.parametrize("act", ["exit", "segfault"])
def test_child_death_is_crashed_and_worker_replaced(worker: Worker, act: str) -> None:
    first = int(worker.evaluate(req(), 30).reason)
    ev = worker.evaluate(req("bad", act=act), 30)
    assert ev.status is Status.CRASHED and ev.build_id == "bad"
    assert ("exit code 3" if act == "exit" else "signal 11") in ev.reason
    again = worker.evaluate(req(), 30)
    assert again.status is Status.FAST and int(again.reason) != first and worker.restarts == 1


def test_crashed_reply_replaces_the_poisoned_worker(worker: Worker) -> None:
    first = int(worker.evaluate(req(), 30).reason)
    ev = worker.evaluate(req(act="crash_reply"), 30)
    assert (ev.status, ev.reason) == (Status.CRASHED, "illegal memory access")
    assert int(worker.evaluate(req(), 30).reason) != first


def test_hang_times_out_within_budget_and_worker_is_replaced(worker: Worker) -> None:
    pid = int(worker.evaluate(req(), 30).reason)
    ev = worker.evaluate(req("slow", act="hang"), timeout_s=1.0)
    assert ev.status is Status.TIMEOUT and "no answer within 1 s" in ev.reason   # the budget, as given
    assert not alive(pid)
    assert worker.evaluate(req(), 30).status is Status.FAST


@pytest.mark.parametrize(("act", "kind"), [
    ("hang", "stuck: no progress reported in"),
    ("stall", "stuck: no progress in the last"),
    ("trickle", "slow: still progressing"),
])
def test_a_timeout_says_whether_the_work_was_stuck_or_slow(worker: Worker, act: str, kind: str) -> None:
    ev = worker.evaluate(req("slow", act=act), timeout_s=2.0)
    assert ev.status is Status.TIMEOUT and "no answer within 2 s" in ev.reason and kind in ev.reason
    assert ("since 'step 1': a step that did not return" in ev.reason) is (act == "stall")


@pytest.mark.parametrize("act", ["hang", "stall"])
def test_no_progress_for_the_stall_limit_is_stuck_long_before_the_budget(worker: Worker, act: str) -> None:
    ev = worker.evaluate(req("deadlock", act=act), timeout_s=300.0, stall_s=1.0)
    assert ev.status is Status.TIMEOUT and ev.reason.startswith("no progress for 1 s on GPU 0 (1 s into a 300 s budget)")
    assert ev.reason.endswith("stuck, since 'step 1': a step that did not return" if act == "stall"
                              else "stuck: a step that did not return")
    assert worker.evaluate(req(), 30).status is Status.FAST


def test_progress_keeps_a_long_request_alive_past_the_stall_limit(worker: Worker) -> None:
    ev = worker.evaluate(req("slow", act="trickle"), timeout_s=2.0, stall_s=0.5)  # a report every 50 ms
    assert ev.status is Status.TIMEOUT and "no answer within 2 s" in ev.reason and "slow: still progressing" in ev.reason


def test_a_child_is_handed_the_baselines_measured_before_on_its_gpu(worker: Worker) -> None:
    """What a child measured for its cache (named in its answer) goes to the requests of the same
    cases, across a crash; what the host's other workers measured comes in through share()."""
    f1 = Shape("F1", 1, 8, 512, 64, False)
    carried = EvalRequest("b", "unused.cubin", (), fast_cases=(f1,), options={"act": "carried"})
    assert worker.evaluate(carried, 30).reason == "0"                       # nothing measured yet
    worker.evaluate(req(act="baselines"), 30)
    assert worker.evaluate(carried, 30).reason == "1"                       # sdpa_default of F1, not evo's
    assert worker.evaluate(req(act="exit"), 30).status is Status.CRASHED
    assert worker.evaluate(carried, 30).reason == "1"                       # the replacement inherits it
    worker.share({"screen": [Timing(f1, "sdpa_default", 9.0, 9.0, 9.0)]})
    assert worker.evaluate(carried, 30).reason == "2"
    assert worker.evaluate(req(act="carried"), 30).reason == "0"            # a request of other cases: none


def test_start_up_is_not_charged_to_the_first_request() -> None:
    with Worker(0, "standins:serve_slow_start", env={"STANDIN_START_S": "3"}) as w:
        ev = w.evaluate(req("first"), timeout_s=1.0)  # 3 s of start-up, then an instant answer
    assert ev.status is Status.FAST, ev.reason


def test_a_failure_during_start_up_is_a_setup_error_naming_it() -> None:
    with Worker(0, "standins:serve_broken_start") as w, \
            pytest.raises(EvoError, match="failed to start: RuntimeError: no CUDA-capable device is detected"):
        w.evaluate(req(), 30)


def test_a_launch_that_cannot_be_set_up_is_rejected_before_any_worker_sees_it(worker: Worker) -> None:
    pid = int(worker.evaluate(req(), 30).reason)
    wide = Entry("evo_attn_d64_fp16_full", 64, "fp16", False, LaunchConfig(2048, 64, 0))
    ev = worker.evaluate(EvalRequest("wide", "unused.cubin", (wide,)), 30)
    assert ev.status is Status.RESOURCE_REJECTED and "2048 threads per CTA" in ev.reason
    assert int(worker.evaluate(req(), 30).reason) == pid and worker.restarts == 0


def test_worker_that_fails_after_n_requests_keeps_serving() -> None:
    with Worker(0, "standins:serve_flaky") as w:
        statuses = [w.evaluate(req(str(i), die_after=3), 30).status for i in range(5)]
    assert statuses == [Status.FAST, Status.FAST, Status.CRASHED, Status.FAST, Status.FAST]


def test_target_that_cannot_import_is_a_setup_error() -> None:
    with Worker(0, "standins:no_such_target") as w, pytest.raises(EvoError, match="failed to start"):
        w.evaluate(req(), 30)


def test_close_stops_the_child(worker: Worker) -> None:
    pid = int(worker.evaluate(req(), 30).reason)
    worker.close()
    assert not alive(pid)


def test_pool_yields_in_request_order_from_both_workers() -> None:
    delays = [0.6, 0.1, 0.4, 0.0]
    with WorkerPool([0, 1], target="standins:serve") as pool:
        results = list(pool.map([req(str(i), act="sleep", seconds=d) for i, d in enumerate(delays)], 30))
    assert [r.build_id for r in results] == ["0", "1", "2", "3"]
    assert len({r.reason for r in results}) == 2      # both workers served


def test_pool_runs_its_workers_at_the_same_time(tmp_path: Path) -> None:
    with WorkerPool([0, 1], target="standins:serve") as pool:   # each waits until both have arrived
        results = list(pool.map([req(str(i), act="meet", place=str(tmp_path), count=2) for i in range(2)], 60))
    assert [r.reason for r in results] == ["met", "met"]


def test_pool_draws_a_request_only_when_a_worker_is_free_to_start_it(tmp_path: Path) -> None:
    """Two workers: request 0 answers at once, the others wait at a gate the test opens, so
    when 0's result comes back exactly one more (2) has been drawn for the worker 0 freed, and
    none beyond it, on a machine of any speed (it once slept 0.2 s a request and counted on the
    test's thread to look before three of them had ended: a loaded CI machine drew five)."""
    drawn: list[int] = []
    more = [True]  # like a search's time budget: once it is False, no request follows
    gate = tmp_path / "open"

    def requests() -> Iterator[EvalRequest]:
        for i in range(8):
            if not more[0]:
                return
            drawn.append(i)
            yield req(str(i), act="answer") if i == 0 else req(str(i), act="gate", gate=str(gate))

    with WorkerPool([0, 1], target="standins:serve") as pool:
        results = pool.map(requests(), 30)
        first = next(results)
        assert drawn == [0, 1, 2]   # two at once, then one for the worker that ended
        more[0] = False
        gate.touch()
        rest = list(results)
    assert [r.build_id for r in [first, *rest]] == ["0", "1", "2"]


def test_stopping_a_child_another_thread_reaped_does_not_raise(worker: Worker,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the race of multiprocessing's child cleanup: close() sees the reaped child as running
    assert worker.evaluate(req(act="answer"), 30).status is Status.FAST
    proc = worker._proc
    assert proc is not None

    def close() -> None:
        raise ValueError("Cannot close a process while it is still running.")

    monkeypatch.setattr(proc, "close", close)
    worker._restart()
    assert worker._proc is not None and worker._proc is not proc and worker.restarts == 1


def test_pool_survives_a_crash_among_requests() -> None:
    with WorkerPool([0, 1], target="standins:serve") as pool:
        acts = ["answer", "segfault", "answer", "exit", "answer"]
        statuses = [r.status for r in pool.map([req(str(i), act=a) for i, a in enumerate(acts)], 30)]
    assert statuses == [Status.FAST, Status.CRASHED, Status.FAST, Status.CRASHED, Status.FAST]


@pytest.mark.parametrize(("visible", "device", "expected"), [(None, 1, "1"), ("3,5", 1, "5"), ("GPU-a, GPU-b", 0, "GPU-a")])
def test_child_sees_only_its_gpu(monkeypatch: pytest.MonkeyPatch, visible: str | None, device: int, expected: str) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _child_env(device) == expected


def test_invisible_gpu_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(EvoError, match="not visible"):
        _child_env(1)


def test_no_gpu_is_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_count() == 0
    with pytest.raises(EvoError, match=r"^no CUDA GPU: GREEN and FAST need one \(evo build compiles without\)$"):
        require_gpu()


def test_without_a_driver_the_count_is_zero_and_nothing_is_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    """No nvidia-smi answer and no driver device node: 0 at once, without the torch probe (a
    subprocess that took 3-6 s of each CPU-only `evo run`)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("evo.gpu.worker.smi.query", lambda *a, **k: None)
    monkeypatch.setattr("evo.gpu.worker.DRIVER_NODES", ("/nonexistent/nvidiactl",))
    probes: list[object] = []
    monkeypatch.setattr("evo.gpu.worker.subprocess.run", lambda *a, **k: probes.append(a))
    assert gpu_count() == 0 and probes == []


def test_with_a_driver_node_but_no_smi_answer_torch_is_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    node = tmp_path / "nvidiactl"
    node.touch()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("evo.gpu.worker.smi.query", lambda *a, **k: None)
    monkeypatch.setattr("evo.gpu.worker.DRIVER_NODES", (str(node),))
    monkeypatch.setattr("evo.gpu.worker.subprocess.run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="3\n", stderr=""))
    assert gpu_count() == 3


def test_parent_side_does_not_import_torch() -> None:
    code = "import sys, evo.gpu.worker; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
