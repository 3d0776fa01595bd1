"""A new stream's pacer, drawn from a profile: the one place a profile meets a stream.

The shell knows which profile a flow plays, its stream index and its request's prompt; this
draws the stream's timing (seeded by the run's seed and the index, so a run can be replayed),
lets the prompt drive prefill, the prompt cache, context slowdown and the reasoning budget,
and builds the `StreamPacer`. A passthrough profile adds no time, but its record still says
the prompt's size and what a usual provider cache would hold of it (for `retimer whatif`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from retimer.profile.model import Profile
from retimer.timing.model import PromptCacheSpec
from retimer.timing.pacer import StreamPacer
from retimer.timing.scheduler import NoTiming, TokenClock
from retimer.timing.strategy import Strategy
from retimer.wire.encoding import Decoder
from retimer.wire.prompt import PromptCache, PromptInfo
from retimer.wire.protocols.base import Adapter

__all__ = ["NewStream", "new_stream"]


class NewStream(NamedTuple):
    """The pacer, and for a passthrough stream with a known prompt (its tokens, the tokens a
    usual provider cache would hold) for its record; None otherwise."""

    pacer: StreamPacer
    prompt_seen: tuple[int, int] | None


def new_stream(
    profile: Profile, adapter: Adapter, start: float, *, seed: int, index: int,
    prompt: PromptInfo | None, cache: PromptCache, now: float, decoder: Decoder | None = None,
    strategy: Strategy = Strategy.LIVE,
) -> NewStream:
    """Stream `index` of a run seeded `seed`, begun at `start` (monotonic seconds); `prompt`:
    its request's prompt estimate (None: not an HTTP request), `cache`: the run's prompt cache
    as of `now`. Its max-tokens hint guides the `smooth` strategy."""
    known = prompt if prompt is not None and prompt.known else None
    timing: TokenClock = NoTiming()
    seen = None
    if profile.passthrough:
        if known is not None:
            spec = PromptCacheSpec(discount=0.0)
            seen = (known.tokens, cache.lookup(known, now, spec.min_tokens, spec.ttl))
    else:
        timing = profile.stream_timing(np.random.default_rng([seed, index]), prompt=known, cache=cache, now=now)
    pacer = StreamPacer(
        adapter, timing, start, passthrough=profile.passthrough, decoder=decoder,
        strategy=strategy, target_tps=profile.tps if profile.tps is not None else 0.0,
        expected_tokens=prompt.max_output_tokens if prompt is not None else None,
    )
    return NewStream(pacer, seen)
