"""Promote verifies on the GPU before it writes: a shape-keyed kernel (right only at GREEN's
fixed lengths) whose stored record says green and fast is refused with one line, and nothing
is written. The record is what such a cheat earned before GREEN drew lengths: passing checks on
the fixed core and a FAST win on F1 (L = 512, one of its lengths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.results import CheckResult, Evaluation, Shape, Status, Timing

pytestmark = pytest.mark.gpu

TEST_TEMPLATES = Path(__file__).parent / "templates"
F1 = Shape("F1", 1, 8, 512, 64, False)
F5 = Shape("F5", 1, 12, 8192, 64, False)
F1C = Shape("F1", 1, 8, 512, 64, True)
CHUNK = Shape("L9", 1, 8, 256, 64, False, "fp16", 8, 2048)   # a query chunk on a longer cache: a chunk route


def flattered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, study: str,
              wins: tuple[Shape, ...] = (F1,)) -> tuple[str, str]:
    """A ``faulty`` kernel built for this GPU and stored as a search might have stored it: passing
    checks on GREEN's fixed core and a win on each of ``wins`` (5 us against SDPA's 9; default F1);
    (build id, database URL)."""
    import torch

    from evo.toolchain.build import build_batch, default_arch
    from evo.family.manifest import load_family
    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.store import open_store
    from evo.gpu.suites import green_cases

    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(TEST_TEMPLATES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))
    fam = load_family("faulty")
    rendered = render(make_candidate(fam, {"FAULT": fault}), fam)
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT, built.reason
    major, minor = torch.cuda.get_device_capability()
    device = {"name": torch.cuda.get_device_name(), "sm": f"{major}{minor}"}
    checks = [CheckResult(s, seed, True, 1e-4, 2e-4, 9e-4) for s in green_cases() for seed in (0, 1)]
    timings = [t for s in wins for t in (Timing(s, "evo", 5.0, 4.9, 5.1), Timing(s, "sdpa_default", 9.0, 8.9, 9.1))]
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        run = store.start_run("test", study=study, device=device)
        store.record_build(rendered, built, run)
        store.record_evaluation(Evaluation(built.build_id, Status.FAST, checks=checks, timings=timings,
                                           device=device), run)
    return built.build_id, url


def test_promote_refuses_a_planted_shape_keyed_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.products.promote import promote

    build_id, url = flattered(tmp_path, monkeypatch, "shape_keyed", "planted")
    with pytest.raises(EvoError) as err:
        promote("planted", tmp_path / "out", db_url=url, study="planted")
    message = str(err.value)
    print(message)
    assert message.startswith(f"refusing to promote {build_id[:12]}: ") and "\n" not in message
    assert "checks over its dispatch buckets failed (at 0.75 of GREEN's tolerance); first: P" in message
    assert "max|err|" in message
    assert not (tmp_path / "out" / "planted").exists()


@pytest.mark.parametrize(("fault", "wins"), [
    ("long_only", (F1, F5)),   # wrong past L = 8192: the top bucket is checked up to 16384, its top
    ("many_heads", (F1,)),     # wrong past 2048 batch x heads: the bucket's heads check (65535 at L = 1)
    ("flat", (F1, F5)),        # wrong on a flat softmax over > 1024 keys: checked at each bucket's top
    ("wrong_kv_head", (F1,)),  # kernel ABI v2: grouped heads, checked at every bucket length (llm_bucket_cases)
    ("ignore_lk", (F1,)),      # a query chunk on a longer key cache
    ("ignore_lk", (CHUNK,)),   # measured on a chunk alone: served on a chunk route, checked over its bucket
    ("top_left_only", (F1C,)),  # the causal mask at the bottom right with Lq != Lk (a causal route)
])
def test_promote_refuses_a_kernel_wrong_only_outside_what_was_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, wins: tuple[Shape, ...]) -> None:
    """Issue 36's classes: each kernel is right on every case the search timed and wrong elsewhere in
    the domain a package would serve it on; promote's checks over that domain refuse it."""
    from evo.products.promote import promote

    build_id, url = flattered(tmp_path, monkeypatch, fault, f"planted-{fault}", wins)
    with pytest.raises(EvoError) as err:
        promote("planted", tmp_path / "out", db_url=url, study=f"planted-{fault}")
    message = str(err.value)
    print(f"{fault}: {message}")
    assert message.startswith(f"refusing to promote {build_id[:12]}: ") and "checks over its dispatch" in message
    assert not (tmp_path / "out" / "planted").exists()


def test_confirm_times_the_winner_beside_sdpa_and_a_flattering_record_ships_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A correct but slow kernel (FAULT=none: a warp per row from global memory) stored with a
    search-time F1 win it never had: `promote --confirm` times it beside the routed baseline,
    stores that, and finds no bucket it wins."""
    from evo.products.promote import promote
    from evo.store import open_store

    build_id, url = flattered(tmp_path, monkeypatch, "none", "flattered")
    with pytest.raises(EvoError, match="no candidate beats sdpa_default in any length bucket"):
        promote("flattered", tmp_path / "out", db_url=url, study="flattered", verify=False, confirm=True)
    with open_store(url) as store:
        now = {t.backend: t.median_us for t in store.timings_for(build_id) if t.shape == F1}
    print(now)
    assert now["evo"] > now["sdpa_default"] > 0 and now["evo"] != 5.0    # timed for real, beside SDPA
    # only the baseline the routing compares against is timed again (every backend took minutes)
    assert set(now) == {"evo", "sdpa_default"}
    assert not (tmp_path / "out").exists()
