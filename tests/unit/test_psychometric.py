"""A staircase participant's threshold interval (the penalised profile likelihood): where it
lies, how it mirrors for a rate, and that an end the answers do not bound stays open."""

from __future__ import annotations

import math

from retimer.study.psychometric import REACH, THRESHOLD_GRID, profile_interval

LEVELS = [300.0, 424.0, 600.0, 849.0, 1200.0]  # a factor of sqrt(2) apart, centred on 600


def _trials(slow_of_six: list[int], levels: list[float] = LEVELS) -> tuple[list[float], list[bool]]:
    stimuli: list[float] = []
    slow: list[bool] = []
    for level, k in zip(levels, slow_of_six, strict=True):
        stimuli += [level] * 6
        slow += [True] * k + [False] * (6 - k)
    return stimuli, slow


def _grid_step(stimuli: list[float]) -> float:
    span = math.log(max(stimuli) / min(stimuli)) + 2 * REACH
    return span / (THRESHOLD_GRID - 1)


def test_answers_symmetric_about_a_level_give_an_interval_symmetric_about_it() -> None:
    stimuli, slow = _trials([1, 2, 3, 4, 5])
    low, high = profile_interval(stimuli, slow, 0.5, 1.0)
    assert low < 600 < high
    # symmetric on the log scale, to the grid's resolution
    assert abs(math.log(low * high / 600**2)) <= 2 * _grid_step(stimuli)
    assert 300 < low and high < 1200  # thirty answers bound it within the levels


def test_a_rate_mirrors_a_ttft() -> None:
    """A rate is slower when lower: the same answers at 1/x give the interval at 1/x."""
    stimuli, slow = _trials([0, 1, 3, 5, 6])
    low, high = profile_interval(stimuli, slow, 0.5, 1.0)
    rates = [60_000 / s for s in stimuli]  # tok/s, slowest at the longest wait
    r_low, r_high = profile_interval(rates, slow, 0.5, -1.0)
    assert math.isclose(r_low, 60_000 / high, rel_tol=1e-9)
    assert math.isclose(r_high, 60_000 / low, rel_tol=1e-9)


def test_more_answers_narrow_it() -> None:
    few = profile_interval(*_trials([1, 2, 3, 4, 5]), 0.5, 1.0)
    many_stimuli, many_slow = _trials([1, 2, 3, 4, 5])
    many = profile_interval(many_stimuli * 4, many_slow * 4, 0.5, 1.0)
    assert few[0] < many[0] < 600 < many[1] < few[1]


def test_an_end_the_answers_do_not_bound_stays_open() -> None:
    """Mostly "not slow" up to the slowest level: the threshold may lie far beyond it."""
    stimuli, slow = _trials([0, 0, 0, 1, 2])
    low, high = profile_interval(stimuli, slow, 0.5, 1.0)
    assert high == math.inf and 600 < low < 1200


def test_the_rules_share_moves_it() -> None:
    """Read at 70.7 % "slow" (2-down/1-up), the threshold is slower than at 50 %."""
    stimuli, slow = _trials([1, 2, 3, 4, 5])
    half = profile_interval(stimuli, slow, 0.5, 1.0)
    seventy = profile_interval(stimuli, slow, 0.5 ** 0.5, 1.0)
    assert seventy[0] > half[0] and seventy[1] > half[1]


def test_an_open_interval_is_shown_and_written_as_open() -> None:
    import json

    from retimer.study.threshold import Fitted, Thresholds
    from retimer.study.threshold_view import threshold_json, threshold_lines

    people = [Fitted("P1", 30, 0.2, 900.0, (420.0, math.inf), 2.5, "psychometric fit", 4),
              Fitted("P2", 30, 0.5, 600.0, (480.0, 750.0), 3.0, "psychometric fit", 6)]
    t = Thresholds("s", "ttft", "ms", 0.5, people, 750.0, None)
    rows = {line.split()[0]: line for line in threshold_lines(t) if line.startswith("P")}
    assert rows["P1"].split()[4] == ">420" and rows["P2"].split()[4] == "480-750"
    assert any("bound that interval on one side only" in line for line in threshold_lines(t))
    written = json.loads(json.dumps(threshold_json(t), allow_nan=False))
    assert [p["ci"] for p in written["participants"]] == [[420.0, None], [480.0, 750.0]]
