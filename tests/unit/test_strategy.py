"""The strategies for an upstream slower than the target, on fake clocks: live, smooth, replay."""

from __future__ import annotations

import pytest

from retimer.timing.pacer import StreamPacer
from retimer.timing.strategy import SmoothPlan, Strategy, parse_strategy
from tests.support.pacer_fakes import FixedTiming, LineAdapter, text_of

TARGET_TPS = 50.0
GAP = 1 / TARGET_TPS


def word_lines(n: int) -> list[bytes]:
    """n one-token text events (" dog", " cat", ...: one token each for the splitter)."""
    return [b"T: cat\n" if i % 2 else b"T: dog\n" for i in range(n)]


def run(strategy: Strategy, arrivals: list[float], *, expected: int | None = None,
        ttft: float = 0.3) -> tuple[StreamPacer, list[tuple[float, float]]]:
    """Feed one token per arrival time; return the pacer and (arrival, due) per token."""
    pacer = StreamPacer(LineAdapter(), FixedTiming(ttft, GAP), start=0.0, strategy=strategy,
                        target_tps=TARGET_TPS, expected_tokens=expected)
    lines = word_lines(len(arrivals))
    for line, t in zip(lines, arrivals):
        pacer.feed(line, now=t)
    pacer.finish(now=arrivals[-1])
    out = pacer.pop_all()
    assert text_of(b"".join(e.data for e in out)) == "".join(line[2:-1].decode() for line in lines)
    dues = [e.due for e in out if e.tokens]
    assert len(dues) == len(arrivals)
    return pacer, list(zip(arrivals, dues))


def steady(n: int, tps: float, first: float = 0.5) -> list[float]:
    return [first + i / tps for i in range(n)]


def test_parse_strategy() -> None:
    assert parse_strategy(" Smooth ") is Strategy.SMOOTH
    with pytest.raises(ValueError, match="--strategy: expected one of live, smooth, replay"):
        parse_strategy("fast")


def test_live_is_upstream_bound_when_the_upstream_is_slow() -> None:
    pacer, pairs = run(Strategy.LIVE, steady(100, 20))
    assert all(due >= arrival for arrival, due in pairs)
    assert pacer.scheduler.bound_s > 1.0  # tokens kept waiting for the upstream
    gaps = [b[1] - a[1] for a, b in zip(pairs, pairs[1:])]
    assert max(gaps) == pytest.approx(1 / 20)  # the client sees the upstream's pace


def test_smooth_plays_at_the_profile_rate_without_stalls() -> None:
    arrivals = steady(100, 20)
    pacer, pairs = run(Strategy.SMOOTH, arrivals, expected=100)
    gaps = [b[1] - a[1] for a, b in zip(pairs, pairs[1:])]
    assert gaps == pytest.approx([GAP] * 99, abs=1e-9)  # no stall after the start
    assert all(due >= arrival - 1e-9 for arrival, due in pairs)
    # the start moved back by about what the slower upstream needs, no more
    first_due = pairs[0][1]
    assert first_due == pytest.approx(arrivals[-1] - 99 * GAP, abs=0.01)
    assert pacer.smooth is not None and pacer.smooth.delay_s > 2.0


def test_smooth_falls_back_to_live_when_the_upstream_slows_further() -> None:
    arrivals = steady(40, 20) + [steady(40, 20)[-1] + 0.2 * (i + 1) for i in range(60)]
    pacer, pairs = run(Strategy.SMOOTH, arrivals, expected=100)
    assert all(due >= arrival - 1e-9 for arrival, due in pairs)
    assert pacer.scheduler.bound_s > 0  # the prediction failed: some tokens waited


def test_smooth_does_not_delay_a_fast_upstream() -> None:
    arrivals = steady(100, 500, first=0.05)
    _, smooth = run(Strategy.SMOOTH, arrivals, expected=100)
    _, live = run(Strategy.LIVE, arrivals, expected=100)
    assert [d for _, d in smooth] == pytest.approx([d for _, d in live])


def test_replay_waits_for_the_end_then_plays_exactly() -> None:
    arrivals = steady(60, 20)
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.3, GAP), start=0.0, strategy=Strategy.REPLAY,
                        target_tps=TARGET_TPS)
    for line, t in zip(word_lines(60), arrivals):
        pacer.feed(line, now=t)
        assert pacer.next_due() is None  # nothing is released before the upstream ends
    pacer.finish(now=arrivals[-1] + 0.1)
    dues = [e.due for e in pacer.pop_all() if e.tokens]
    assert dues[0] == pytest.approx(arrivals[-1] + 0.1)
    assert [b - a for a, b in zip(dues, dues[1:])] == pytest.approx([GAP] * 59)


def test_replay_of_a_fast_upstream_keeps_the_profile_ttft() -> None:
    arrivals = steady(30, 1000, first=0.01)
    pacer = StreamPacer(LineAdapter(), FixedTiming(0.3, GAP), start=0.0, strategy=Strategy.REPLAY)
    for line, t in zip(word_lines(30), arrivals):
        pacer.feed(line, now=t)
    pacer.finish(now=arrivals[-1])
    dues = [e.due for e in pacer.pop_all() if e.tokens]
    assert dues[0] == pytest.approx(0.3)


def test_non_token_events_keep_their_place_under_every_strategy() -> None:
    body = b"head\nT: one two\nmid\nT: three\nend\n"
    for strategy in Strategy:
        pacer = StreamPacer(LineAdapter(), FixedTiming(0.2, GAP), start=0.0, strategy=strategy,
                            target_tps=TARGET_TPS)
        pacer.feed(body, now=0.05)
        pacer.finish(now=0.06)
        out = b"".join(e.data for e in pacer.pop_all())
        assert [line for line in out.split(b"\n") if not line.startswith(b"T:")] == [b"head", b"mid", b"end", b""]
        assert out.index(b"mid") > out.index(b"two") and text_of(out) == text_of(body)


def test_smooth_plan_uses_the_hint_capped() -> None:
    assert SmoothPlan(50, None).expected == 600
    assert SmoothPlan(50, 100).expected == 100
    assert SmoothPlan(50, 10**6).expected == 4000
