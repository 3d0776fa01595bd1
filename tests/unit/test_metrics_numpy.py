"""A record's figures are computed in plain Python (cheaper on the event loop than numpy's
per-call overhead for a stream's few hundred events): they must be numpy's, to the bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.timing.metrics import Side, StreamStats, encode_side, percentile, round3

_times = st.lists(st.floats(0, 1e4, allow_nan=False, allow_infinity=False), min_size=1, max_size=300)


@settings(max_examples=300, deadline=None)
@given(_times, st.sampled_from([0, 1, 25, 50, 90, 99, 100]))
def test_a_percentile_is_numpys_linear_one(values: list[float], q: int) -> None:
    assert percentile(sorted(values), q) == np.percentile(np.asarray(values), q)


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_rounding_is_numpys(x: float) -> None:
    assert round3(x) == round(np.float64(x), 3)


def test_rounding_at_a_half_is_numpys_not_pythons() -> None:
    # numpy scales, rounds and divides; Python rounds the decimal value it stores
    assert round3(53.2385) == round(np.float64(53.2385), 3) == 53.238
    assert round(53.2385, 3) == 53.239  # Python's round, which the records did not use


def _numpy_summary(side: Side) -> dict[str, float]:
    gaps = np.diff(np.asarray(side.event_times)) * 1000
    p50, p90, p99 = np.percentile(gaps, [50, 90, 99])
    return {"p50": round(p50, 3), "p90": round(p90, 3), "p99": round(p99, 3)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-5, 0.5), min_size=3, max_size=300), st.floats(100, 1e5),
       st.lists(st.floats(-0.01, 0.05), min_size=300, max_size=300))
def test_a_records_figures_are_numpys(gaps: list[float], start: float, late: list[float]) -> None:
    stats = StreamStats(start=start, target_ttft=0.1)
    t = start + 0.2
    for gap, lateness in zip(gaps, late, strict=False):
        t += gap
        stats.upstream_tokens(t - 0.1, 2, None)
        stats.emitted(t, 1, None, t - lateness)
    record = stats.record(t + 0.01)
    assert record["emitted"]["gap_ms"] == _numpy_summary(stats.emitted_side)
    assert record["upstream"]["gap_ms"] == _numpy_summary(stats.upstream)
    arr = np.asarray(stats.lateness) * 1000
    p50, p99 = np.percentile(arr, [50, 99])
    assert record["lateness_ms"] == {"p50": round(p50, 3), "p99": round(p99, 3),
                                     "max": round(float(arr.max()), 3)}
    dues = np.asarray(stats.emitted_side.event_times) - np.asarray(stats.lateness)
    due_ticks = np.rint((dues - start) * (1000.0 / 0.01)).astype(np.int64)
    assert record["trace"]["emitted"]["due"] == np.diff(due_ticks, prepend=0).tolist()


def test_a_long_side_is_merged_as_before() -> None:
    times = [i * 0.001 for i in range(5000)]
    side = encode_side(times, [1] * 5000, 0.0, [t - 0.0005 for t in times], max_events=100, exact=10)
    assert side["exact"] == 10 and side["events"] == 5000
    assert len(side["t"]) == len(side["n"]) == len(side["due"]) <= 100
    assert sum(side["n"]) == 5000  # the token total stays exact
    assert sum(side["t"]) == round(times[-1] * 1e5)  # and the last event's time
