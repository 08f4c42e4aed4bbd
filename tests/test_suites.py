"""The acceptance suites load with exactly the documented shapes, and FAST selection parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.results import Shape
from evo.gpu.suites import fast_cases, green_cases, green_settings

GREEN = {"G1": (1, 8, 512, 64), "G2": (2, 12, 1024, 64), "G3": (1, 16, 2048, 128),
         "G4": (4, 8, 333, 64), "G5": (2, 4, 1531, 128)}
FAST = {"F1": (1, 8, 512, 64), "F2": (1, 16, 1024, 64), "F3": (32, 8, 128, 64),
        "F4": (8, 12, 2048, 64), "F5": (1, 12, 8192, 64), "F6": (1, 12, 4096, 128),
        "F7": (2, 16, 8192, 128), "F8": (4, 32, 4096, 128)}


def _expected(table: dict[str, tuple[int, int, int, int]], dtype: str,
              names: list[str] | None = None, modes: tuple[bool, ...] = (False, True)) -> list[Shape]:
    return [Shape(n, *table[n], causal=c, dtype=dtype) for n in (names or table) for c in modes]


def test_green_cases_are_the_suite_in_both_dtypes_fp16_first() -> None:
    assert green_cases() == _expected(GREEN, "fp16") + _expected(GREEN, "bf16")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_green_cases_for_one_dtype(dtype: str) -> None:
    assert green_cases([dtype]) == _expected(GREEN, dtype)


def test_green_has_a_ragged_tail() -> None:
    assert any(s.L % 16 for s in green_cases(["fp16"]))


def test_green_settings() -> None:
    st = green_settings()
    assert len(st.seeds) >= 2 and st.multiplier == 2.0
    assert set(st.floors) == {"fp16", "bf16"} and st.floors["fp16"] < st.floors["bf16"]
    assert "fp16" in st.gate_dtypes and st.guard_elements >= 4096


def test_tolerance_is_multiplier_times_ref_err_plus_floor() -> None:
    st = green_settings()
    assert st.tolerance(1e-3, "fp16") == pytest.approx(2 * 1e-3 + st.floors["fp16"])


def test_a_share_of_the_tolerance_narrows_multiplier_and_floor_alike() -> None:
    st = green_settings()
    narrow = st.share(0.75)
    for dtype in ("fp16", "bf16"):
        assert narrow.tolerance(1e-3, dtype) == pytest.approx(0.75 * st.tolerance(1e-3, dtype))
    assert st.tolerance(1e-3, "fp16") == pytest.approx(2 * 1e-3 + st.floors["fp16"])   # unchanged


def test_fast_cases_default_to_every_case_in_fp16() -> None:
    assert fast_cases() == _expected(FAST, "fp16")


def test_fast_cases_in_another_dtype() -> None:
    assert {s.dtype for s in fast_cases(dtype="bf16")} == {"bf16"}


@pytest.mark.parametrize(("select", "names", "modes"), [
    (["F1"], ["F1"], (False, True)),
    (["F3c"], ["F3"], (True,)),
    (["F3f"], ["F3"], (False,)),
    (["F1-F4"], ["F1", "F2", "F3", "F4"], (False, True)),
    (["F6-F8c"], ["F6", "F7", "F8"], (True,)),
    (["F5, F2"], ["F2", "F5"], (False, True)),
    (["F2", "F2c"], ["F2"], (False, True)),
])
def test_fast_selection(select: list[str], names: list[str], modes: tuple[bool, ...]) -> None:
    assert fast_cases(select) == _expected(FAST, "fp16", names, modes)


def test_fast_selection_merges_modes_per_case() -> None:
    assert fast_cases(["F1c", "F2f", "F1f"]) == (_expected(FAST, "fp16", ["F1"])
                                                  + _expected(FAST, "fp16", ["F2"], (False,)))


@pytest.mark.parametrize("select", [["F9"], ["G1"], ["F4-F1"], ["F1-F9"], ["f1"], [""], ["F1x"]])
def test_fast_selection_rejects_unknown_names(select: list[str]) -> None:
    with pytest.raises(EvoError):
        fast_cases(select)


@pytest.mark.parametrize("call", [lambda: fast_cases(dtype="fp32"), lambda: green_cases(["fp8"])])
def test_unknown_dtypes_are_rejected(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EvoError, match="unknown dtype"):
        call()


CASE = '[[case]]\nname = "A"\nshape = [1, 1, 8, 16]\n'
FLOOR = "[tolerance]\nfloor = { fp16 = 5e-4, bf16 = 4e-3 }\n"
GOOD = "seeds = [0, 1]\n" + FLOOR + CASE


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("[1, 1, 8, 16]", "[1, 8, 16]"), "shape"),
    (GOOD + CASE, "duplicate"),
    (GOOD.replace("bf16 = 4e-3", "bf16 = 0.0"), "floor"),
    (GOOD.replace("seeds = [0, 1]", "seeds = []"), "seeds"),
    ("guard_elements = 100\n" + GOOD, "guard_elements"),
    ("seeds = [0, 1]\n" + FLOOR, "no \\[\\[case\\]\\]"),
    ("seeds = [", "cannot read"),
])
def test_broken_green_suite_is_an_evo_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "green.toml"
    path.write_text(text)
    with pytest.raises(EvoError, match=message):
        green_settings(path)


def test_a_minimal_green_suite_loads(tmp_path: Path) -> None:
    path = tmp_path / "green.toml"
    path.write_text(GOOD)
    assert green_cases(["fp16"], path=path) == [Shape("A", 1, 1, 8, 16, False), Shape("A", 1, 1, 8, 16, True)]
    assert green_settings(path).seeds == (0, 1)


@pytest.mark.parametrize(("select", "expected"), [
    (["F6-bf16"], [("F6", "bf16", False), ("F6", "bf16", True)]),
    (["F6c-bf16", "F1f"], [("F1", "fp16", False), ("F6", "bf16", True)]),
    (["F6-F7f-bf16"], [("F6", "bf16", False), ("F7", "bf16", False)]),
    (["F1-fp16", "F1c-bf16"], [("F1", "fp16", False), ("F1", "fp16", True), ("F1", "bf16", True)]),
])
def test_fast_selection_in_another_dtype_per_item(select: list[str], expected: list[tuple[str, str, bool]]) -> None:
    got = fast_cases(select)
    assert [(s.case, s.dtype, s.causal) for s in got] == expected
    assert {s.tag for s in got} == {f"{c}{'c' if k else ''}-{d}" for c, d, k in expected}   # tags read back


@pytest.mark.parametrize("select", [["F9-bf16"], ["bf16"], ["F1-fp32"], ["F1-bf16x"]])
def test_fast_selection_with_a_bad_dtype_suffix_is_rejected(select: list[str]) -> None:
    with pytest.raises(EvoError, match="unknown FAST case"):
        fast_cases(select)
