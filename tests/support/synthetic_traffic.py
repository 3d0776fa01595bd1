"""Synthetic upstream traffic drawn from a profile, as records `retimer fit` reads.

Each stream is what retimer's own pacer would make of a profile's draw (retimer/timing/pacer.py): the
first event carries a chunk_size() of tokens at the drawn TTFT; every later event draws a
chunk size and leaves when its last token is due, one gap() per token; the last event is cut
short by the stream's end. Times are encoded with retimer.timing.metrics.encode_side, as in real
records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from retimer.profile.model import Profile
from retimer.timing.metrics import TRACE_UNIT_MS, encode_side
from retimer.wire.prompt import PromptInfo


def stream_events(profile: Profile, rng: np.random.Generator, tokens: int,
                  prompt: PromptInfo | None = None,
                  ) -> tuple[list[float], list[int], list[int], Any]:
    """(event times in seconds from the request start, tokens per event, the chunk sizes
    drawn (the last one before the end cut it), the draw)."""
    timing = profile.stream_timing(rng, prompt=prompt)
    draws = [timing.chunk_size()]
    first = min(draws[0], tokens)
    times, sizes = [timing.ttft], [first]
    t, left = timing.ttft, tokens - first
    while left > 0:
        draws.append(timing.chunk_size())
        k = min(draws[-1], left)
        for _ in range(k):
            t += timing.gap()
        times.append(t)
        sizes.append(k)
        left -= k
    return times, sizes, draws, timing


def upstream_record(times: list[float], sizes: list[int], **fields: Any) -> dict[str, Any]:
    """A complete streaming record whose upstream trace holds these events (seconds, tokens)."""
    return {
        "id": "s", "time": "2026-11-30T10:00:00+00:00", "outcome": "complete",
        "protocol": "openai-chat", "url": "https://api.example.test/v1/chat/completions",
        "status": 200, "cache": None, "fallback": None, "model": {},
        "trace": {"unit_ms": TRACE_UNIT_MS, "upstream": encode_side(times, sizes, 0.0)},
        **fields,
    }


def records(profile: Profile, streams: int, tokens: tuple[int, int], seed: int = 0,
            prompts: tuple[int, int] | None = None, protocol: str = "openai-chat",
            ) -> list[dict[str, Any]]:
    """`streams` records with token counts uniform in `tokens`, and prompt sizes uniform in
    `prompts` when given (they then drive prefill, as a request body's estimate would)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(streams):
        n = int(rng.integers(tokens[0], tokens[1] + 1))
        prompt = None
        if prompts is not None:
            size = int(rng.integers(prompts[0], prompts[1] + 1))
            prompt = PromptInfo(tokens=size, api="chat")
        rng_i = np.random.default_rng([seed, i])
        times, sizes, draws, timing = stream_events(profile, rng_i, n, prompt)
        out.append(upstream_record(
            times, sizes, id=f"s{i}", protocol=protocol,
            model={"prompt_tokens": prompt.tokens if prompt else None,
                   "stalls": timing.stalls, "stall_ms": round(timing.stall_s * 1000, 3)},
            # the truth, for tests: the drawn TTFT and every chunk size drawn
            synthetic={"ttft_ms": timing.ttft * 1000, "chunk_draws": draws},
        ))
    return out
