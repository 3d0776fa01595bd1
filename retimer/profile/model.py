"""Speed profiles: what a re-timed stream should feel like, and the overrides that change one.

Why files and strict checks: profiles carry numbers that users compare and cite, so each one
names its source, and a typo (an unknown key, a rate of 0, quantiles out of order) is an
error with one line naming the file and the key, never a silent default (retimer.profile.schema).

The schema (every key, its units and defaults) is in profiles/README.md; a file is read by
retimer.profile.loader and checked by retimer.profile.schema. Defaults: decode.gap {p90: 1.3,
p99: 2.5}; chunking {1: 1.0}; jitter 1. The timing-model keys are retimer.timing.model's specs.

Why thinking is a separate choice: a table row's TTFT is what people quote and compare, so a
profile used as it is waits exactly that; hidden reasoning (`--thinking`) adds its own time,
which every summary (`first_token_median`) states apart. The older `reasoning:
{hidden_tokens: ...}` form keeps its behaviour: thinking on by default, as the level `on`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retimer.profile.schema import DEFAULT_GAP, LEGACY_LEVEL, THINKING_LEVELS
from retimer.profile.units import (
    ProfileError,
    parse_duration,
    parse_rate,
    parse_speed,
    parse_tokens,
    plain,
    show,
)
from retimer.timing.distributions import ChunkSampler, GapSampler
from retimer.timing.model import (
    MAX_PREFILL_SHARE,
    ContextSpec,
    PrefillSpec,
    PromptCacheSpec,
    ReasoningSpec,
    SpeculativeSpec,
    StallSampler,
    StallSpec,
    StreamTiming,
    chunk_distribution,
    decode_seconds,
)
from retimer.timing.quantiles import QuantileShape, sample_ttft
from retimer.wire.prompt import PromptCache, PromptInfo

# ProfileError is the error of every profile operation (retimer.profile.units defines it)
__all__ = ["DEFAULT_PROFILE", "EXPLICIT_SPEED_BASE", "Profile", "ProfileError", "base_profile_name"]

DEFAULT_PROFILE = "cerebras"
"""The profile of a run that names none and sets no speed of its own."""
EXPLICIT_SPEED_BASE = "frontier"
"""The shape (TTFT tails, gap shape, one token per event) that --ttft/--tps take without
--profile, on the command line and in a study alike: a hand-set speed gets a frontier API's
plain delivery, not the multi-token bursts of the cerebras rows, which would show at slow rates."""
OVERRIDE_ORDER = ("ttft", "tps", "jitter", "speed", "thinking")
_MEDIAN_GRID = 801  # quantile levels per component when the medians are computed


def base_profile_name(name: str | None, ttft: object = None, tps: object = None) -> str:
    """The profile a run starts from: `name` if given, else EXPLICIT_SPEED_BASE when --ttft or
    --tps sets the speed, else DEFAULT_PROFILE. One rule for the CLI, the addon and studies."""
    if name is not None and str(name).strip():
        return str(name)
    return EXPLICIT_SPEED_BASE if ttft or tps else DEFAULT_PROFILE


def _seconds_text(v: float) -> str:
    """A duration for an effective profile name: 400ms, 1.5s."""
    return f"{v * 1000:.4g}ms" if v < 1 else f"{v:.4g}s"


def _option(value: object, parse: Callable[[str], float], low_ok: bool = False) -> float:
    """A command-line option value as a float (strings parsed); NaN when unusable."""
    try:
        v = parse(value) if isinstance(value, str) else plain(value)
    except ValueError:  # ProfileError, or float() on garbage
        return math.nan
    return v if math.isfinite(v) and (v > 0 or (low_ok and v == 0)) else math.nan


@dataclass(frozen=True)
class Profile:
    """A target speed: TTFT quantiles (seconds), mean decode rate, gap shape and chunking,
    and the optional timing-model specs (retimer.timing.model) for prompt-dependent effects."""

    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    source: str = ""
    ttft: QuantileShape | None = None
    tps: float | None = None
    gap: tuple[float, float] = DEFAULT_GAP  # p90/p50 and p99/p50 of the inter-token gap
    chunking: tuple[tuple[int, float], ...] = ((1, 1.0),)
    passthrough: bool = False
    jitter: float = 1.0
    path: Path | None = None
    prefill: PrefillSpec | None = None
    prompt_cache: PromptCacheSpec | None = None
    context: ContextSpec | None = None
    reasoning: ReasoningSpec | None = None
    stalls: StallSpec | None = None
    speculative: SpeculativeSpec | None = None
    speed: float = 1.0  # the playback factor already applied (for records); 2 = twice as fast
    # hidden thinking: `reasoning` is the active choice (None = off), named by `thinking`
    thinking_levels: tuple[tuple[str, ReasoningSpec], ...] = ()  # what the file declares
    thinking: str = "off"  # off, a level (low, medium, high, or `on`), or a token count "2000"
    thinking_default: str = "off"  # the file's own choice (an override is a change from it)
    thinking_tps: float | None = None  # the rate hidden tokens decode at; None = tps
    overrides: tuple[tuple[str, str], ...] = ()  # (option, value) as the effective name says

    def __post_init__(self) -> None:
        if not self.passthrough and (self.ttft is None or self.tps is None):
            raise ProfileError(f"profile '{self.name}' needs ttft and tps unless passthrough")
        if self.reasoning is None and self.thinking != "off":
            object.__setattr__(self, "thinking", "off")
        elif self.reasoning is not None and self.thinking == "off":
            # built in code with `reasoning=` only: the older meaning, thinking on by default
            object.__setattr__(self, "thinking", LEGACY_LEVEL)
            object.__setattr__(self, "thinking_default", LEGACY_LEVEL)
            if not self.thinking_levels:
                object.__setattr__(self, "thinking_levels", ((LEGACY_LEVEL, self.reasoning),))

    @property
    def effective_name(self) -> str:
        """What ran: the name plus every override, e.g. `openai-gpt-5 tps=10 speed=2x
        thinking=high`, so records and reports never file changed timing under the base name."""
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.overrides)])

    def _thinking_choice(self, value: object) -> tuple[str, ReasoningSpec | None]:
        """--thinking: off, a declared level, or a number of hidden tokens (exactly that many)."""
        if value is False:
            value = "off"
        elif value is True:
            value = LEGACY_LEVEL
        key = str(value).strip().lower()
        if key in ("off", "none", "0"):
            return "off", None
        levels = dict(self.thinking_levels)
        if key in levels:
            return key, levels[key]
        if key in (LEGACY_LEVEL, *THINKING_LEVELS):
            have = ", ".join(["off", *levels])
            raise ProfileError(f"--thinking {key}: profile '{self.name}' has no such level "
                               f"(it has: {have}); or give hidden tokens, e.g. --thinking 2000")
        n = _option(value, parse_tokens) if not isinstance(value, bool) else math.nan
        if math.isnan(n) or n != int(n):
            near = difflib.get_close_matches(key, ["off", *THINKING_LEVELS], n=1, cutoff=0.6)
            raise ProfileError(f"--thinking must be off, low, medium, high or a whole number of "
                               f"hidden tokens like 2000 or 2k, got {show(value)}"
                               + (f"; did you mean {near[0]}?" if near else ""))
        tokens = int(n)
        return str(tokens), ReasoningSpec(QuantileShape(tokens, tokens, tokens))

    def with_overrides(
        self,
        ttft: float | str | None = None,
        tps: float | str | None = None,
        jitter: float | str | None = None,
        speed: float | str | None = None,
        thinking: float | str | bool | None = None,
    ) -> Profile:
        """A copy with command-line overrides: ttft in seconds, tps in tokens/s.

        Strings are parsed as on the command line ("400ms", "40tok/s", "0.5x"). --speed plays
        the whole profile faster or slower (2 = twice as fast: TTFT, prefill time, hidden
        reasoning and stalls halve, the decode rates double); it is applied first.

        Explicit numbers mean what they say: --ttft sets the median (p90/p99 scale with it, so
        the provider's tail shape stays) and replaces the prompt-dependent first-token model
        (prefill, prompt cache), so the first token comes at that time whatever the prompt
        (thinking goes off too, unless --thinking is given); --tps sets the mean rate of the
        visible tokens and drops the context slowdown, while hidden thinking keeps the
        profile's own rate (its seconds stay as chosen). --thinking picks the hidden thinking:
        off, a level the profile declares, or a number of hidden tokens. --jitter scales every
        spread (0 = constant timing) and is kept on the profile. Every override is kept in
        `overrides`, for the effective name.
        """
        given = (ttft, tps, jitter, speed, thinking)
        if self.passthrough and given != (None,) * len(given):
            raise ProfileError(f"--ttft/--tps/--jitter/--speed/--thinking do not apply to "
                               f"passthrough profile '{self.name}'")
        p = self
        named = dict(self.overrides)
        if speed is not None:
            if math.isnan(v := _option(speed, parse_speed)):
                raise ProfileError(f"--speed must be a factor from 0.001x to 1000x like 0.5x, 2 "
                                   f"or 200%, got {show(speed)}")
            p = p._faster(v)
            named["speed"] = f"{p.speed:g}x"
        changes: dict[str, Any] = {}
        if ttft is not None:
            if math.isnan(v := _option(ttft, parse_duration)):
                raise ProfileError(f"--ttft must be a positive duration of at most 1 hour, "
                                   f"got {show(ttft)}")
            assert p.ttft is not None
            changes.update(ttft=p.ttft.scaled(v / p.ttft.p50), prefill=None, prompt_cache=None)
            if thinking is None:
                changes.update(reasoning=None, thinking="off")
            named["ttft"] = _seconds_text(v)
        if tps is not None:
            if math.isnan(v := _option(tps, parse_rate)):
                raise ProfileError(f"--tps must be a positive number of tokens/s (0.01 to "
                                   f"1,000,000), got {show(tps)}")
            changes.update(tps=v, context=None, thinking_tps=p.thinking_tps or p.tps)
            named["tps"] = f"{v:g}"
        if jitter is not None:
            if math.isnan(v := _option(jitter, float, low_ok=True)):
                raise ProfileError(f"--jitter must be a number >= 0, got {show(jitter)}")
            changes["jitter"] = v
            named["jitter"] = f"{v:g}"
        if thinking is not None:
            label, spec = p._thinking_choice(thinking)
            changes.update(reasoning=spec, thinking=label)
        out = dataclasses.replace(p, **changes)
        named.pop("thinking", None)
        if out.thinking != out.thinking_default:
            named["thinking"] = out.thinking
        order = tuple((k, named[k]) for k in OVERRIDE_ORDER if k in named)
        return dataclasses.replace(out, overrides=order)

    def _faster(self, k: float) -> Profile:
        """Every duration divided by k, every rate times k (token counts stay)."""
        assert self.ttft is not None and self.tps is not None
        changes: dict[str, Any] = {"ttft": self.ttft.scaled(1.0 / k), "tps": self.tps * k,
                                   "speed": self.speed * k}
        if self.prefill is not None:
            changes["prefill"] = dataclasses.replace(self.prefill, tps=self.prefill.tps * k)
        if self.stalls is not None:
            changes["stalls"] = dataclasses.replace(
                self.stalls, duration=self.stalls.duration.scaled(1.0 / k))
        if self.thinking_tps is not None:
            changes["thinking_tps"] = self.thinking_tps * k
        return dataclasses.replace(self, **changes)

    # -- what a user waits: the numbers the banner and `retimer profiles` print ----------------
    def thinking_median_s(self, thinking: str | None = None) -> float:
        """Median seconds of hidden thinking with a short prompt: the chosen thinking, or the
        level (or token count) named. 0 when off."""
        p = self if thinking is None else self.with_overrides(thinking=thinking)
        if p.reasoning is None or p.tps is None:
            return 0.0
        n = float(round(p.reasoning.hidden_tokens.p50))  # jitter keeps the median
        return float(decode_seconds(n, p._reference_context(), p.thinking_tps or p.tps,
                                    p.context))

    def first_token_median(self, thinking: str | None = None) -> float:
        """Median seconds to the first visible token for a short prompt (the reference size,
        or any prompt without `prefill`): TTFT plus hidden thinking, as streams draw them.

        The median of a sum is not the sum of medians: both parts are taken on a grid of
        quantile levels and the median of every pairing is returned (deterministic, no RNG).
        """
        p = self if thinking is None else self.with_overrides(thinking=thinking)
        if p.ttft is None or p.tps is None:
            raise ProfileError(f"profile '{p.name}' is passthrough: it has no timing")
        u = (np.arange(_MEDIAN_GRID) + 0.5) / _MEDIAN_GRID
        ttft = p.ttft.jittered(p.jitter).ppf(u)
        if p.reasoning is None:
            return float(np.median(ttft))
        hidden = np.round(p.reasoning.hidden_tokens.jittered(p.jitter).ppf(u))
        hidden_s = decode_seconds(hidden, p._reference_context(), p.thinking_tps or p.tps,
                                  p.context)
        return float(np.median(ttft[:, None] + hidden_s[None, :]))

    def _reference_context(self) -> int:
        """The context a stream without a known prompt starts from (as stream_timing)."""
        return self.prefill.reference_tokens if self.prefill is not None else 0

    def stream_timing(
        self,
        rng: np.random.Generator,
        prompt: PromptInfo | None = None,
        cache: PromptCache | None = None,
        now: float = 0.0,
    ) -> StreamTiming:
        """Fresh samplers for one stream; child generators keep TTFT, gaps, chunks apart.

        `prompt` (from retimer.wire.prompt.estimate_prompt) drives prefill, context and the
        reasoning budget; `cache` with `now` (seconds, any steady clock) looks the prompt up
        in the session's prompt cache and records it. Without a prompt the stream is timed
        as a reference-size prompt: exactly as profiles without these keys always were.
        """
        if self.passthrough or self.ttft is None or self.tps is None:
            raise ProfileError(f"profile '{self.name}' is passthrough: it has no timing")
        r_ttft, r_gap, r_chunk, r_hidden, r_stall = rng.spawn(5)  # first 3 as before
        ttft = sample_ttft(self.ttft, r_ttft, self.jitter)
        prompt_tokens = prompt.tokens if prompt is not None else None
        cached = 0
        if cache is not None and prompt is not None:
            # a profile without a prompt cache (an exact --ttft) is not sped up by one, but its
            # record still says what a usual provider's would hold: `retimer whatif` times
            # the session under profiles that have one from it
            pc = self.prompt_cache or PromptCacheSpec(discount=0.0)
            cached = cache.lookup(prompt, now, pc.min_tokens, pc.ttl)
        hidden = 0
        if self.reasoning is not None:
            hidden = round(sample_ttft(self.reasoning.hidden_tokens, r_hidden, self.jitter))
            if prompt is not None:  # the request's thinking budget and max tokens bound it
                for cap in (prompt.reasoning_budget, prompt.max_output_tokens):
                    if cap is not None:
                        hidden = min(hidden, cap)
        context_start = prompt_tokens if prompt_tokens is not None else (
            self.prefill.reference_tokens if self.prefill is not None else 0)
        # jitter 0 is a metronome: every token its own network event, exactly on its slot
        steps = self.speculative is not None and self.jitter > 0
        chunking = chunk_distribution(self.chunking, self.speculative) if self.jitter > 0 \
            else {1: 1.0}
        chunks = ChunkSampler(chunking, r_chunk, stratified=steps)
        slowdown = None
        if self.context is not None and not steps:
            slowdown = (context_start + hidden + 1.0, self.context.half_rate_at)
        gap_tps = self.tps / chunks.mean() if steps else self.tps
        gaps = GapSampler(gap_tps, self.gap[0], self.gap[1], r_gap, jitter=self.jitter,
                          slowdown=slowdown)
        share = 0.0
        if self.prefill is not None:
            share = min(self.prefill.reference_s / self.ttft.p50, MAX_PREFILL_SHARE)
        return StreamTiming(
            ttft_draw=ttft, gaps=gaps, chunks=chunks, tps=self.tps,
            prompt_tokens=prompt_tokens, context_start=context_start, cached_tokens=cached,
            prefill=self.prefill, prefill_share=share,
            cache_discount=self.prompt_cache.discount if self.prompt_cache else 0.0,
            context=self.context, hidden_tokens=hidden, hidden_tps=self.thinking_tps,
            stalls=StallSampler(self.stalls, r_stall, self.jitter) if self.stalls else None,
            steps=steps,
        )
