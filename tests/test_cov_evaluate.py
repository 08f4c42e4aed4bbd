"""evo/gpu/evaluate.py's loading of what a request names, on CPU: a built Python-module candidate
(the pytiny fixture family: plain torch, so its kernel runs here) is hashed, loaded and wired to
the FAST op; a promoted package's ``attention`` is called as the op; an artifact rewritten while
it loads is refused; and the driver version comes from nvidia-smi. tests/test_evaluate.py
drives serve() with these parts replaced; tests/test_worker_gpu.py runs them on a GPU."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import torch

from evo.gpu import evaluate, kernels
from evo.toolchain.build import build_batch
from evo.errors import EvoError
from evo.family.render import render
from evo.results import Evaluation, Status
from evo.family.space import make_candidate
from evo.gpu.worker import EvalRequest

FIXTURES = Path(__file__).parent / "fixtures" / "templates"


@pytest.fixture
def pytiny(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> EvalRequest:
    """A request for the built default pytiny candidate."""
    monkeypatch.setenv("EVO_TEMPLATE_PATH", str(FIXTURES))
    monkeypatch.setenv("EVO_CANDIDATES", str(tmp_path / "candidates"))
    item = render(make_candidate("pytiny"))
    (built,) = build_batch([item], arch="sm_90a")
    assert built.status is Status.BUILT and built.cubin_path, built.reason
    return EvalRequest(built.build_id, built.cubin_path, item.entries, fast_cases=())


def qkv(causal_len: int = 12) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(1, 2, causal_len, 64, generator=gen).half() for _ in range(3)]


def test_a_built_module_is_hashed_loaded_and_launched_as_the_fast_op(pytiny: EvalRequest) -> None:
    ev = Evaluation(pytiny.build_id, Status.GREEN)
    kernels, op, entries = evaluate._candidate(pytiny, ev)
    assert ev.device["cubin_sha256"] == hashlib.sha256(Path(pytiny.cubin_path).read_bytes()).hexdigest()
    assert "kernel_sha256" not in ev.device  # a Python module has no machine code to digest
    assert entries == list(pytiny.entries) and kernels.entries == tuple(pytiny.entries)
    assert kernels.module.WARPS == 2  # the rendered default
    q, k, v = qkv()
    o = torch.empty_like(q)
    with pytest.raises(EvoError, match="q is on cpu; the kernels are loaded on cuda:0"):
        op(q, k, v, o, causal=True, shift=0)  # loaded for GPU 0: the ABI checks reach the op
    kernels._torch_device = torch.device("cpu")
    op(q, k, v, o, causal=True, shift=0)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert torch.allclose(o.float(), ref, atol=2e-3)
    kernels(q, k, v, o, False, 0.125, 0)  # the gate's launch signature, scale as given
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.125)
    assert torch.allclose(o.float(), ref, atol=2e-3)


def test_an_artifact_rewritten_while_it_loads_is_refused(pytiny: EvalRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    load = kernels.load_kernels

    def load_while_rebuilt(artifact: str, entries: object, device: int = 0) -> object:
        kernels = load(artifact, entries, device)  # type: ignore[arg-type]
        with open(artifact, "a") as f:  # another build writes the same path meanwhile
            f.write("\n# rebuilt\n")
        return kernels

    monkeypatch.setattr(kernels, "load_kernels", load_while_rebuilt)
    ev = Evaluation(pytiny.build_id, Status.GREEN)
    with pytest.raises(EvoError, match=f"{pytiny.cubin_path} changed while it was being loaded"):
        evaluate._candidate(pytiny, ev)
    assert "cubin_sha256" not in ev.device  # no hash is claimed for what was not loaded as hashed


def test_a_promoted_package_is_timed_through_its_attention(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "evo_attn_cov.py").write_text(
        "import torch\n"
        "calls = []\n"
        "def prepare():\n"
        "    calls.append('prepare')\n"
        "    return False\n"
        "def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,\n"
        "              enable_gqa=False, *, causal_align='top_left'):\n"
        "    calls.append((is_causal, enable_gqa, causal_align))\n"
        "    return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=is_causal,\n"
        "                                                            enable_gqa=enable_gqa)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "evo_attn_cov", raising=False)
    request = EvalRequest("package:evo_attn_cov", "", (), green=False, options={"package": "evo_attn_cov"})
    ev = Evaluation(request.build_id, Status.GREEN)
    launch, op, entries = evaluate._candidate(request, ev)
    # nothing to gate, no cubin to name; the launcher is prepared before any timing, and said so
    assert launch is None and entries is None and ev.device == {"package_kernels": "False"}
    q, k, v = (t.float() for t in qkv())
    out = op(q, k, v, None, causal=True, shift=0)
    assert torch.equal(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    op(q, k[:, :1, :5].contiguous(), v[:, :1, :5].contiguous(), None, causal=True, shift=5 - q.shape[2])
    assert sys.modules["evo_attn_cov"].calls == ["prepare", (True, False, "top_left"), (True, True, "bottom_right")]
    with pytest.raises(EvoError, match="shift 3 is neither"):
        op(q, k, v, None, causal=True, shift=3)


@pytest.mark.parametrize(("answer", "version"), [(["580.65.06", "580.65.06"], "580.65.06"), (None, "unknown"),
                                                 ([], "unknown")])
def test_the_driver_version_is_nvidia_smis_first_answer(monkeypatch: pytest.MonkeyPatch, answer: list[str] | None,
                                                        version: str) -> None:
    asked: list[str] = []
    monkeypatch.setattr(evaluate.smi, "query", lambda field: asked.append(field) or answer)
    assert evaluate._driver_version() == version and asked == ["driver_version"]
