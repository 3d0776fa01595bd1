"""Real draws of the timing model for `retimer whatif`'s tests: a call's wait as the proxy would
give it, from the `StreamTiming` a profile makes, driven as the pacer drives it."""

from __future__ import annotations

from typing import Any

import numpy as np

from retimer.profile.expected import Calls, expected_waits
from retimer.profile.model import Profile
from retimer.wire.prompt import PromptCache, PromptInfo


class FixedCache(PromptCache):
    """The prompt cache as a record saw it: this many cached tokens, whatever the prompt."""

    def __init__(self, cached: int) -> None:
        super().__init__()
        self.cached = cached

    def lookup(self, prompt: Any, now: float, min_tokens: int, ttl: float) -> int:
        return self.cached


def drawn_wait(p: Profile, rng: np.random.Generator, tokens: int, prompt: int | None,
               cached: int, shows_reasoning: bool = False, whole: bool = False) -> float:
    """One real draw: the StreamTiming the proxy makes, asked for TTFT, chunk sizes and gaps in
    the order the pacer asks (the first event's tokens leave with the first token); a whole
    response is held for TTFT plus a gap per further token (retimer.proxy.addon)."""
    info = PromptInfo(prompt, "chat") if prompt is not None else None
    t = p.stream_timing(rng, prompt=info, cache=FixedCache(cached))
    if shows_reasoning:
        t.skip_hidden_reasoning()
    wait, left, first = t.ttft, t.chunk_size(), True
    if whole:  # one unsplittable event: the pacer schedules it (a gap per further token)...
        for _ in range(tokens - 1):
            t.gap()
        t.chunk_size()
        # ...and the hold then waits TTFT plus gaps drawn afresh
        return t.ttft + sum(t.gap() for _ in range(tokens - 1))
    for i in range(tokens):
        if i > 0 and not first:
            wait += t.gap()
        left -= 1
        if left <= 0:
            first, left = False, t.chunk_size()
    return wait


def monte_carlo(p: Profile, calls: list[tuple], draws: int, seed: int) -> np.ndarray:
    return np.array([np.mean([drawn_wait(p, np.random.default_rng([seed, j, i]), *c)
                              for i in range(draws)]) for j, c in enumerate(calls)])


def expected(p: Profile, calls: list[tuple]) -> np.ndarray:
    cols = list(zip(*calls, strict=True))
    return expected_waits(p, Calls.of(*[list(c) for c in cols])).total


def draws_for(p: Profile, error: float = 0.025) -> int:
    """Enough draws that the mean of a TTFT-bound call is known to about `error` (one standard
    error): a heavy-tailed profile (claude-haiku's p99 is 7.6x its median) needs thousands."""
    assert p.ttft is not None
    q = p.ttft.jittered(p.jitter).ppf((np.arange(20_000) + 0.5) / 20_000)
    return int(np.clip((q.std() / q.mean() / error) ** 2, 300, 4000))
