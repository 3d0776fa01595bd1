"""bench.core measures what it says: every stream played out, one event per emission, to its end."""

from __future__ import annotations

import pytest

from bench.core import TOKENS, measure


def test_the_core_benchmark_plays_every_stream_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from retimer.timing.playout import Playout

    emitted: list[int] = []
    step = Playout.step

    def counted(self: Playout, now: float, armed: float | None):  # type: ignore[no-untyped-def]
        out = step(self, now, armed)
        emitted.append(out.data.count(b"data: "))
        return out

    monkeypatch.setattr(Playout, "step", counted)
    figures = measure(repeat=1, streams=2)
    assert 0 < figures["best_us"] <= figures["median_us"]
    events = [n for n in emitted if n]
    assert sum(events) >= 2 * TOKENS
    assert sum(n > 1 for n in events) <= 2 * 2, events  # one event each but a stream's first or last
