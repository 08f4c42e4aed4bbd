"""The read-bandwidth kernel on the GPU (evo.gpu.bandwidth): it reads every word of a buffer (its sum
equals torch's, a ragged tail included), and the ceiling it measures over buffers past L2 and the
largest decode cache is a plausible fraction of the GPU's datasheet HBM peak."""

from __future__ import annotations

import pytest
import torch

from evo.gpu.bandwidth import MIB, Reader, hbm_peak, kv_bytes, read_ceiling
from evo.gpu.suites import fast_cases
from evo.gpu.timing import L2_FACTOR, l2_bytes

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def reader() -> Reader:
    return Reader()


def torch_sum(buf: torch.Tensor) -> int:
    """The buffer's 32-bit words as unsigned, summed modulo 2^64 (what evo_read_sum computes)."""
    words = buf.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return int(words.sum().item()) % (1 << 64)


@pytest.mark.parametrize("nbytes", [16, 16 * 1024 + 48, 64 * MIB + 48, 257 * MIB])
def test_the_reader_reads_every_word_once(reader: Reader, nbytes: int) -> None:
    """Random words, and a buffer whose first and last words alone are set: a word skipped or read
    twice changes the sum (sizes with a partial last chunk, and one far over the grid's first pass)."""
    gen = torch.Generator(device="cuda").manual_seed(34)
    buf = torch.randint(-(2 ** 31), 2 ** 31 - 1, (nbytes // 4,), generator=gen, dtype=torch.int32, device="cuda")
    assert reader.sum(buf) == torch_sum(buf)
    ends = torch.zeros_like(buf)
    ends[0], ends[-1] = 7, -1                      # -1: 2^32 - 1 as an unsigned word
    assert reader.sum(ends) == 7 + (1 << 32) - 1
    assert reader.sum(buf) == torch_sum(buf)      # the total starts from zero on every sum


def test_the_ceiling_is_plausible_and_read_past_l2() -> None:
    peak = hbm_peak(torch.cuda.get_device_name())
    if peak is None:
        pytest.skip(f"no datasheet HBM peak for {torch.cuda.get_device_name()}")
    largest = max(kv_bytes(s) for s in fast_cases(["decode"]))
    ceiling = read_ceiling(largest).as_dict()
    assert 0.3 * peak["gbps"] <= ceiling["gbps"] <= peak["gbps"], ceiling
    assert all(s["bytes"] >= max(largest, L2_FACTOR * l2_bytes()) for s in ceiling["sizes"])
    assert ceiling["gbps"] == max(s["gbps"] for s in ceiling["sizes"]) and "evo_read_sum" in ceiling["method"]
