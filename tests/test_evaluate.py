"""The worker's GREEN-then-FAST pass: request options and case filtering on CPU;
a family default evaluated end to end in a real worker on a GPU."""

from __future__ import annotations

import json

import pytest

from evo.gpu.draws import LAYOUT_KINDS
from evo.gpu.suites import DRAW_KINDS as KINDS
from evo.gpu.evaluate import INTERLEAVED, NORMAL, QUICK, Plan, supported
from evo.family.render import Entry
from evo.results import Shape, Status
from evo.family.space import LaunchConfig
from evo.vocab import SDPA_BACKENDS

CFG = LaunchConfig(128, 64, 0)


@pytest.mark.parametrize(("options", "rounds", "reps", "remeasure"), [
    ({}, NORMAL["rounds"], NORMAL["reps"], NORMAL["remeasure"]),
    ({"quick": True}, QUICK["rounds"], QUICK["reps"], QUICK["remeasure"]),
    ({"interleave": True}, INTERLEAVED["rounds"], INTERLEAVED["reps"], INTERLEAVED["remeasure"]),
    ({"quick": True, "rounds": 7, "remeasure": 0}, 7, QUICK["reps"], 0),
])
def test_plan_from_options(options: dict[str, object], rounds: int, reps: int, remeasure: int) -> None:
    plan = Plan.of(options)
    assert (plan.rounds, plan.reps, plan.remeasure) == (rounds, reps, remeasure)


def test_plan_defaults_compare_with_every_backend() -> None:
    plan = Plan.of({"salt": 9})
    assert plan.backends == ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_default")
    assert (plan.salt, plan.interleave, plan.fidelity) == (9, False, False)
    assert Plan.of({"fidelity": True}).fidelity
    assert plan.clocks == "steady"


def test_only_an_interleaved_measurement_takes_burst_clocks() -> None:
    """`evo bench --clocks burst` (interleaved) is taken; a search's rungs stay in the steady
    protocol their cached baselines were measured in, and a protocol nobody knows is refused."""
    from evo.errors import EvoError

    assert Plan.of({"interleave": True, "clocks": "burst"}).clocks == "burst"
    with pytest.raises(EvoError, match="only an interleaved measurement"):
        Plan.of({"quick": True, "rung": "full", "clocks": "burst"})
    with pytest.raises(EvoError, match="unknown clock protocol 'fast'"):
        Plan.of({"interleave": True, "clocks": "fast"})


@pytest.mark.gpu
def test_a_screen_times_its_long_cases_beside_sdpa_on_a_gpu() -> None:
    """A search's screen with ``screen_full`` (evo run's default): F1 alone against the cached
    scoring baseline, the long F5 beside it with its outputs checked, named for reuse."""
    from evo.toolchain.build import build_batch, default_arch, nvcc_path
    from evo.errors import EvoError
    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.suites import fast_cases
    from evo.gpu.worker import EvalRequest, Worker

    try:
        nvcc_path()
    except EvoError:
        pytest.skip("nvcc not available")
    rendered = render(make_candidate("flash_mma"))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT, built.reason
    options = {"quick": True, "salt": 1, "rung": "screen", "paired": "sdpa_default", "first_failure": True,
               "screen_full": True}
    request = EvalRequest(built.build_id, built.cubin_path, rendered.entries,
                          fast_cases=tuple(fast_cases(["F1", "F5"])), options=options)
    with Worker(0) as worker:
        ev = worker.evaluate(request, timeout_s=600)
    assert ev.status is Status.GREEN, ev.reason
    assert ev.device["screen_full_cases"] == "F5-fp16,F5c-fp16"
    assert int(ev.device["fast_outputs_checked"]) >= 2                     # the two F5 modes' outputs
    tags = {(t.shape.tag, t.backend) for t in ev.timings}
    assert {("F5-fp16", b) for b in ("evo", *SDPA_BACKENDS)} - tags <= {("F5-fp16", "sdpa_efficient")}
    assert {("F1-fp16", "evo"), ("F1-fp16", "sdpa_default")} <= tags and ("F1-fp16", "sdpa_flash") not in tags


def test_supported_keeps_shapes_with_a_kernel() -> None:
    entries = [Entry("evo_attn_d64_fp16_full", 64, "fp16", False, CFG),
               Entry("evo_attn_d64_fp16_causal", 64, "fp16", True, CFG)]
    shapes = [Shape("a", 1, 1, 8, 64, False), Shape("b", 1, 1, 8, 128, False),
              Shape("c", 1, 1, 8, 64, True, "bf16"), Shape("d", 1, 1, 8, 64, True)]
    assert [s.case for s in supported(shapes, entries)] == ["a", "d"]


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["flash_scalar", "flash_mma"])
def test_worker_evaluates_a_family_default_end_to_end(family: str) -> None:
    from evo.toolchain.build import build_batch, default_arch, nvcc_path
    from evo.errors import EvoError
    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.suites import fast_cases
    from evo.gpu.worker import EvalRequest, Worker

    try:
        nvcc_path()
    except EvoError:
        pytest.skip("nvcc not available")
    rendered = render(make_candidate(family))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT, built.reason
    request = EvalRequest(built.build_id, built.cubin_path, rendered.entries,
                          fast_cases=tuple(fast_cases(["F1"])), options={"quick": True, "salt": 1})
    with Worker(0) as worker:
        ev = worker.evaluate(request, timeout_s=600)
    assert ev.status is Status.FAST, ev.reason
    assert ev.checks and all(c.passed for c in ev.checks)
    backends = {(t.shape.tag, t.backend) for t in ev.timings}
    assert {("F1-fp16", "evo"), ("F1c-fp16", "evo"), ("F1-fp16", "sdpa_default")} <= backends
    assert all(t.median_us > 0 for t in ev.timings)
    assert ev.device["name"] and ev.green_seconds > 0 and ev.fast_seconds > 0
    from evo.gpu.evaluate import cubin_sha256

    assert ev.device["salt"] == "1" and int(ev.device["green_drawn"]) >= 6
    assert any(c.shape.case.startswith("R") for c in ev.checks)            # drawn cases ran
    assert int(ev.device["fast_outputs_checked"]) >= 2                     # both F1 modes' outputs
    assert ev.device["cubin_sha256"] == cubin_sha256(built.cubin_path)
    from evo.toolchain.machine_code import kernel_digests                           # one verdict per machine code

    digests = json.loads(ev.device["kernel_sha256"])
    assert digests == kernel_digests(built.cubin_path) and {e.name for e in rendered.entries} <= set(digests)


class FakeConn:
    """The child end of the pipe: hands out requests, keeps what is sent back."""

    def __init__(self, requests: list[object]) -> None:
        self.requests, self.sent = list(requests), []

    def recv(self) -> object:
        if not self.requests:
            raise EOFError
        return self.requests.pop(0)

    def send(self, obj: object) -> None:
        self.sent.append(obj)


F1 = Shape("F1", 1, 8, 512, 64, False)


@pytest.fixture
def fake_worker(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """serve() with the GPU parts replaced: GREEN passes unless build id starts with 'red',
    time_case answers 5 us for the candidate and 9 us per baseline, and logs its calls."""
    from evo.errors import LaunchRejected
    from evo.results import CheckResult, Timing
    from evo.gpu.timing import CaseTiming

    calls: dict[str, list] = {"time_case": [], "green": []}
    monkeypatch.setattr("torch.cuda.set_device", lambda d: None)
    monkeypatch.setattr("evo.gpu.evaluate._warm_up", lambda: None)
    monkeypatch.setattr("evo.gpu.evaluate.device_info", lambda: {"name": "Fake GPU"})

    def candidate(request, ev):
        if request.build_id.startswith("boom"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if request.build_id.startswith("wide"):
            raise LaunchRejected("evo_attn_d64_fp16_full: needs 300000 B shared memory > 232448 B")
        ev.device["cubin_sha256"] = "c" * 64
        return (lambda *a: None), (lambda q, k, v, o, *, causal, shift: None), list(request.entries)

    def run_green(launch, cases, settings, salt, first_failure=False):
        calls["green"].append(cases)
        calls.setdefault("first_failure", []).append(first_failure)
        calls.setdefault("settings", []).append(settings)
        ok = not calls.get("red")
        return [CheckResult(c.shape, 0, ok, 0.0, 0.0, 1.0, "" if ok else "mismatch") for c in cases]

    def time_case(cand, shape, backends, **kw):
        calls["time_case"].append("evo" if cand else "baselines")
        calls.setdefault("time_kw", []).append(kw)
        out = [Timing(shape, b, 9.0, 9.0, 9.0) for b in backends]
        if cand is None:
            return CaseTiming(out)
        flagged = calls.get("flag", [""])[0]
        out.insert(0, Timing(shape, "evo", 5.0, 5.0, 5.0, flagged=flagged))
        return CaseTiming(out, 7, calls.get("wrong", [""])[0])

    monkeypatch.setattr("evo.gpu.evaluate._candidate", candidate)
    monkeypatch.setattr("evo.gpu.gate.run_green", run_green)
    monkeypatch.setattr("evo.gpu.timing.time_case", time_case)
    return calls


def _request(build_id: str = "b", **options: object):
    from evo.gpu.worker import EvalRequest

    entries = (Entry("evo_attn_d64_fp16_full", 64, "fp16", False, CFG),)
    return EvalRequest(build_id, "x.cubin", entries, fast_cases=(F1,), options=options)


def test_a_tolerance_share_narrows_the_gate_and_is_recorded(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve
    from evo.gpu.suites import green_settings

    conn = FakeConn([_request(), _request(tolerance_share=0.75), None])
    serve(conn)
    full, narrow = fake_worker["settings"]
    assert full == green_settings()
    assert narrow.tolerance(1e-3, "fp16") == pytest.approx(0.75 * full.tolerance(1e-3, "fp16"))
    assert "tolerance_share" not in conn.sent[0].device and conn.sent[1].device["tolerance_share"] == "0.75"


def test_serve_gates_then_times_with_cached_baselines(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve

    conn = FakeConn([_request(baseline_every=2) for _ in range(3)] + [None])
    serve(conn)
    assert [e.status for e in conn.sent] == [Status.FAST] * 3
    assert fake_worker["time_case"] == ["baselines", "evo", "evo", "baselines", "evo"]   # re-measured at the 3rd
    assert [t.backend for t in conn.sent[0].timings][:2] == ["evo", "sdpa_flash"]
    measured = {"full": [f"F1-fp16|{b}" for b in sorted(SDPA_BACKENDS)]}   # what the parent shares
    assert conn.sent[0].device == {"name": "Fake GPU", "salt": "0", "cubin_sha256": "c" * 64,
                                   "green_drawn": str(len(set(KINDS) - set(LAYOUT_KINDS))), "fast_outputs_checked": "7",
                                   "baselines_measured": json.dumps(measured)}   # one dtype
    assert "baselines_measured" not in conn.sent[1].device and conn.sent[2].device["baselines_measured"]
    assert conn.sent[0].reason.endswith("timed on 1 FAST cases, 7 timed outputs checked")
    assert all(kw["check"] is not None for kw in fake_worker["time_kw"] if "check" in kw)


def test_green_runs_the_core_and_the_cases_drawn_from_the_salt(fake_worker: dict[str, list]) -> None:
    from evo.gpu.draws import drawn_cases
    from evo.gpu.evaluate import serve
    from evo.gpu.suites import GreenCase, green_cases, green_settings

    conn = FakeConn([_request(salt=41), _request(salt=42)])
    serve(conn)
    first, second = fake_worker["green"]
    core = [GreenCase(s) for s in green_cases() if (s.D, s.dtype, s.causal) == (64, "fp16", False)]
    keys = {(64, "fp16", False)}
    assert first == core + drawn_cases(green_settings().draws, keys, 41)
    assert second[len(core):] == drawn_cases(green_settings().draws, keys, 42) != first[len(core):]
    assert [e.device["salt"] for e in conn.sent] == ["41", "42"]


def test_explicit_green_cases_replace_the_suite(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve
    from evo.gpu.suites import GreenCase

    mine = [GreenCase(Shape("P00 sd=2.0", 1, 1, 7, 64, False), std=2.0, seeds=(0,))]
    conn = FakeConn([_request(green_cases=mine)])
    serve(conn)
    assert fake_worker["green"] == [mine] and conn.sent[0].device["green_drawn"] == "1"


def test_a_wrong_timed_output_is_red_with_its_case(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve

    fake_worker["wrong"] = ["after the timed replays, set 3 of 63: max|err| 5.0e-01 > tol 1.0e-03"]
    conn = FakeConn([_request()])
    serve(conn)
    ev = conn.sent[0]
    assert ev.status is Status.RED
    assert ev.reason == "F1-fp16: timed output wrong: after the timed replays, set 3 of 63: max|err| 5.0e-01 > tol 1.0e-03"
    assert ev.device["fast_outputs_checked"] == "7" and ev.timings == []


def test_interleaved_request_times_baselines_with_the_candidate(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve

    conn = FakeConn([_request(interleave=True, backends=["sdpa_flash", "sdpa_default"])])
    serve(conn)
    assert fake_worker["time_case"] == ["evo"]
    assert [t.backend for t in conn.sent[0].timings] == ["evo", "sdpa_flash", "sdpa_default"]
    assert conn.sent[0].device["paired"] == "sdpa_flash,sdpa_default"   # a paired search may reuse it


def test_a_search_request_times_its_paired_baseline_beside_the_candidate(fake_worker: dict[str, list]) -> None:
    """The backend a search is scored against is timed with the candidate every time (never
    from the cache); the others still come from the cache, once, and each backend appears once."""
    from evo.gpu.evaluate import serve

    conn = FakeConn([_request(quick=True, paired="sdpa_default") for _ in range(2)] + [None])
    serve(conn)
    assert fake_worker["time_case"] == ["baselines", "evo", "evo"]
    beside = [kw for kw in fake_worker["time_kw"] if "check" in kw]
    assert len(beside) == 2
    for ev in conn.sent:
        backends = [t.backend for t in ev.timings]
        assert backends[0] == "evo" and sorted(backends[1:]) == sorted(SDPA_BACKENDS)
        assert len(backends) == len(set(backends)) and ev.device["paired"] == "sdpa_default"


def test_a_screen_times_the_candidate_alone_against_its_cached_scoring_baseline(fake_worker: dict[str, list]) -> None:
    """A screen: GREEN stops at its first failure, the candidate is timed alone with screen
    sampling and no output checks, the scoring baseline comes from the screen's cache (measured
    the same way, again after ``screen_baseline_every`` screens), and the answer is green."""
    from evo.gpu.evaluate import SCREEN_SAMPLING, serve

    screen = {"quick": True, "paired": "sdpa_default", "rung": "screen", "first_failure": True,
              "screen_baseline_every": 2}
    conn = FakeConn([_request(**screen) for _ in range(3)] + [None])
    serve(conn)
    assert [e.status for e in conn.sent] == [Status.GREEN] * 3 and fake_worker["first_failure"] == [True] * 3
    assert fake_worker["time_case"] == ["baselines", "evo", "evo", "baselines", "evo"]
    kw = fake_worker["time_kw"]
    assert all(k["rounds"] == SCREEN_SAMPLING["rounds"] and k["remeasure"] == 0 for k in kw)
    assert all(k["check"] is None for k in kw if "check" in k)
    ev = conn.sent[0]
    assert [t.backend for t in ev.timings] == ["evo", "sdpa_default"] and "paired" not in ev.device
    assert ev.device["rung"] == "screen" and ev.reason.endswith("screened on 1 FAST cases")
    assert json.loads(ev.device["baselines_measured"]) == {"screen": ["F1-fp16|sdpa_default"]}


F8C = Shape("F8", 4, 32, 4096, 128, True)   # a long case (the steady-state rule)


def test_a_screen_times_its_long_cases_as_the_full_rung_does_for_it_to_reuse(fake_worker: dict[str, list]) -> None:
    """With ``screen_full`` a screen's long case is timed beside the scoring baseline with the full
    rung's sampling and output checks, the other backends from the full rung's cache, and named in
    ``screen_full_cases``; its short case as any screen's. A prime of the screen fills the full
    rung's cache for the long case, not the screen's."""
    from evo.gpu.evaluate import QUICK, SCREEN_SAMPLING, serve
    from evo.gpu.worker import EvalRequest

    screen = {"quick": True, "paired": "sdpa_default", "rung": "screen", "first_failure": True, "screen_full": True}
    entries = (Entry("evo_attn_d64_fp16_full", 64, "fp16", False, CFG),
               Entry("evo_attn_d128_fp16_causal", 128, "fp16", True, CFG))
    prime = EvalRequest("prime", "", (), False, (F1, F8C), screen | {"prime": True})
    conn = FakeConn([prime, EvalRequest("b", "x.cubin", entries, fast_cases=(F1, F8C), options=screen), None])
    serve(conn)
    primed, ev = conn.sent
    reported = sorted(f"F8c-fp16|{b}" for b in SDPA_BACKENDS if b != "sdpa_default")
    assert json.loads(primed.device["baselines_measured"]) == {"full": reported, "screen": ["F1-fp16|sdpa_default"]}
    short, long = [kw for kw in fake_worker["time_kw"] if "check" in kw]
    assert short["check"] is None and short["rounds"] == SCREEN_SAMPLING["rounds"] and short["reps"] == SCREEN_SAMPLING["reps"]
    assert long["check"] is not None and (long["rounds"], long["reps"], long["remeasure"]) == \
        (QUICK["rounds"], QUICK["reps"], QUICK["remeasure"])
    assert ev.status is Status.GREEN and ev.device["screen_full_cases"] == "F8c-fp16" and "paired" not in ev.device
    by_case = {(t.shape.tag, t.backend) for t in ev.timings}
    assert {("F8c-fp16", b) for b in ("evo", *SDPA_BACKENDS)} <= by_case
    assert by_case - {("F8c-fp16", b) for b in ("evo", *SDPA_BACKENDS)} == {("F1-fp16", "evo"), ("F1-fp16", "sdpa_default")}
    assert ev.reason.endswith("screened on 2 FAST cases (1 of them as the full rung times them)")


def test_without_screen_full_a_screens_long_case_is_the_candidate_alone() -> None:
    from evo.gpu.evaluate import SCREEN_SAMPLING

    plan = Plan.of({"quick": True, "paired": "sdpa_default", "rung": "screen"})
    assert plan.for_case(F8C) is plan and plan.for_case(F8C).beside() == ()
    full = Plan.of({"quick": True, "paired": "sdpa_default", "rung": "screen", "screen_full": True})
    assert full.for_case(F1) is full and full.for_case(F1).reps == SCREEN_SAMPLING["reps"]
    assert full.for_case(F8C).beside() == ("sdpa_default",)


def test_a_prime_request_fills_each_rungs_cache_ahead_of_the_candidates(fake_worker: dict[str, list]) -> None:
    """Priming (a search's first batch is building): no kernel loaded, no GREEN; the screen's
    scoring baseline and the full rung's reported backends measured as those rungs sample, named
    as measured; the candidates after it time only themselves (and the paired baseline)."""
    from evo.gpu.evaluate import QUICK, SCREEN_SAMPLING, serve
    from evo.gpu.worker import EvalRequest

    search = {"quick": True, "paired": "sdpa_default", "first_failure": True}
    primes = [EvalRequest("prime", "", (), False, (F1,), search | {"rung": rung, "prime": True})
              for rung in ("screen", "full")]
    conn = FakeConn([*primes, _request(**search, rung="screen"), _request(**search, rung="full"), None])
    serve(conn)
    screen, full, screened, timed = conn.sent
    assert len(fake_worker["green"]) == 2                       # the two candidates' GREEN, none for a prime
    assert fake_worker["time_case"] == ["baselines", "baselines", "evo", "evo"]
    rounds = [kw["rounds"] for kw in fake_worker["time_kw"]]
    assert rounds == [SCREEN_SAMPLING["rounds"], QUICK["rounds"], SCREEN_SAMPLING["rounds"], QUICK["rounds"]]
    assert json.loads(screen.device["baselines_measured"]) == {"screen": ["F1-fp16|sdpa_default"]}
    reported = sorted(f"F1-fp16|{b}" for b in SDPA_BACKENDS if b != "sdpa_default")
    assert json.loads(full.device["baselines_measured"]) == {"full": reported}
    assert screen.checks == [] and "cubin_sha256" not in screen.device and screen.reason.startswith("primed")
    assert "baselines_measured" not in screened.device and "baselines_measured" not in timed.device
    assert [t.backend for t in screened.timings] == ["evo", "sdpa_default"]


def test_an_unknown_rung_is_an_error() -> None:
    from evo.errors import EvoError

    with pytest.raises(EvoError, match="unknown rung"):
        Plan.of({"rung": "medium"})


def test_plan_pairs_only_when_not_interleaved() -> None:
    assert Plan.of({"quick": True, "paired": "sdpa_flash"}).beside() == ("sdpa_flash",)
    assert Plan.of({"quick": True}).beside() == ()
    assert Plan.of({"interleave": True, "paired": "sdpa_flash"}).beside() == Plan.of({}).backends


def test_red_candidate_is_never_timed(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve

    fake_worker["red"] = [True]
    conn = FakeConn([_request()])
    serve(conn)
    assert conn.sent[0].status is Status.RED and "mismatch" in conn.sent[0].reason
    assert fake_worker["time_case"] == [] and conn.sent[0].timings == []


def test_failed_recheck_of_an_implausible_result_is_red(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve
    from evo.gpu.timing import RECHECK_FAILED

    fake_worker["flag"] = [f"implausible: x; {RECHECK_FAILED}: NaN in output"]
    conn = FakeConn([_request()])
    serve(conn)
    assert conn.sent[0].status is Status.RED and RECHECK_FAILED in conn.sent[0].reason


def test_a_failure_replies_crashed_and_stops_serving(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve

    conn = FakeConn([_request("boom"), _request("after")])
    serve(conn)
    assert len(conn.sent) == 1 and conn.sent[0].status is Status.CRASHED
    assert "illegal memory access" in conn.sent[0].reason and conn.requests  # the second was never taken


def test_a_launch_the_device_refuses_is_resource_rejected_and_serving_goes_on(fake_worker: dict[str, list]) -> None:
    from evo.gpu.evaluate import serve

    conn = FakeConn([_request("wide"), _request("after")])
    serve(conn)
    assert [e.status for e in conn.sent] == [Status.RESOURCE_REJECTED, Status.FAST]
    assert "300000 B shared memory" in conn.sent[0].reason


def test_each_green_launch_is_reported_as_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from evo.gpu import evaluate

    notes: list[str] = []
    launched: list[bool] = []
    monkeypatch.setattr(evaluate, "progress", notes.append)
    launch = evaluate._reporting(lambda q, k, v, o, causal, scale, shift: launched.append(causal))
    q, kv = torch.zeros(1, 2, 3, 64), torch.zeros(1, 1, 5, 64)
    launch(q, q, q, q, True, 0.125, 0)
    launch(q, q, q, q, False, 0.125, 0)
    launch(q, kv, kv, q, True, 0.125, 2)
    assert notes == ["GREEN launch 1 (1x2x3x64 causal)", "GREEN launch 2 (1x2x3x64)",
                     "GREEN launch 3 (1x2x3x64 on 1x1x5x64 causal)"] and launched == [True, False, True]


def test_a_session_uses_inherited_baselines_until_they_age(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replacement worker's session takes the baselines its predecessor measured (evo.gpu.worker)
    for shapes it has none of, and re-measures them once ``baseline_every`` old, like its own."""
    import evo.gpu.evaluate
    import evo.gpu.timing
    from evo.results import Shape, Timing
    from evo.gpu.timing import CaseTiming

    monkeypatch.setattr(evo.gpu.evaluate, "device_info", lambda: {"name": "stand-in"})
    measured: list[Shape] = []

    def time_case(candidate, shape, backends, **kw):  # type: ignore[no-untyped-def]
        measured.append(shape)
        return CaseTiming([Timing(shape, "sdpa_default", 12.0, 12.0, 12.0)])

    monkeypatch.setattr(evo.gpu.timing, "time_case", time_case)
    f1, f3 = Shape("F1", 1, 8, 512, 64, False), Shape("F3", 32, 8, 128, 64, False)
    session = evo.gpu.evaluate.Session()
    session.inherit({"full": [Timing(f1, "sdpa_default", 10.0, 10.0, 10.0), Timing(f1, "sdpa_flash", 11.0, 11.0, 11.0)]})
    plan = Plan.of({"quick": True, "baseline_every": 2, "backends": ["sdpa_default", "sdpa_flash"]})
    assert [t.median_us for t in session.baselines(f1, plan)] == [10.0, 11.0] and measured == []
    assert [t.median_us for t in session.baselines(f3, plan)] == [12.0] and measured == [f3]
    session.inherit({"full": [Timing(f3, "sdpa_default", 1.0, 1.0, 1.0)]})          # it has F3 already: kept
    assert [t.median_us for t in session.baselines(f3, plan)] == [12.0]
    session.caches["full"].uses = 2
    assert [t.median_us for t in session.baselines(f1, plan)] == [12.0] and measured == [f3, f1]
