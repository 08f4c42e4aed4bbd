"""Promote's checks over a dispatch bucket catch the kernel ABI v2 faults a bucket's self-attention
checks cannot see, on CPU: torch stand-ins for the faulty family's wrong_kv_head, ignore_lk,
top_left_only and causal_off_by_one (tests/templates/faulty) pass every multi-head self-attention
check of a bucket (``bucket_cases``, the package's stress test) and fail the checks that make a
route serve grouped heads, Lq != Lk and both causal corners (``llm_bucket_cases``,
``grouped_cases``, the multi-query many-heads check); an honest kernel passes them all. So a
package never serves a v2 problem its kernel was not checked on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from evo.gpu.draws import stress_cases
from evo.gpu.gate import reference, run_green, verdict
from evo.gpu.suites import DrawSettings, green_settings
from evo.products.verify import Bucket, cases_for
from evo.results import Status

Tensor = torch.Tensor
KEY = (16, "fp16", True)
BUCKET = Bucket(KEY, 9, 40, (24,), heads=48)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _attend(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, shift: int) -> Tensor:
    return reference(q, k, v, causal, scale, torch.float32, shift=shift).to(q.dtype)


def correct(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(_attend(q, k, v, causal, scale, shift))


def wrong_kv_head(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """Query head h on key/value head h % Hkv."""
    index = torch.arange(q.shape[1]) % k.shape[1]
    o.copy_(_attend(q, k[:, index], v[:, index], causal, scale, shift))


def ignore_lk(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    """No more keys than queries."""
    Lq = q.shape[2]
    o.copy_(_attend(q, k[:, :, :Lq], v[:, :, :Lq], causal, scale, shift))


def top_left_only(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(_attend(q, k, v, causal, scale, 0))


def causal_off_by_one(q: Tensor, k: Tensor, v: Tensor, o: Tensor, causal: bool, scale: float, shift: int = 0) -> None:
    o.copy_(_attend(q, k, v, causal, scale, shift + 1 if shift else 0))


FAULTS = [wrong_kv_head, ignore_lk, top_left_only, causal_off_by_one]


def _verdict(launch: Callable[..., None], cases: list) -> tuple[Status, str]:
    settings = green_settings().share(0.75)
    return verdict(run_green(launch, cases, settings, 3, device="cpu"))


def test_an_honest_kernel_passes_every_check_of_the_bucket() -> None:
    status, why = _verdict(correct, cases_for([BUCKET], seed=3))
    assert status is Status.GREEN, why


@pytest.mark.parametrize("launch", FAULTS, ids=lambda f: f.__name__)
def test_a_v2_fault_passes_the_self_attention_checks_and_is_refused_by_the_bucket_ones(
        launch: Callable[..., None]) -> None:
    cases = cases_for([BUCKET], seed=3)
    self_attention = [c for c in cases if c.shape.Hkv == c.shape.H and c.shape.Lk == c.shape.L]
    assert len(self_attention) >= len(stress_cases(DrawSettings(), KEY, (23, 24)))
    assert _verdict(launch, self_attention)[0] is Status.GREEN
    status, why = _verdict(launch, cases)
    assert status is Status.RED and "max|err|" in why
