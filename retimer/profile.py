"""Speed profiles: what a re-timed stream should feel like, loaded from YAML.

Why files and strict checks: profiles carry numbers that users compare and cite, so each one
names its source, and a typo (an unknown key, a rate of 0, quantiles out of order) is an
error with one line naming the file and the key, never a silent default.

Schema (all durations: "120ms", "1.5s", or a bare number = milliseconds)::

    name: cerebras-llama-3.3-70b      # required; lowercase slug: a-z 0-9 . _ -
    aliases: [cerebras]               # optional; slugs, unique across the built-ins
    description: Llama 3.3 70B on Cerebras WSE-3     # optional
    source: "Speed table row 1 ..."   # required: where every number comes from
    passthrough: false                # optional; true = forward the stream untouched
    ttft: {p50: 120ms, p90: 162ms, p99: 192ms}       # required unless passthrough
    decode:                           # required unless passthrough
      tps: 2100                       # required: mean tokens/s ("2100" or "2100tok/s")
      gap: {p90: 1.2, p99: 1.6}       # optional: inter-token gap quantiles / its median
    chunking: {1: 0.9, 2: 0.1}        # optional: tokens per network event -> probability
    jitter: 1.0                       # optional: scales every spread (0 = constant timing)

Defaults: decode.gap {p90: 1.3, p99: 2.5}; chunking {1: 1.0}; jitter 1. Quantiles must
increase strictly; gap ratios must exceed 1. A passthrough profile takes none of ttft,
decode, chunking, jitter. Any other key is an error. See profiles/README.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from retimer.distributions import ChunkSampler, GapSampler, QuantileShape, sample_ttft

__all__ = ["DEFAULT_GAP", "Profile", "ProfileError", "StreamTiming", "builtin_dir",
           "builtin_profiles", "load_profile", "parse_duration", "parse_rate"]

DEFAULT_GAP: tuple[float, float] = (1.3, 2.5)
_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")
_TOP_KEYS = ("name", "aliases", "description", "source", "passthrough", "ttft", "decode",
             "chunking", "jitter")
_TIMING_KEYS = ("ttft", "decode", "chunking", "jitter")


class ProfileError(ValueError):
    """A profile (or an option that changes one) is unusable; str() is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _show(value: object) -> str:
    """A short one-line rendering of a bad value for an error message."""
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


_NUM = r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*"
_DURATION = re.compile(_NUM + r"(ms|s)?\s*", re.I)
_RATE = re.compile(_NUM + r"(tok/s|tokens/s|t/s|tps)?\s*", re.I)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


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
        raise ProfileError(f"invalid duration {_show(value)} ({example})")
    if not math.isfinite(seconds) or seconds < 0:
        raise ProfileError(f"invalid duration {_show(value)}: must be a finite, non-negative time")
    return seconds


def parse_rate(value: str | int | float) -> float:
    """Tokens per second from 40, "40", "40tok/s" (also "tokens/s", "t/s", "tps"); > 0."""
    num = _number(value)
    if num is None:
        m = _RATE.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise ProfileError(f"invalid rate {_show(value)} (use e.g. 40 or 40tok/s)")
        num = float(m.group(1))
    if not (math.isfinite(num) and num > 0):
        raise ProfileError(f"invalid rate {_show(value)}: must be a positive number of tokens/s")
    return num


def _option(value: object, parse: Callable[[str], float], low_ok: bool = False) -> float:
    """A command-line option value as a float (strings parsed); NaN when unusable."""
    try:
        v = parse(value) if isinstance(value, str) else _plain(value)
    except ValueError:  # ProfileError, or float() on garbage
        return math.nan
    return v if math.isfinite(v) and (v > 0 or (low_ok and v == 0)) else math.nan


class StreamTiming:
    """The timing of one stream: TTFT drawn once, then gaps and chunk sizes on demand."""

    __slots__ = ("ttft", "_gaps", "_chunks")

    def __init__(self, ttft: float, gaps: GapSampler, chunks: ChunkSampler) -> None:
        self.ttft = ttft
        self._gaps = gaps
        self._chunks = chunks

    def gap(self) -> float:
        """Seconds from one token to the next."""
        return self._gaps.next()

    def chunk_size(self) -> int:
        """Tokens in the next network event."""
        return self._chunks.next()


@dataclass(frozen=True)
class Profile:
    """A target speed: TTFT quantiles (seconds), mean decode rate, gap shape and chunking."""

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

    def __post_init__(self) -> None:
        if not self.passthrough and (self.ttft is None or self.tps is None):
            raise ProfileError(f"profile '{self.name}' needs ttft and tps unless passthrough")

    def with_overrides(
        self,
        ttft: float | str | None = None,
        tps: float | str | None = None,
        jitter: float | str | None = None,
    ) -> Profile:
        """A copy with command-line overrides: ttft in seconds, tps in tokens/s.

        Strings are parsed as on the command line ("400ms", "40tok/s"). --ttft sets the
        median and scales p90/p99 with it, so the provider's tail shape stays; --jitter
        scales every spread (0 = constant timing) and is kept on the profile.
        """
        if self.passthrough and (ttft, tps, jitter) != (None, None, None):
            raise ProfileError(
                f"--ttft/--tps/--jitter do not apply to passthrough profile '{self.name}'"
            )
        changes: dict[str, Any] = {}
        if ttft is not None:
            if math.isnan(v := _option(ttft, parse_duration)):
                raise ProfileError(f"--ttft must be a positive duration, got {_show(ttft)}")
            assert self.ttft is not None
            changes["ttft"] = self.ttft.scaled(v / self.ttft.p50)
        if tps is not None:
            if math.isnan(v := _option(tps, parse_rate)):
                raise ProfileError(f"--tps must be a positive number of tokens/s, got {_show(tps)}")
            changes["tps"] = v
        if jitter is not None:
            if math.isnan(v := _option(jitter, float, low_ok=True)):
                raise ProfileError(f"--jitter must be a number >= 0, got {_show(jitter)}")
            changes["jitter"] = v
        return dataclasses.replace(self, **changes)

    def stream_timing(self, rng: np.random.Generator) -> StreamTiming:
        """Fresh samplers for one stream; child generators keep TTFT, gaps, chunks apart."""
        if self.passthrough or self.ttft is None or self.tps is None:
            raise ProfileError(f"profile '{self.name}' is passthrough: it has no timing")
        r_ttft, r_gap, r_chunk = rng.spawn(3)
        ttft = sample_ttft(self.ttft, r_ttft, self.jitter)
        gaps = GapSampler(self.tps, self.gap[0], self.gap[1], r_gap, jitter=self.jitter)
        # jitter 0 is a metronome: every token its own network event, exactly on its slot
        chunking = dict(self.chunking) if self.jitter > 0 else {1: 1.0}
        return StreamTiming(ttft, gaps, ChunkSampler(chunking, r_chunk))


# ---------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (plain PyYAML silently keeps the last one)."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ProfileError(f"duplicate key {_show(key)} at line {line}")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Reader:
    """Validates one parsed file; every error names the file and the dotted key."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, message: str) -> ProfileError:
        return ProfileError(f"{self.where}: {message}")

    def mapping(self, key: str, value: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            keys = ", ".join(allowed)
            raise self.fail(f"{key} must be a mapping with keys {keys}, got {_show(value)}")
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
            raise self.fail(f"{key} must be a non-empty string, got {_show(value)}")
        return value.strip()

    def slug(self, key: str, value: object) -> str:
        if not isinstance(value, str) or not _SLUG.fullmatch(value):
            quote = " (quote it: YAML reads yes/no/on/off as booleans)"
            hint = quote if isinstance(value, bool) else ""
            raise self.fail(f"{key} must be a lowercase name of a-z 0-9 . _ -, got "
                            f"{_show(value)}{hint}")
        return value

    def number(self, key: str, value: object, what: str, parse: Callable[[Any], float],
               low: float = 0.0, low_ok: bool = False) -> float:
        """A number above `low` (or at it, when low_ok), via `parse`; else an error."""
        try:
            v = parse(value)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and (v > low or (low_ok and v == low))):
            raise self.fail(f"{key} must be {what}, got {_show(value)}")
        return v


def _dotted(parent: str, key: object) -> str:
    return f"{parent}.{key}" if parent else str(key)


def _plain(value: object) -> float:
    """A YAML int or float (never a bool or a string) as a float, else NaN."""
    v = _number(value)
    return math.nan if v is None else v


def _parse(data: object, where: str, path: Path | None) -> Profile:
    r = _Reader(where)
    if data is None:
        raise r.fail("the file is empty; expected a mapping with name, source, ttft, decode")
    if not isinstance(data, Mapping):
        raise r.fail(f"the top level must be a mapping, got {type(data).__name__}")
    top = r.mapping("", data, _TOP_KEYS)
    name = r.slug("name", r.require("", top, "name"))
    source = r.text("source", r.require("", top, "source"))
    description = r.text("description", top["description"]) if "description" in top else ""
    aliases_raw = top.get("aliases", [])
    if not isinstance(aliases_raw, list):
        raise r.fail(f"aliases must be a list of names, got {_show(aliases_raw)}")
    aliases = tuple(r.slug("each alias", a) for a in aliases_raw)
    for a in aliases:
        if a == name:
            raise r.fail(f"alias '{a}' repeats the profile's name")
        if aliases.count(a) > 1:
            raise r.fail(f"alias '{a}' appears twice")
    passthrough = top.get("passthrough", False)
    if not isinstance(passthrough, bool):
        raise r.fail(f"passthrough must be true or false, got {_show(passthrough)}")
    if passthrough:
        extra = [k for k in _TIMING_KEYS if k in top]
        if extra:
            raise r.fail(f"a passthrough profile takes no timing keys, found '{extra[0]}'")
        return Profile(name, aliases, description, source, passthrough=True, path=path)

    t = r.mapping("ttft", r.require("", top, "ttft"), ("p50", "p90", "p99"))
    dur = "a positive duration like 120ms or 1.5s"
    q = [r.number(f"ttft.{k}", r.require("ttft", t, k), dur, parse_duration)
         for k in ("p50", "p90", "p99")]
    if not q[0] < q[1] < q[2]:
        got = ", ".join(_show(t[k]) for k in ("p50", "p90", "p99"))
        raise r.fail(f"ttft quantiles must increase (p50 < p90 < p99), got {got}")

    d = r.mapping("decode", r.require("", top, "decode"), ("tps", "gap"))
    tps = r.number("decode.tps", r.require("decode", d, "tps"),
                   "a positive number of tokens/s", parse_rate)
    gap = DEFAULT_GAP
    if "gap" in d:
        g = r.mapping("decode.gap", d["gap"], ("p90", "p99"))
        g90, g99 = (r.number(f"decode.gap.{k}", r.require("decode.gap", g, k),
                             "a number greater than 1", _plain, low=1.0) for k in ("p90", "p99"))
        if not g90 < g99:
            raise r.fail(f"decode.gap quantiles must increase (p90 < p99), got {g90:g}, {g99:g}")
        gap = (g90, g99)
    chunking = _chunking(r, top["chunking"]) if "chunking" in top else ((1, 1.0),)
    jitter = 1.0
    if "jitter" in top:
        jitter = r.number("jitter", top["jitter"], "a number >= 0", _plain, low_ok=True)
    return Profile(name, aliases, description, source, QuantileShape(*q), tps, gap, chunking,
                   False, jitter, path)


def _chunking(r: _Reader, raw: object) -> tuple[tuple[int, float], ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise r.fail(f"chunking must be a mapping of tokens per event to probability, "
                     f"got {_show(raw)}")
    pairs: list[tuple[int, float]] = []
    for k, p in raw.items():
        size = k if isinstance(k, int) and not isinstance(k, bool) else None
        if isinstance(k, str) and k.strip().isdigit():
            size = int(k)
        if size is None or size < 1:
            raise r.fail(f"chunking keys must be positive whole numbers of tokens, got {_show(k)}")
        pairs.append((size, r.number(f"chunking.{size}", p, "a positive number", _plain)))
    total = sum(p for _, p in pairs)
    if abs(total - 1.0) > 1e-3:
        raise r.fail(f"chunking probabilities must sum to 1, got {total:g}")
    return tuple(sorted((s, p / total) for s, p in pairs))


def _load_file(path: Path, where: str) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{where}: cannot read the file ({type(e).__name__}: {e})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ProfileError as e:
        raise ProfileError(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ProfileError(f"{where}: invalid YAML{at}: {problem}") from None
    return _parse(data, where, path)


def builtin_dir() -> Path:
    """profiles/ inside the installed package, else the source checkout's top-level one."""
    here = Path(__file__).resolve().parent
    packaged = here / "profiles"
    return packaged if packaged.is_dir() else here.parent / "profiles"


@functools.cache
def _builtins(directory: Path) -> tuple[Profile, ...]:
    profiles: list[Profile] = []
    owner: dict[str, str] = {}
    for file in sorted(directory.glob("*.yaml")):
        where = f"{directory.name}/{file.name}"
        p = _load_file(file, where)
        for key in (p.name, *p.aliases):
            if key in owner:
                raise ProfileError(f"{where}: name or alias '{key}' is also in {owner[key]}")
            owner[key] = where
        profiles.append(p)
    return tuple(profiles)


def builtin_profiles() -> list[Profile]:
    """Every built-in profile: table rows in table order, then the others by file name."""
    return list(_builtins(builtin_dir()))


def load_profile(name_or_path: str) -> Profile:
    """A built-in by name or alias (any case), or a YAML file by path.

    A value ending in .yaml/.yml or containing a slash is a path; otherwise it is looked up
    among the built-ins first and then tried as a file.
    """
    raw = name_or_path.strip()
    looks_like_path = raw.lower().endswith((".yaml", ".yml")) or "/" in raw or "\\" in raw
    if not looks_like_path:
        key = raw.lower()
        known: list[str] = []
        for p in builtin_profiles():
            if key == p.name or key in p.aliases:
                return p
            known += [p.name, *p.aliases]
        if not Path(raw).is_file():
            hint = difflib.get_close_matches(key, known, n=1)
            near = f"did you mean '{hint[0]}'? " if hint else ""
            raise ProfileError(f"unknown profile '{raw}' ({near}try: retimer profiles)")
    path = Path(raw).expanduser()
    if not path.is_file():
        raise ProfileError(f"{raw}: no such profile file")
    return _load_file(path, raw)
