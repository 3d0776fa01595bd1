"""The timing model beyond TTFT and rate: prefill, prompt cache, context, reasoning, stalls.

Why each piece (docs/profiles.md, "The timing model"; each profile's `source` names the
measurement or publication behind its numbers): TTFT grows with the prompt (prefill) and
shrinks when a prefix is cached; decode slows as the context grows; reasoning models think in
hidden tokens before the first visible one; streams sometimes stall; speculative decoding
sends the tokens accepted in one step together. A profile holds these as frozen specs; one
`StreamTiming` per stream draws from them with its own child generators, so runs reproduce.

TTFT decomposition (with `prefill`): a draw d from the TTFT quantiles is the TTFT of a prompt
of `reference_tokens`, of which ref/prefill_tps is prefill. Another prompt moves it by
(effective_tokens - ref) / prefill_tps, where cached tokens count (1 - discount). It never
falls below the draw's non-prefill part, d * (1 - share), share = (ref / prefill_tps) / p50:
a median draw holds exactly the reference prefill, a faster draw proportionally less. Hidden
reasoning time (a visible choice: `--thinking`) is then added: its tokens at the profile's own
decode rate (not a --tps override, which re-paces only what the client sees), context slowdown
included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from retimer.timing.distributions import ChunkSampler, GapSampler
from retimer.timing.quantiles import QuantileShape, sample_ttft

__all__ = ["EARLY_TOKENS", "MAX_PREFILL_SHARE", "ContextSpec", "PrefillSpec", "PromptCacheSpec",
           "ReasoningSpec", "SpeculativeSpec", "StallSampler", "StallSpec", "StreamTiming",
           "decode_seconds", "speculative_chunks"]

EARLY_TOKENS = 256
"""`stalls.where`: `early` stalls fall among the first this many visible tokens, `late` after."""

MAX_PREFILL_SHARE = 0.9
"""At most this share of a TTFT draw is taken as prefill. YAML profiles must keep the reference
prefill below ttft.p50 anyway; this guards profiles built in code."""

Where = Literal["any", "early", "late"]


@dataclass(frozen=True, slots=True)
class PrefillSpec:
    """Prompt processing: tokens/s, and the prompt size the TTFT quantiles stand for."""

    tps: float
    reference_tokens: int = 1000

    @property
    def reference_s(self) -> float:
        return self.reference_tokens / self.tps


@dataclass(frozen=True, slots=True)
class PromptCacheSpec:
    """A repeated prefix of at least min_tokens, seen within ttl, costs (1 - discount)."""

    discount: float
    min_tokens: int = 1024
    ttl: float = 300.0  # seconds since the prefix was last used


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """Decode rate tps / (1 + n / half_rate_at), n = prompt + generated tokens."""

    half_rate_at: float


@dataclass(frozen=True, slots=True)
class ReasoningSpec:
    """Hidden thinking tokens per stream (quantiles), decoded before the first visible token."""

    hidden_tokens: QuantileShape


@dataclass(frozen=True, slots=True)
class StallSpec:
    """Rare long pauses: a rate per 1000 visible tokens, their durations, where they fall."""

    per_1000_tokens: float
    duration: QuantileShape  # seconds
    where: Where = "any"


@dataclass(frozen=True, slots=True)
class SpeculativeSpec:
    """Speculative decoding: each step drafts k tokens, each accepted with probability a."""

    draft_tokens: int
    acceptance: float

    def chunks(self) -> dict[int, float]:
        return speculative_chunks(self.draft_tokens, self.acceptance)


def speculative_chunks(draft_tokens: int, acceptance: float) -> dict[int, float]:
    """Tokens per step: the accepted run of k drafts (i.i.d. acceptance a) plus one.

    P(j + 1) = a^j (1 - a) for j < k, P(k + 1) = a^k; the mean is (1 - a^(k+1)) / (1 - a)
    (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding").
    """
    k, a = int(draft_tokens), float(acceptance)
    out = {j + 1: a**j * (1.0 - a) for j in range(k)}
    out[k + 1] = a**k
    return {size: p for size, p in out.items() if p > 0.0}


class StallSampler:
    """Which visible tokens stall, and for how long: a Bernoulli trial per token, drawn as
    geometric distances so a long stream costs one draw per stall, not one per token."""

    __slots__ = ("_spec", "_rng", "_p", "_next", "_jitter")

    def __init__(self, spec: StallSpec, rng: np.random.Generator, jitter: float = 1.0) -> None:
        """jitter 0 (a metronome) has no stalls; otherwise it scales the durations' spread."""
        self._spec = spec
        self._rng = rng
        self._jitter = jitter
        self._p = min(1.0, spec.per_1000_tokens / 1000.0)
        start = EARLY_TOKENS if spec.where == "late" else 0
        self._next: float = start + int(rng.geometric(self._p)) if jitter > 0 else math.inf

    def extra(self, position: int) -> float:
        """Seconds of stall before visible token `position` (1, 2, ...; almost always 0)."""
        if position < self._next:
            return 0.0
        if self._spec.where == "early" and position > EARLY_TOKENS:
            self._next = math.inf
            return 0.0
        self._next = position + int(self._rng.geometric(self._p))
        return sample_ttft(self._spec.duration, self._rng, self._jitter)


class StreamTiming:
    """The timing of one stream: TTFT fixed at the start, then a gap and chunk size per call.

    A `retimer.timing.scheduler.TokenClock`: `ttft`, `gap()` per token after the first
    network event, `chunk_size()` at the start of each network event. Speculative profiles
    give a step's whole wait to its first token's gap and 0 to the rest, so events keep a
    steady step cadence whatever their size.
    """

    def __init__(
        self,
        *,
        ttft_draw: float,
        gaps: GapSampler,
        chunks: ChunkSampler,
        tps: float,
        prompt_tokens: int | None = None,
        context_start: int = 0,
        cached_tokens: int = 0,
        prefill: PrefillSpec | None = None,
        prefill_share: float = 0.0,
        cache_discount: float = 0.0,
        context: ContextSpec | None = None,
        hidden_tokens: int = 0,
        hidden_tps: float | None = None,
        stalls: StallSampler | None = None,
        steps: bool = False,
    ) -> None:
        self.ttft_draw = ttft_draw
        self.prompt_tokens = prompt_tokens  # the request's estimate; None if unknown
        self.context_start = context_start  # tokens in the context before any output
        self.cached_tokens = cached_tokens
        self._gaps, self._chunks, self._stalls = gaps, chunks, stalls
        self._tps, self._context, self._steps = tps, context, steps
        # hidden thinking runs at the profile's own rate: --tps re-paces the visible tokens only
        self._hidden_tps = hidden_tps if hidden_tps is not None else tps
        self._step_due = False
        self._step_left = 0  # tokens of the current speculative step not yet given a gap
        self._position = 0  # gap() calls so far: visible tokens after the first
        self.stalls = 0
        self.stall_s = 0.0
        # prefill: move the draw by the prompt's effective size against the reference
        self.prefill_s = 0.0
        base = ttft_draw
        if prefill is not None and prompt_tokens is not None:
            cached = min(cached_tokens, prompt_tokens)
            effective = prompt_tokens - cached * cache_discount
            floor = ttft_draw * (1.0 - prefill_share)
            base = max(ttft_draw + (effective - prefill.reference_tokens) / prefill.tps, floor)
            self.prefill_s = base - ttft_draw
        self._base_ttft = base
        self.hidden_tokens = hidden_tokens
        self.hidden_s = self.decode_s(hidden_tokens, self.context_start, self._hidden_tps)
        self.ttft = base + self.hidden_s

    def rate_at(self, context_tokens: float) -> float:
        """Mean decode rate (tokens/s) with `context_tokens` in the context."""
        if self._context is None:
            return self._tps
        return self._tps / (1.0 + context_tokens / self._context.half_rate_at)

    def decode_s(self, n: int, context_tokens: float, tps: float | None = None) -> float:
        """Mean seconds to decode n tokens starting at `context_tokens` (no stalls), at `tps`
        (default: the visible decode rate)."""
        if n <= 0:
            return 0.0
        return float(decode_seconds(n, context_tokens, self._tps if tps is None else tps,
                                    self._context))

    def expected_decode_s(self, n_tokens: int) -> float:
        """Mean seconds from the first visible token to the n-th (for planning; no stalls)."""
        return self.decode_s(n_tokens - 1, self.context_start + self.hidden_tokens + 1)

    def skip_hidden_reasoning(self) -> None:
        """The stream shows its own reasoning (paced token by token): add no hidden thinking.

        Call before the first token is scheduled; TTFT drops back to the prefill-adjusted draw,
        and the context the gaps slow with no longer holds the hidden tokens.
        """
        if self._gaps.slowdown is not None:
            offset, half = self._gaps.slowdown
            self._gaps.slowdown = (offset - self.hidden_tokens, half)
        self.hidden_tokens = 0
        self.hidden_s = 0.0
        self.ttft = self._base_ttft

    def gap(self) -> float:
        """Seconds from one token to the next."""
        self._position += 1
        if not self._steps:
            g = self._gaps.next()
        else:
            if self._step_left <= 0:  # a caller that never asks chunk_size() still gets steps
                self.chunk_size()
            self._step_left -= 1
            g = 0.0
            if self._step_due:
                self._step_due = False
                g = self._gaps.next() * self._context_factor()
        if self._stalls is not None and (s := self._stalls.extra(self._position)) > 0.0:
            self.stalls += 1
            self.stall_s += s
            g += s
        return g

    def _context_factor(self) -> float:
        if self._context is None:
            return 1.0
        n = self.context_start + self.hidden_tokens + self._position
        return 1.0 + n / self._context.half_rate_at

    def chunk_size(self) -> int:
        """Tokens in the next network event (for speculative profiles: the next step)."""
        n = self._chunks.next()
        self._step_due, self._step_left = True, n
        return n

    def summary(self) -> dict[str, Any]:
        """What shaped this stream's timing, for its record (milliseconds, tokens)."""
        return {
            "ttft_draw_ms": round(self.ttft_draw * 1000, 3),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prefill_ms": round(self.prefill_s * 1000, 3),
            "hidden_reasoning_tokens": self.hidden_tokens,
            "hidden_reasoning_ms": round(self.hidden_s * 1000, 3),
            "stalls": self.stalls,
            "stall_ms": round(self.stall_s * 1000, 3),
        }


def decode_seconds(n: Any, context_tokens: float, tps: float,
                   context: ContextSpec | None) -> Any:
    """Mean seconds to decode n tokens (a number or a numpy array) from `context_tokens` at
    `tps`, with the context slowdown: one formula for streams and for what the banner says."""
    if context is None:
        return n / tps
    return n / tps * (1.0 + (context_tokens + (n - 1) / 2.0) / context.half_rate_at)


def chunk_distribution(
    chunking: tuple[tuple[int, float], ...], speculative: SpeculativeSpec | None
) -> Mapping[int, float]:
    """Tokens per event: the speculative step sizes when set, else the chunking table."""
    return speculative.chunks() if speculative is not None else dict(chunking)
