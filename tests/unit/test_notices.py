"""The warnings a run gives once whatever its workers (retimer.records.notices): each warning's
own text, as its addon writes it, gives its key; other lines give none."""

from __future__ import annotations

from retimer.records.notices import INFEASIBLE_CONDITION, UPSTREAM_BOUND, once_per_run


def test_each_once_per_run_warning_has_one_key_whatever_its_counts() -> None:
    bound = [f"retimer: {n} of the {n + 1} streams so far were upstream-bound: the upstream is "
             f"slower than the profile, and {UPSTREAM_BOUND}. To feel this speed, ..." for n in (5, 9)]
    assert once_per_run(bound[0]) == once_per_run(bound[1]) == UPSTREAM_BOUND
    first, second = (f"retimer study: WARNING: {INFEASIBLE_CONDITION.format(place=p)}, not by "
                     f"itself: 3 of its first {u} units were upstream-bound" for p, u in ((1, 3), (2, 4)))
    assert once_per_run(first) == "condition #1 of the study file is paced by the upstream"
    assert once_per_run(second) == "condition #2 of the study file is paced by the upstream"


def test_other_lines_are_not_said_once() -> None:
    for line in ("retimer: a malformed stream from api.openai.com passed through unchanged",
                 "retimer study: condition #x of the study file is paced by the upstream", ""):
        assert once_per_run(line) is None
