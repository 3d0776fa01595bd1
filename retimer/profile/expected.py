"""The mean wait a profile gives one call: the expectation of what `Profile.stream_timing` draws.

Why analytic: `retimer whatif` asks, for every call of a recorded session and every profile,
how long the client would have waited on average, and a session has thousands of calls. Each
piece of the per-stream model (retimer.timing.model) has an exact mean or one taken on a fine
grid of quantile levels, so the answer is deterministic and fast, and tests check it against
Monte-Carlo runs of real `StreamTiming` draws driven as the pacer drives them.

A call's wait, from the request reaching the proxy to its last token, is the sum of:
- the first-token wait: the TTFT draw moved by prefill for the call's prompt and cached
  tokens (never below the draw's non-prefill part: the one non-linear step, whose mean is
  E[D] + delta + share * E[(t - D)+], the last term on a quantile grid), plus hidden thinking
  when the profile's thinking is on and the stream did not show its own reasoning (the pacer
  then skips it); hidden tokens H have exact E[H] and E[H^2] (the squared shape is the same
  piecewise log-linear shape), which the context slowdown needs;
- decoding: the tokens after the first network event (the first event's tokens leave with
  the first token, `Scheduler`), each gap's mean slowed by the context (`GapSampler`'s
  slowdown, summed by `decode_seconds`), averaged over the size of the first event; for
  speculative profiles one gap per step, the steps counted by a renewal recursion;
- stalls: a Bernoulli trial per visible token (`StallSampler`), times the mean duration.

A whole (non-streaming) response is held until TTFT plus N - 1 gaps drawn after the pacer
already drew its own (retimer.proxy.addon `response`): mirrored here, offset included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retimer.profile.model import Profile, ProfileError
from retimer.timing.model import EARLY_TOKENS, MAX_PREFILL_SHARE, chunk_distribution
from retimer.timing.quantiles import QuantileShape

__all__ = ["Calls", "ExpectedWaits", "expected_waits"]

GRID = 4096  # quantile levels for E[(t - D)+]: the integrand is bounded by t, so this is exact enough


@dataclass(frozen=True, slots=True)
class Calls:
    """The calls to time, as arrays of equal length (one entry per call)."""

    output_tokens: np.ndarray  # visible tokens the client got (every channel), > 0
    prompt_tokens: np.ndarray  # the request's estimate; NaN when unknown (a reference prompt)
    cached_tokens: np.ndarray  # prompt tokens the prompt cache held
    shows_reasoning: np.ndarray  # bool: the stream carried its own reasoning tokens
    whole: np.ndarray  # bool: a non-streaming response, held whole

    @classmethod
    def of(cls, output_tokens: list[int], prompt_tokens: list[float | None] | None = None,
           cached_tokens: list[int] | None = None, shows_reasoning: list[bool] | None = None,
           whole: list[bool] | None = None) -> Calls:
        n = len(output_tokens)
        prompts = prompt_tokens if prompt_tokens is not None else [None] * n
        return cls(
            np.asarray(output_tokens, dtype=np.float64),
            np.asarray([np.nan if v is None else float(v) for v in prompts], dtype=np.float64),
            np.asarray(cached_tokens if cached_tokens is not None else [0] * n, dtype=np.float64),
            np.asarray(shows_reasoning if shows_reasoning is not None else [False] * n, dtype=bool),
            np.asarray(whole if whole is not None else [False] * n, dtype=bool),
        )


@dataclass(frozen=True, slots=True)
class ExpectedWaits:
    """Mean seconds per call, by part; `total` is what the client waits in all."""

    first_token: np.ndarray  # prefill-adjusted TTFT (thinking excluded)
    hidden: np.ndarray  # hidden thinking before the first visible token
    decode: np.ndarray  # first visible token to the last (stalls excluded)
    stalls: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.first_token + self.hidden + self.decode + self.stalls


def _shortfall(shape: QuantileShape, t: np.ndarray) -> np.ndarray:
    """E[(t - D)+] for D drawn from `shape`, per t (a midpoint grid of quantile levels)."""
    if shape.is_constant:
        return np.maximum(t - shape.p50, 0.0)
    q = shape.ppf((np.arange(GRID) + 0.5) / GRID)
    below = np.searchsorted(q, t)
    sums = np.concatenate([[0.0], np.cumsum(q)])
    return (below * t - sums[below]) / GRID


def _square_mean(shape: QuantileShape) -> float:
    """E[X^2]: squaring a piecewise log-linear quantile function doubles its slopes."""
    return QuantileShape(shape.p50 ** 2, shape.p90 ** 2, shape.p99 ** 2).mean()


def _steps_covering(chunks: dict[int, float], top: int) -> np.ndarray:
    """E[steps started to cover m tokens], m = 0..top: r(m) = 1 + sum_c p_c r(m - c)."""
    r = np.zeros(top + 1)
    sizes = np.array(list(chunks), dtype=np.int64)
    probs = np.array(list(chunks.values()), dtype=np.float64)
    probs = probs / probs.sum()
    for m in range(1, top + 1):
        r[m] = 1.0 + float(np.dot(probs, r[np.maximum(m - sizes, 0)]))
    return r


def expected_waits(p: Profile, calls: Calls) -> ExpectedWaits:
    """The mean wait `p` gives each call: what `p.stream_timing` draws, driven as the pacer
    drives it (see the module docstring)."""
    if p.passthrough or p.ttft is None or p.tps is None:
        raise ProfileError(f"profile '{p.name}' is passthrough: it has no timing to compare")
    n = calls.output_tokens
    k = len(n)
    if k == 0:
        return ExpectedWaits(*(np.zeros(0) for _ in range(4)))
    known = np.isfinite(calls.prompt_tokens)
    ref = p.prefill.reference_tokens if p.prefill is not None else 0
    context_start = np.where(known, calls.prompt_tokens, float(ref))

    # the first token: the TTFT draw D, moved by prefill
    draw = p.ttft.jittered(p.jitter)
    first = np.full(k, draw.mean())
    if p.prefill is not None:
        prompt = np.where(known, calls.prompt_tokens, float(ref))
        cached = np.minimum(calls.cached_tokens, prompt)
        discount = p.prompt_cache.discount if p.prompt_cache is not None else 0.0
        delta = (prompt - cached * discount - p.prefill.reference_tokens) / p.prefill.tps
        share = min(p.prefill.reference_s / p.ttft.p50, MAX_PREFILL_SHARE)
        # E[max(D + delta, D (1 - share))] = E[D] + delta + share * E[(t - D)+], t = -delta/share
        if share > 0:
            floor = share * _shortfall(draw, np.maximum(-delta / share, 0.0))
        else:
            floor = np.maximum(-delta, 0.0)
        first = np.where(known, first + delta + floor, first)

    # hidden thinking, at the profile's own rate, slowed by the prompt's context
    mean_h = np.zeros(k)
    hidden = np.zeros(k)
    if p.reasoning is not None:
        tokens = p.reasoning.hidden_tokens.jittered(p.jitter)
        e1 = float(round(tokens.p50)) if tokens.is_constant else tokens.mean()
        e2 = e1 * e1 if tokens.is_constant else _square_mean(tokens)
        shown = calls.shows_reasoning
        mean_h = np.where(shown, 0.0, e1)
        hidden_tps = p.thinking_tps or p.tps
        seconds = np.full(k, e1 / hidden_tps)
        if p.context is not None:
            half = p.context.half_rate_at
            seconds = seconds + (e1 * context_start + e2 / 2 - e1 / 2) / (hidden_tps * half)
        hidden = np.where(shown, 0.0, seconds)

    # decoding: G gaps from gap index `start`, averaged over the first event's size
    steps = p.speculative is not None and p.jitter > 0
    chunking = dict(chunk_distribution(p.chunking, p.speculative)) if p.jitter > 0 else {1: 1.0}
    total_p = sum(chunking.values())
    offset = context_start + mean_h + 1.0  # the slowdown's offset (StreamTiming, stream_timing)
    decode = np.zeros(k)
    stalls = np.zeros(k)
    mean_chunk = sum(c * w for c, w in chunking.items()) / total_p
    renewals = _steps_covering(chunking, int(n.max())) if steps else None
    stall_p = min(1.0, p.stalls.per_1000_tokens / 1000.0) if p.stalls is not None else 0.0
    stall_mean = p.stalls.duration.jittered(p.jitter).mean() if p.stalls and p.jitter > 0 else 0.0
    for size, weight in chunking.items():
        w = weight / total_p
        # streams: the first event's tokens leave with the first token; whole responses: a
        # gap per further token, drawn after the pacer's own N - 1 (held, retimer.proxy.addon)
        gaps = np.where(calls.whole, np.maximum(n - 1, 0), np.maximum(n - size, 0))
        start = np.where(calls.whole, np.maximum(n - 1, 0), 0.0)
        if steps:
            assert renewals is not None
            count = renewals[gaps.astype(np.int64)]
            factor = 1.0 if p.context is None else \
                1.0 + (context_start + mean_h + start + (gaps + 1) / 2) / p.context.half_rate_at
            part = count * mean_chunk / p.tps * factor
        else:
            part = gaps / p.tps
            if p.context is not None:
                part = part + (gaps * (offset + start) + gaps * (gaps - 1) / 2) / (
                    p.tps * p.context.half_rate_at)
        decode += w * part
        if stall_p > 0 and stall_mean > 0:
            stalls += w * stall_p * stall_mean * _stall_positions(p, start, gaps)
    return ExpectedWaits(first, hidden, decode, stalls)


def _stall_positions(p: Profile, start: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """Visible-token positions start+1 .. start+gaps on which a stall may fall."""
    assert p.stalls is not None
    lo, hi = start + 1, start + gaps
    if p.stalls.where == "early":
        hi = np.minimum(hi, EARLY_TOKENS)
    elif p.stalls.where == "late":
        lo = np.maximum(lo, EARLY_TOKENS + 1)
    return np.maximum(hi - lo + 1, 0)
