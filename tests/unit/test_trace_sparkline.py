"""Records keep both sides' token events compactly and bounded; the live view draws them."""

from __future__ import annotations

import io
import json

import numpy as np
from rich.console import Console

from retimer.cli.proxy.liveview import SPARK_WIDTH, LiveView, sparkline
from retimer.timing.metrics import (
    TRACE_EXACT_EVENTS,
    TRACE_MAX_EVENTS,
    TRACE_UNIT_MS,
    StreamStats,
    decode_side,
)
from retimer.wire.protocols.base import Channel


def _stats(events: int, seed: int = 0) -> tuple[StreamStats, np.ndarray, np.ndarray]:
    """A stream of `events` upstream events, each re-emitted 0.2 s later, 0-3 ms late."""
    rng = np.random.default_rng(seed)
    start = 1000.0
    times = start + 0.05 + np.cumsum(rng.exponential(0.004, events))
    sizes = rng.integers(1, 6, events)
    late = rng.uniform(0, 0.003, events)
    stats = StreamStats(start=start, target_ttft=0.2)
    sent = 0.0
    for t, n, lag in zip(times, sizes, late, strict=True):
        stats.upstream_tokens(float(t), int(n), Channel.TEXT)
        sent = max(sent, float(t) + 0.2 + lag)  # a socket sends in order
        stats.emitted(sent, int(n), Channel.TEXT, due=float(t) + 0.2)
    return stats, (times - start) * 1000, sizes


def test_trace_round_trips_under_the_bound() -> None:
    stats, t_ms, sizes = _stats(300)
    rec = stats.record(end=stats.emitted_side.last or 0.0)
    trace = rec["trace"]
    assert trace["unit_ms"] == TRACE_UNIT_MS
    up_t, up_n = decode_side(trace["upstream"])
    em_t, em_n = decode_side(trace["emitted"])
    due_t, _ = decode_side(trace["emitted"], key="due")
    assert "exact" not in trace["upstream"] and len(up_t) == 300
    assert np.abs(up_t - t_ms).max() <= TRACE_UNIT_MS / 2 + 1e-9  # rounding only, no drift
    assert up_n.tolist() == sizes.tolist() == em_n.tolist()
    assert np.abs(due_t - (t_ms + 200)).max() <= TRACE_UNIT_MS / 2 + 1e-9
    assert ((em_t - due_t) >= -TRACE_UNIT_MS).all() and ((em_t - due_t) <= 3.01).all()
    assert all(isinstance(v, int) for v in trace["upstream"]["t"])  # integer deltas
    assert rec["upstream"]["tokens"] == int(sizes.sum())


def test_trace_is_bounded_and_keeps_the_totals() -> None:
    stats, t_ms, sizes = _stats(7000, seed=1)
    trace = stats.record(end=stats.emitted_side.last or 0.0)["trace"]
    size = len(json.dumps(trace))
    assert size < 70_000, size  # both sides, with due times: ~30 KB each at worst
    for key in ("upstream", "emitted"):
        side = trace[key]
        t, n = decode_side(side)
        assert len(t) <= TRACE_MAX_EVENTS and side["events"] == 7000
        assert side["exact"] == TRACE_EXACT_EVENTS
        assert int(n.sum()) == int(sizes.sum())  # no token lost
        offset = 0 if key == "upstream" else 200
        head = TRACE_EXACT_EVENTS
        tol = 0.006 if key == "upstream" else 3.01  # rounding only; emitted: + lateness
        assert np.abs(t[:head] - t_ms[:head] - offset).max() < tol  # exact head, one by one
        assert n[:head].tolist() == sizes[:head].tolist()
        assert abs(t[0] - t_ms[0] - offset) < 3.01 and abs(t[-1] - t_ms[-1] - offset) < 3.01
        assert (np.diff(t) >= 0).all()
    up_t, up_n = decode_side(trace["upstream"])
    merged = up_n[TRACE_EXACT_EVENTS:]
    assert merged.mean() > 3 * sizes.mean()  # the tail really is merged groups


def test_decode_side_tolerates_junk() -> None:
    assert len(decode_side(None)[0]) == 0
    assert len(decode_side({"t": ["x"], "n": [1]})[0]) == 0
    t, n = decode_side({"t": [100, 100, 100], "n": [1, 2]})
    assert t.tolist() == [1.0, 2.0] and n.tolist() == [1, 2]


def _record(times_ms: list[float], sizes: list[int], duration_ms: float | None = None) -> dict:
    ticks = np.rint(np.asarray(times_ms) / TRACE_UNIT_MS).astype(int)
    return {"id": "a", "outcome": "complete", "protocol": "openai-chat", "profile": "groq",
            "url": "https://x.test/v1", "upstream_bound": False,
            "target": {"ttft_ms": 100.0, "tps": 50.0},
            "upstream": {"ttft_ms": 5.0, "tps": 900.0, "tokens": sum(sizes)},
            "emitted": {"ttft_ms": times_ms[0] if times_ms else None, "tps": 50.0,
                        "tokens": sum(sizes), "duration_ms": duration_ms},
            "trace": {"unit_ms": TRACE_UNIT_MS, "emitted": {
                "t": np.diff(ticks, prepend=0).tolist(), "n": sizes}}}


def test_sparkline_shows_the_wait_then_the_flow() -> None:
    times = list(np.linspace(500, 1000, 50))
    line = sparkline(_record(times, [1] * 50))
    assert len(line) == SPARK_WIDTH and set(line) <= set(" ▁▂▃▄▅▆▇█")
    half = SPARK_WIDTH // 2
    assert line[:half - 1].strip() == ""  # the first half second: waiting for the first token
    assert all(c != " " for c in line[half:])  # then a steady flow
    assert "█" in line[half:]


def test_sparkline_burst_and_stall() -> None:
    burst = sparkline(_record([10.0, 990.0], [1, 40]))
    assert burst[-1] == "█" and burst[0] == "▁" and burst[1:-1].strip() == ""
    # a stream still in flight: the slices run to now (duration), not to its last token
    live = sparkline(_record([100.0, 200.0], [5, 5], duration_ms=1000.0))
    assert live[:3].strip() != "" and live[-5:] == "     "
    assert sparkline({"id": "b"}) == " " * SPARK_WIDTH


def _table_text(view: LiveView) -> str:
    out = io.StringIO()
    Console(file=out, width=220, color_system=None).print(view.table())
    return out.getvalue()


def test_live_table_has_a_sparkline_except_when_blind() -> None:
    rec = _record(list(np.linspace(500, 1000, 50)), [1] * 50)
    view = LiveView(out=io.StringIO(), interactive=False)
    view(rec)
    assert "flow" in _table_text(view) and sparkline(rec) in _table_text(view)
    blind = LiveView(out=io.StringIO(), interactive=False, blind=True)
    blind(rec)
    # a participant's view must not show the pace (it would reveal the condition)
    assert not set(_table_text(blind)) & set("▁▂▃▄▅▆▇█")


def test_endless_stream_state_stays_bounded() -> None:
    """A stream that never ends keeps a bounded number of events per side (merged pairwise)."""
    from retimer.timing.metrics import SIDE_MAX_EVENTS, TRACE_EXACT_EVENTS, StreamStats
    from retimer.wire.protocols.base import Channel

    stats = StreamStats(start=0.0, target_ttft=0.1)
    total = 3 * SIDE_MAX_EVENTS
    for i in range(total):
        t = 0.1 + i * 0.001
        stats.upstream_tokens(t, 2, Channel.TEXT)
        stats.emitted(t + 0.0005, 2, Channel.TEXT, t + 0.0004)
    for side in (stats.upstream, stats.emitted_side):
        assert len(side.event_times) <= SIDE_MAX_EVENTS + 1
        assert len(side.event_times) == len(side.event_tokens)
        assert sum(side.event_tokens) == side.tokens == 2 * total  # no token lost
        assert side.event_times[:TRACE_EXACT_EVENTS] == [
            0.1 + i * 0.001 + (0.0005 if side is stats.emitted_side else 0)
            for i in range(TRACE_EXACT_EVENTS)]
        assert side.event_times[-1] == side.last
        assert side.event_times == sorted(side.event_times)
    assert len(stats.lateness) == len(stats.emitted_side.event_times)
    assert max(stats.lateness) < 0.00011  # the kept lateness values are real ones
    record = stats.record(end=1e3)
    assert record["emitted"]["tokens"] == 2 * total
