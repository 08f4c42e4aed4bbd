"""The benchmark's tables: every figure an evaluation count or "> budget", and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.samplerbench.entrants import Entrant
from evo.samplerbench.problem import Problem
from evo.samplerbench.report import OVER, section, table
from evo.samplerbench.run import RunResult
from synthetic_sweep import make_recording


@pytest.fixture(scope="module")
def problem(tmp_path_factory: pytest.TempPathFactory) -> Problem:
    return Problem.load(make_recording(tmp_path_factory.mktemp("r") / "sweep-synthetic.json.gz", seed=2),
                        ["flash_scalar"])


def runs(name: str, counts: list[int | None], mode: str = "cold") -> list[RunResult]:
    return [RunResult(name, mode, s, c, c or 60, c or 60, "reached" if c else "budget", 0.1, [0.5])
            for s, c in enumerate(counts)]


def rows_of(lines: list[str]) -> dict[str, list[str]]:
    return {cells[1].strip(): [c.strip() for c in cells[2:-1]]
            for cells in (line.split("|") for line in lines if line.startswith("| ") and "---" not in line)
            if cells[1].strip() != "sampler"}


ENTRANTS = [Entrant("evo", "evo"), Entrant("random", "evo"), Entrant("kt:pso", "kt")]


def test_unreached_runs_show_as_over_budget_never_as_numbers(problem: Problem) -> None:
    rs = runs("evo", [3, 4, 5, 6]) + runs("random", [10, None, None, None]) + runs("kt:pso", [None] * 4)
    got = rows_of(table(problem, ENTRANTS, rs, "cold"))
    assert got["evo"][:3] == ["4/4", "4", "3-5"]
    assert got["random"][:3] == ["1/4", OVER, f"10-{OVER}"]
    assert got["kt:pso"][:3] == ["0/4", OVER, f"{OVER}-{OVER}"]
    for cells in got.values():
        for fig in (cells[1], *cells[2].split("-", 1)):
            assert fig == OVER or fig.isdigit()


def test_the_verdict_names_the_best_peer_and_says_whether_the_bar_is_met(problem: Problem) -> None:
    fast = runs("evo", [2, 3, 3, 4, 4, 5] * 5) + runs("random", [20, 30, 40, 50, 60, None] * 5)
    text = "\n".join(table(problem, ENTRANTS[:2], fast, "cold"))
    assert "Best peer: **random** (median 40)" in text and "**yes**" in text
    slow = runs("evo", [30, 40, 50] * 5) + runs("random", [31, 41, 51] * 5)
    assert "**no**" in "\n".join(table(problem, ENTRANTS[:2], slow, "cold"))


def test_a_section_has_a_cold_and_a_warm_table_and_names_what_cannot_start_warm(problem: Problem) -> None:
    rs = runs("evo", [3, 4]) + runs("evo", [1, 2], "warm") + runs("kt:pso", [9, 9])
    ents = [Entrant("evo", "evo"), Entrant("kt:pso", "kt", warm=False)]
    text = section(problem, ents, rs, [0, 1], 1, 1.0, "abc", Path("p.png"))
    assert "### Cold start" in text and "### Warm start" in text and "take no starting point): kt:pso" in text
    assert "![" in text and "(p.png)" in text
