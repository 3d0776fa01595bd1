"""Values as profiles and the command line write them: durations, lifetimes, rates, token
counts, playback speeds, each parsed strictly into one unit (seconds, tokens/s, tokens).

Why strict and bounded: a typo must be an error with one line saying what was expected, never a
silent default, and a value past any sensible bound (a 1e30-token "reasoning") would hold a
client for ever.
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_RATE", "MAX_SECONDS", "MAX_SPEED", "MAX_TOKENS", "MIN_RATE", "MIN_SPEED",
           "RATE_WHAT", "ProfileError", "parse_duration", "parse_rate", "parse_speed",
           "parse_tokens", "parse_ttl", "plain", "show"]


class ProfileError(ValueError):
    """A profile (or an option that changes one) is unusable; str() is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def show(value: object) -> str:
    """A short one-line rendering of a bad value for an error message."""
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


_NUM = r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*"
_DURATION = re.compile(_NUM + r"(ms|s)?\s*", re.I)
_TTL = re.compile(_NUM + r"(ms|s|m|min|h)\s*", re.I)
_RATE = re.compile(_NUM + r"(tok/s|tokens/s|t/s|tps)?\s*", re.I)
_TOKENS = re.compile(_NUM + r"(k|m)?\s*", re.I)
_SPEED = re.compile(_NUM + r"(x|%)?\s*", re.I)
_TTL_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def plain(value: object) -> float:
    """A YAML int or float (never a bool or a string) as a float, else NaN."""
    v = _number(value)
    return math.nan if v is None else v


# Beyond these a value is a typo, and would hold a client for ever (a 1e30-token "reasoning")
MAX_SECONDS = 3600.0
MIN_RATE, MAX_RATE = 0.01, 1e6
MAX_TOKENS = 1e8
MIN_SPEED, MAX_SPEED = 0.001, 1000.0
RATE_WHAT = "a positive number of tokens/s (0.01 to 1,000,000)"


def parse_duration(value: str | int | float) -> float:
    """Seconds from "400ms", "2s", "1.5s", or a bare number, which means MILLISECONDS.

    Bare numbers are milliseconds because TTFT is quoted in ms everywhere (the speed table,
    provider dashboards) and `--ttft 250` should mean 250 ms. Zero is allowed here; callers
    that need a positive duration check it. Negative, non-finite or garbage values raise.
    """
    num = _number(value)
    if num is not None:
        seconds = num / 1000.0
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        n = float(m.group(1))
        seconds = n if (m.group(2) or "ms").lower() == "s" else n / 1000.0
    else:
        example = "use e.g. 400ms, 1.5s, or a bare number of ms"
        raise ProfileError(f"invalid duration {show(value)} ({example})")
    if not math.isfinite(seconds) or seconds < 0:
        raise ProfileError(f"invalid duration {show(value)}: must be a finite, non-negative time")
    if seconds > MAX_SECONDS:
        raise ProfileError(f"invalid duration {show(value)}: must be at most 1 hour")
    return seconds


def parse_ttl(value: str) -> float:
    """Seconds from a lifetime that must carry its unit: "300s", "5m", "1h" (also ms, min)."""
    m = _TTL.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise ProfileError(f"invalid lifetime {show(value)} (use e.g. 5m, 1h or 300s)")
    return float(m.group(1)) * _TTL_UNITS[m.group(2).lower()]


def parse_rate(value: str | int | float) -> float:
    """Tokens per second from 40, "40", "40tok/s" (also "tokens/s", "t/s", "tps"); > 0."""
    num = _number(value)
    if num is None:
        m = _RATE.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise ProfileError(f"invalid rate {show(value)} (use e.g. 40 or 40tok/s)")
        num = float(m.group(1))
    if not (math.isfinite(num) and num > 0):
        raise ProfileError(f"invalid rate {show(value)}: must be a positive number of tokens/s")
    if not MIN_RATE <= num <= MAX_RATE:
        raise ProfileError(f"invalid rate {show(value)}: must be from {MIN_RATE:g} to "
                           f"{MAX_RATE:,.0f} tokens/s")
    return num


def parse_tokens(value: str | int | float) -> float:
    """A token count from 64000, "64000", "64k" or "1M"."""
    num = _number(value)
    if num is None:
        m = _TOKENS.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise ProfileError(f"invalid token count {show(value)} (use e.g. 64000 or 64k)")
        num = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[(m.group(2) or "").lower()]
    if num > MAX_TOKENS:
        raise ProfileError(f"invalid token count {show(value)}: must be at most 100M")
    return num


def parse_speed(value: str | int | float) -> float:
    """A playback factor from 2, "2", "0.5x", "200%" (2 = twice as fast); must be > 0."""
    num = _number(value)
    if num is None:
        m = _SPEED.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise ProfileError(f"invalid speed {show(value)}")
        num = float(m.group(1)) / (100.0 if m.group(2) == "%" else 1.0)
    if not (math.isfinite(num) and num > 0):
        raise ProfileError(f"invalid speed {show(value)}: must be positive")
    if not MIN_SPEED <= num <= MAX_SPEED:
        raise ProfileError(f"invalid speed {show(value)}: must be from {MIN_SPEED:g}x to {MAX_SPEED:g}x")
    return num
