"""A promoted package serves decode through a split-KV kernel (issue 34): flash_decode, built for
this GPU and stored green with decode timings, is promoted (unverified, to keep this test short),
pip-installed, and called on decode shapes; every output is compared with a float64 reference, and
``explain`` must name the decode kernel; calls with per-sequence lengths (``seqlens``) and paged
caches (``block_table``) go to the layout routes that its timings on ragged and paged cases won, served
by its _lens and _paged entries, and the package's own GPU test of those routes passes. The problems
run in an order where a launch with more tiles
follows one with fewer, and the other way round, on the package's one reused workspace: the class of
bug where one plan's counters lie over another's partial results (found on an H100 in evo's runtime)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evo.results import CheckResult, Evaluation, Shape, Status, Timing

pytestmark = pytest.mark.gpu

NAME = "decode_gpu_pkg"
TIMED = [Shape("DA", 4, 32, 1, 128, False, "bf16", 8, 4096), Shape("DB", 1, 32, 1, 128, False, "bf16", 8, 16384),
         Shape("DC", 4, 32, 4, 128, True, "bf16", 8, 4096, "bottom_right")]
# ragged and paged batches, full and causal: the layout routes (capacities 1..16384, twice 8192)
TIMED += [Shape(f"D{layout[0].upper()}{'c' if causal else ''}", 8, 32, 1, 128, causal, "bf16", 8, 8192, "top_left",
                layout, 100, 34, 16 if layout == "paged" else 0)
          for layout in ("lens", "paged") for causal in (False, True)]
# (B, Hq, Hkv, Lq, Lk, causal): one tile split many ways, then 32 tiles, then back, each twice
PROBLEMS = [(1, 8, 1, 1, 16384, False), (4, 32, 8, 1, 8192, False), (1, 8, 1, 1, 16000, False),
            (1, 32, 8, 4, 3000, True), (4, 32, 8, 4, 4096, True), (2, 16, 2, 16, 7777, True),
            (4, 32, 8, 1, 8192, False), (1, 8, 1, 1, 16384, False)]

SCRIPT = """
import json, math, sys
import torch
import {name} as pkg
from {name} import _fallback

suite = json.load(open(pkg._check._SUITE))
rows = []
for B, Hq, Hkv, Lq, Lk, causal in json.loads(sys.argv[1]):
    gen = torch.Generator(device="cuda").manual_seed(B * 7 + Lk)
    q, k, v = (torch.randn(d, generator=gen, device="cuda").to(torch.bfloat16)
               for d in ((B, Hq, Lq, 128), (B, Hkv, Lk, 128), (B, Hkv, Lk, 128)))
    kw = dict(is_causal=causal, enable_gqa=True, causal_align="bottom_right")
    out = pkg.attention(q, k, v, **kw)
    kk, vv = (t.repeat_interleave(Hq // Hkv, dim=1).double() for t in (k, v))
    s = (q.double() @ kk.transpose(-1, -2)) / math.sqrt(128)
    if causal:
        seen = torch.arange(Lk, device="cuda")[None, :] <= torch.arange(Lq, device="cuda")[:, None] + Lk - Lq
        s = s.masked_fill(~seen, float("-inf"))
    ref = torch.softmax(s, dim=-1) @ vv
    sdpa = _fallback.sdpa(q, k, v, None, 0.0, causal, None, True, True)
    err, sdpa_err = ((x.double() - ref).abs().max().item() for x in (out, sdpa))
    rows.append({{"problem": [B, Hq, Hkv, Lq, Lk, causal], "explain": pkg.explain(q, k, v, **kw), "err": err,
                 "tol": suite["multiplier"] * sdpa_err + suite["floors"]["bf16"]}})
print("RESULT " + json.dumps(rows))
"""

# (B, Hq, Hkv, Lq, capacity, causal, page_size: 0 for per-sequence lengths in a (B, Hkv, Lk, D) cache)
CACHE_PROBLEMS = [(4, 32, 8, 1, 8192, False, 0), (4, 32, 8, 4, 4096, True, 16), (2, 16, 2, 16, 7777, True, 0),
                  (1, 8, 1, 1, 16000, False, 16), (3, 32, 8, 2, 3000, True, 1), (4, 32, 8, 1, 8192, False, 48)]

CACHE_SCRIPT = """
import json, math, sys
import torch
import {name} as pkg
from {name} import _fallback

suite = json.load(open(pkg._check._SUITE))
rows = []
for B, Hq, Hkv, Lq, Lk, causal, page in json.loads(sys.argv[1]):
    gen = torch.Generator(device="cuda").manual_seed(B * 11 + Lk)
    q, k, v = (torch.randn(d, generator=gen, device="cuda").to(torch.bfloat16)
               for d in ((B, Hq, Lq, 128), (B, Hkv, Lk, 128), (B, Hkv, Lk, 128)))
    lens = [Lk, 0, 1, *torch.randint(0, Lk + 1, (B,), generator=gen, device="cuda").tolist()][:B]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    kw = dict(is_causal=causal, enable_gqa=True, seqlens=seqlens)
    kk, vv = k, v
    if page:
        pages = -(-Lk // page)
        table = torch.randperm(B * pages, generator=gen, device="cuda").view(B, pages).to(torch.int32)
        pool = [torch.zeros(B * pages, Hkv, page, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
        for t, cache in zip(pool, (k, v)):
            padded = torch.zeros(B, Hkv, pages * page, 128, dtype=torch.bfloat16, device="cuda")
            padded[:, :, :Lk] = cache
            t[table.long().view(-1)] = padded.view(B, Hkv, pages, page, 128).transpose(1, 2).reshape(-1, Hkv, page, 128)
        kk, vv = pool
        kw["block_table"] = table
    out = pkg.attention(q, kk, vv, **kw)
    ref = torch.zeros(B, Hq, Lq, 128, dtype=torch.float64, device="cuda")
    for b, n in enumerate(lens):
        if not n:
            continue
        kb, vb = (t[b, :, :n].repeat_interleave(Hq // Hkv, dim=0).double() for t in (k, v))
        s = (q[b].double() @ kb.transpose(-1, -2)) / math.sqrt(128)
        if causal:
            seen = torch.arange(n, device="cuda")[None, :] <= torch.arange(Lq, device="cuda")[:, None] + n - Lq
            s = s.masked_fill(~seen, float("-inf"))
        ref[b] = (torch.softmax(s, dim=-1).nan_to_num(0.0) @ vb)
    sdpa = _fallback.sdpa_cache(q, kk, vv, causal, None, True, seqlens, kw.get("block_table"))
    err, sdpa_err = ((x.double() - ref).abs().max().item() for x in (out, sdpa))
    rows.append({{"problem": [B, Hq, Hkv, Lq, Lk, causal, page], "explain": pkg.explain(q, kk, vv, **kw),
                 "err": err, "tol": suite["multiplier"] * sdpa_err + suite["floors"]["bf16"],
                 "zeros": not bool(out[1].any()) if B > 1 else True}})
print("RESULT " + json.dumps(rows))
"""


def _stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """flash_decode at its defaults, built for this GPU and stored green and faster than SDPA on
    TIMED; (build id, database URL)."""
    import torch

    from evo.family.render import render
    from evo.family.space import make_candidate
    from evo.gpu.suites import green_cases
    from evo.store import open_store
    from evo.toolchain.build import build_batch, default_arch

    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "cache"))
    rendered = render(make_candidate("flash_decode"))
    (built,) = build_batch([rendered], arch=default_arch())
    assert built.status is Status.BUILT, built.reason
    major, minor = torch.cuda.get_device_capability()
    device = {"name": torch.cuda.get_device_name(), "sm": f"{major}{minor}"}
    checks = [CheckResult(s, 0, True, 1e-4, 2e-4, 9e-4) for s in green_cases()]
    timings = [t for s in TIMED for t in (Timing(s, "evo", 5.0, 4.9, 5.1), Timing(s, "sdpa_default", 9.0, 8.9, 9.1))]
    url = f"sqlite:///{tmp_path / 'evo.sqlite'}"
    with open_store(url) as store:
        run = store.start_run("test", study="decode", device=device)
        store.record_build(rendered, built, run)
        store.record_evaluation(Evaluation(built.build_id, Status.FAST, checks=checks, timings=timings,
                                           device=device), run)
    return built.build_id, url


def test_an_installed_package_serves_decode_with_the_split_kv_kernel(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from evo.products.promote import promote

    build_id, url = _stored(tmp_path, monkeypatch)
    promote(NAME, tmp_path / "out", db_url=url, study="decode", verify=False)
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", "-q", "--target", str(target), str(tmp_path / "out" / NAME)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("EVO_TEMPLATE_PATH", "EVO_CANDIDATES")}
    env["PYTHONPATH"] = str(target)
    run = subprocess.run([sys.executable, "-c", SCRIPT.format(name=NAME), json.dumps(PROBLEMS)], capture_output=True,
                         text=True, timeout=900, cwd=tmp_path, env=env)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads(lines[-1][len("RESULT "):])
    for row in rows:
        print(row)
        causal = row["problem"][-1]
        assert row["explain"].startswith(f"kernel evo_attn_d128_bf16_{'causal' if causal else 'full'} of candidate "
                                         f"{build_id[:12]} (its decode route "), row
        assert row["err"] <= row["tol"], row
    assert len(rows) == len(PROBLEMS)

    # per-sequence lengths and paged caches go to the same kernel's _lens / _paged entry
    run = subprocess.run([sys.executable, "-c", CACHE_SCRIPT.format(name=NAME), json.dumps(CACHE_PROBLEMS)],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads(lines[-1][len("RESULT "):])
    for row in rows:
        print(row)
        causal, page = row["problem"][-2:]
        layout = "paged" if page else "lens"
        entry = f"evo_attn_d128_bf16_{'causal' if causal else 'full'}_{layout}"
        assert row["explain"].startswith(f"kernel {entry} of candidate {build_id[:12]} (its {layout} route "), row
        assert row["err"] <= row["tol"] and row["zeros"], row
    assert len(rows) == len(CACHE_PROBLEMS)

    # the package's own GPU test of its layout routes
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "--pyargs",
                          f"{NAME}.tests", "-k", "layout_route"], capture_output=True, text=True, timeout=900,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
