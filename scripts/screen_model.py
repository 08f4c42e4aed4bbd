"""What a screen whose cases are the full rung's own ratios would be off by (issue 35, before a GPU run).

For every study of a database whose trials were timed in full on all their cases, each trial's
screened score is made by evo's own screen (:func:`evo.search.screen.screened` over
:func:`~evo.search.screen.screen_cases`, a group's mean standing in for its unscreened cases) from
its full speedups on the screened cases alone, and compared with its full score: the error left
when the screen's long cases are timed as the full rung times them and nothing else differs (the
short cases' own screen noise not included). Prints, per study, the median |error| and the errors
of the 10 best by that screened score.

    python scripts/screen_model.py DB.sqlite
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from collections import Counter

from evo.gpu.suites import fast_cases_by_tag
from evo.results import Shape, Timing
from evo.scoring import geomean
from evo.search.screen import screen_cases, screened

BASE = "sdpa_default"
QUERY = """select s.study_name, a.value_json from trials t join studies s using(study_id)
           join trial_user_attributes a on a.trial_id = t.trial_id where a.key = 'speedups'"""


def studies(path: str) -> dict[str, list[dict[str, float]]]:
    """Per study, its trials' per-case speedups, only those of the study's most common case set."""
    shapes = fast_cases_by_tag()
    found: dict[str, list[dict[str, float]]] = {}
    for study, value in sqlite3.connect(path).execute(QUERY):
        sp = json.loads(value)
        if sp and all(tag in shapes and x and x > 0 for tag, x in sp.items()):
            found.setdefault(study, []).append(sp)
    out = {}
    for study, rows in found.items():
        common, _ = Counter(frozenset(r) for r in rows).most_common(1)[0]
        out[study] = [r for r in rows if frozenset(r) == common]
    return out


def errors(rows: list[dict[str, float]]) -> list[tuple[float, float]]:
    """(screened score, screened / full - 1) of each trial."""
    shapes = fast_cases_by_tag()
    cases: list[Shape] = [shapes[t] for t in sorted(rows[0])]
    chosen = screen_cases(cases)
    out = []
    for sp in rows:
        timings = [t for s in chosen for t in (Timing(s, "evo", 1.0 / sp[s.tag], 0, 0), Timing(s, BASE, 1.0, 0, 0))]
        screen = screened(timings, BASE, cases)
        if screen is not None:
            out.append((screen.score, screen.score / geomean(sp.values()) - 1.0))
    return out


def main(path: str) -> None:
    for study, rows in studies(path).items():
        if len(rows) < 15:
            continue
        errs = errors(rows)
        top = [e * 100 for _, e in sorted(errs, reverse=True)[:10]]
        print(f"{study:22} trials {len(errs):3}  cases {len(rows[0]):2}  median |error| "
              f"{statistics.median(abs(e) for _, e in errs) * 100:.2f} %  top 10 by screen: "
              + " ".join(f"{x:+.1f}" for x in top) + f"  (within 2 %: {sum(abs(x) <= 2 for x in top)})")


if __name__ == "__main__":
    main(sys.argv[1])
