"""Checking a profile document strictly: every problem is one line naming the file and the dotted key.

Why strict: profiles carry numbers that users compare and cite; a typo (an unknown key, a rate
of 0, quantiles out of order) must be an error, never a silent default. This module turns a
parsed document (read by retimer.profile.loader) into the keyword arguments of
`retimer.profile.model.Profile`; the values themselves are parsed by retimer.profile.units, and
the schema is documented in profiles/README.md.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from retimer.profile.units import (
    RATE_WHAT,
    ProfileError,
    parse_duration,
    parse_rate,
    parse_tokens,
    parse_ttl,
    plain,
    show,
)
from retimer.timing.model import (
    ContextSpec,
    PrefillSpec,
    PromptCacheSpec,
    ReasoningSpec,
    SpeculativeSpec,
    StallSpec,
)
from retimer.timing.quantiles import QuantileShape

__all__ = ["DEFAULT_GAP", "LEGACY_LEVEL", "THINKING_LEVELS", "TIMING_KEYS", "TOP_KEYS",
           "parse_document"]

DEFAULT_GAP: tuple[float, float] = (1.3, 2.5)
TIMING_KEYS = ("ttft", "decode", "chunking", "jitter", "prefill", "prompt_cache", "context",
               "reasoning", "stalls", "speculative")
TOP_KEYS = ("name", "aliases", "description", "source", "passthrough", *TIMING_KEYS)
_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")


def _dotted(parent: str, key: object) -> str:
    return f"{parent}.{key}" if parent else str(key)


class _Reader:
    """Validates one parsed file; every error names the file and the dotted key."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, message: str) -> ProfileError:
        return ProfileError(f"{self.where}: {message}")

    def mapping(self, key: str, value: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(f"{key} must be a mapping with keys {', '.join(allowed)}, "
                            f"got {show(value)}")
        for k in value:
            if k not in allowed:
                hint = difflib.get_close_matches(str(k), allowed, n=1, cutoff=0.75)
                near = f"did you mean '{hint[0]}'?" if hint else f"allowed: {', '.join(allowed)}"
                raise self.fail(f"unknown key '{_dotted(key, k)}' ({near})")
        return value

    def require(self, key: str, m: Mapping[str, Any], k: str) -> Any:
        if k not in m or m[k] is None:
            raise self.fail(f"missing required key '{_dotted(key, k)}'")
        return m[k]

    def text(self, key: str, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{key} must be a non-empty string, got {show(value)}")
        return value.strip()

    def slug(self, key: str, value: object) -> str:
        if not isinstance(value, str) or not _SLUG.fullmatch(value):
            quote = " (quote it: YAML reads yes/no/on/off as booleans)"
            hint = quote if isinstance(value, bool) else ""
            raise self.fail(f"{key} must be a lowercase name of a-z 0-9 . _ -, got "
                            f"{show(value)}{hint}")
        return value

    def number(self, key: str, value: object, what: str, parse: Callable[[Any], float],
               low: float = 0.0, low_ok: bool = False, high: float = math.inf) -> float:
        """A number above `low` (or at it, when low_ok) and at most `high`, via `parse`."""
        try:
            v = parse(value)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and (v > low or (low_ok and v == low)) and v <= high):
            raise self.fail(f"{key} must be {what}, got {show(value)}")
        return v

    def count(self, key: str, value: object, low: int = 1) -> int:
        """A whole number of tokens >= low ("64k" allowed)."""
        v = self.number(key, value, f"a whole number of tokens >= {low} (e.g. 1000 or 64k)",
                        parse_tokens, low=low, low_ok=True)
        if v != int(v):
            raise self.fail(f"{key} must be a whole number of tokens, got {show(value)}")
        return int(v)

    def quantiles(self, key: str, value: object, what: str,
                  parse: Callable[[Any], float]) -> QuantileShape:
        """{p50, p90, p99}, each positive, strictly increasing."""
        t = self.mapping(key, value, ("p50", "p90", "p99"))
        q = [self.number(f"{key}.{k}", self.require(key, t, k), what, parse)
             for k in ("p50", "p90", "p99")]
        if not q[0] < q[1] < q[2]:
            got = ", ".join(show(t[k]) for k in ("p50", "p90", "p99"))
            raise self.fail(f"{key} quantiles must increase (p50 < p90 < p99), got {got}")
        return QuantileShape(*q)


_DUR = "a positive duration of at most 1 hour, like 120ms or 1.5s"


def parse_document(data: object, where: str) -> dict[str, Any]:
    """Keyword arguments for `Profile` from one parsed file (`where` prefixes every error)."""
    r = _Reader(where)
    if data is None:
        raise r.fail("the file is empty; expected a mapping with name, source, ttft, decode")
    if not isinstance(data, Mapping):
        raise r.fail(f"the top level must be a mapping, got {type(data).__name__}")
    top = r.mapping("", data, TOP_KEYS)
    out: dict[str, Any] = {"name": r.slug("name", r.require("", top, "name"))}
    out["source"] = r.text("source", r.require("", top, "source"))
    out["description"] = r.text("description", top["description"]) if "description" in top else ""
    aliases_raw = top.get("aliases", [])
    if not isinstance(aliases_raw, list):
        raise r.fail(f"aliases must be a list of names, got {show(aliases_raw)}")
    aliases = tuple(r.slug("each alias", a) for a in aliases_raw)
    for a in aliases:
        if a == out["name"]:
            raise r.fail(f"alias '{a}' repeats the profile's name")
        if aliases.count(a) > 1:
            raise r.fail(f"alias '{a}' appears twice")
    out["aliases"] = aliases
    passthrough = top.get("passthrough", False)
    if not isinstance(passthrough, bool):
        raise r.fail(f"passthrough must be true or false, got {show(passthrough)}")
    if passthrough:
        extra = [k for k in TIMING_KEYS if k in top]
        if extra:
            raise r.fail(f"a passthrough profile takes no timing keys, found '{extra[0]}'")
        return {**out, "passthrough": True}

    out["ttft"] = r.quantiles("ttft", r.require("", top, "ttft"), _DUR, parse_duration)
    d = r.mapping("decode", r.require("", top, "decode"), ("tps", "gap"))
    out["tps"] = r.number("decode.tps", r.require("decode", d, "tps"),
                          RATE_WHAT, parse_rate)
    if "gap" in d:
        g = r.mapping("decode.gap", d["gap"], ("p90", "p99"))
        g90, g99 = (r.number(f"decode.gap.{k}", r.require("decode.gap", g, k),
                             "a number greater than 1", plain, low=1.0) for k in ("p90", "p99"))
        if not g90 < g99:
            raise r.fail(f"decode.gap quantiles must increase (p90 < p99), got {g90:g}, {g99:g}")
        out["gap"] = (g90, g99)
    if "chunking" in top:
        if "speculative" in top:
            raise r.fail("chunking and speculative both set tokens per event: keep one")
        out["chunking"] = _chunking(r, top["chunking"])
    if "jitter" in top:
        out["jitter"] = r.number("jitter", top["jitter"], "a number >= 0", plain, low_ok=True)
    for key, parse in _EXTRA.items():
        if key in top:
            out[key] = parse(r, top[key])
    if "reasoning" in top:
        out.update(_reasoning(r, top["reasoning"]))
    if "prompt_cache" in out and "prefill" not in out:
        raise r.fail("prompt_cache needs prefill (it discounts prefill time)")
    if (pre := out.get("prefill")) is not None and not pre.reference_s < out["ttft"].p50:
        raise r.fail(f"prefill: reference_tokens / tps = {pre.reference_s * 1000:.0f}ms must be "
                     f"below ttft.p50 ({out['ttft'].p50 * 1000:.0f}ms), which includes it")
    return out


def _chunking(r: _Reader, raw: object) -> tuple[tuple[int, float], ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise r.fail(f"chunking must be a mapping of tokens per event to probability, "
                     f"got {show(raw)}")
    pairs: list[tuple[int, float]] = []
    for k, p in raw.items():
        size = k if isinstance(k, int) and not isinstance(k, bool) else None
        if isinstance(k, str) and k.strip().isdigit():
            size = int(k)
        if size is None or size < 1:
            raise r.fail(f"chunking keys must be positive whole numbers of tokens, got {show(k)}")
        pairs.append((size, r.number(f"chunking.{size}", p, "a positive number", plain)))
    total = sum(p for _, p in pairs)
    if abs(total - 1.0) > 1e-3:
        raise r.fail(f"chunking probabilities must sum to 1, got {total:g}")
    return tuple(sorted((s, p / total) for s, p in pairs))


def _prefill(r: _Reader, raw: object) -> PrefillSpec:
    m = r.mapping("prefill", raw, ("tps", "reference_tokens"))
    tps = r.number("prefill.tps", r.require("prefill", m, "tps"),
                   RATE_WHAT, parse_rate)
    ref = r.count("prefill.reference_tokens", m["reference_tokens"], 0) \
        if "reference_tokens" in m else 1000
    return PrefillSpec(tps, ref)


def _prompt_cache(r: _Reader, raw: object) -> PromptCacheSpec:
    m = r.mapping("prompt_cache", raw, ("discount", "min_tokens", "ttl"))
    discount = r.number("prompt_cache.discount", r.require("prompt_cache", m, "discount"),
                        "a fraction above 0 and at most 1 (0.9 = 90% faster)", plain, high=1.0)
    spec = PromptCacheSpec(discount)
    if "min_tokens" in m:
        spec = PromptCacheSpec(discount, r.count("prompt_cache.min_tokens", m["min_tokens"]))
    if "ttl" in m:
        ttl = r.number("prompt_cache.ttl", m["ttl"], "a positive lifetime like 5m, 1h or 300s",
                       parse_ttl)
        spec = PromptCacheSpec(discount, spec.min_tokens, ttl)
    return spec


def _context(r: _Reader, raw: object) -> ContextSpec:
    m = r.mapping("context", raw, ("half_rate_at",))
    n = r.count("context.half_rate_at", r.require("context", m, "half_rate_at"))
    return ContextSpec(float(n))


THINKING_LEVELS = ("low", "medium", "high")
LEGACY_LEVEL = "on"
"""The level name of an older `reasoning: {hidden_tokens: ...}` block (thinking on by default)."""
_HIDDEN = "a positive number of tokens (at most 100M)"


def _reasoning(r: _Reader, raw: object) -> dict[str, Any]:
    """Hidden thinking: named levels (off unless `default` picks one), or the older single
    `hidden_tokens`, which keeps its behaviour: on by default, as the level `on`."""
    m = r.mapping("reasoning", raw, ("hidden_tokens", "levels", "default"))
    if "hidden_tokens" in m:
        if "levels" in m or "default" in m:
            raise r.fail("reasoning: give either hidden_tokens (always on, the older form) or "
                         "levels with an optional default, not both")
        shape = r.quantiles("reasoning.hidden_tokens", m["hidden_tokens"], _HIDDEN, parse_tokens)
        spec = ReasoningSpec(shape)
        return {"reasoning": spec, "thinking_levels": ((LEGACY_LEVEL, spec),),
                "thinking": LEGACY_LEVEL, "thinking_default": LEGACY_LEVEL}
    if "levels" not in m:
        raise r.fail("reasoning: give levels (low, medium, high) with an optional default, or "
                     "the older hidden_tokens")
    raw_levels = r.mapping("reasoning.levels", m["levels"], THINKING_LEVELS)
    if not raw_levels:
        raise r.fail("reasoning.levels must name at least one of low, medium, high")
    levels = tuple((k, ReasoningSpec(r.quantiles(f"reasoning.levels.{k}", raw_levels[k],
                                                 _HIDDEN, parse_tokens)))
                   for k in THINKING_LEVELS if k in raw_levels)
    default = m.get("default", "off")
    default = "off" if default is False else default  # YAML reads a bare off as false
    names = [k for k, _ in levels]
    if default != "off" and default not in names:
        raise r.fail(f"reasoning.default must be off or a declared level "
                     f"({', '.join(names)}), got {show(default)}")
    chosen = dict(levels).get(default)
    return {"reasoning": chosen, "thinking_levels": levels, "thinking": default,
            "thinking_default": default}


def _stalls(r: _Reader, raw: object) -> StallSpec:
    m = r.mapping("stalls", raw, ("per_1000_tokens", "duration", "where"))
    rate = r.number("stalls.per_1000_tokens", r.require("stalls", m, "per_1000_tokens"),
                    "a number above 0 and at most 1000", plain, high=1000.0)
    duration = r.quantiles("stalls.duration", r.require("stalls", m, "duration"), _DUR,
                           parse_duration)
    where = m.get("where", "any")
    if where not in ("any", "early", "late"):
        raise r.fail(f"stalls.where must be any, early or late, got {show(where)}")
    return StallSpec(rate, duration, where)


def _speculative(r: _Reader, raw: object) -> SpeculativeSpec:
    m = r.mapping("speculative", raw, ("draft_tokens", "acceptance"))
    k = r.count("speculative.draft_tokens", r.require("speculative", m, "draft_tokens"))
    if k > 16:
        raise r.fail(f"speculative.draft_tokens must be at most 16, got {k}")
    a = r.number("speculative.acceptance", r.require("speculative", m, "acceptance"),
                 "a probability above 0 and below 1", plain)
    if a >= 1.0:
        raise r.fail(f"speculative.acceptance must be a probability above 0 and below 1, "
                     f"got {show(m['acceptance'])}")
    return SpeculativeSpec(k, a)


_EXTRA: dict[str, Callable[[_Reader, object], Any]] = {
    "prefill": _prefill, "prompt_cache": _prompt_cache, "context": _context,
    "stalls": _stalls, "speculative": _speculative,
}
