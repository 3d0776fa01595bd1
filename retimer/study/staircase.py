"""The staircase (threshold) design: a participant's next unit gets a TTFT or a rate set by their
answers so far. Pure: settings and answers in, the next level out (no I/O, no statistics).

Why: a fixed two-condition study says whether 2 s feels slower than 0.4 s; it cannot say where
the wait starts to be felt. An adaptive staircase (Levitt's transformed up-down method) walks
each participant's stimulus towards the level they call "slow" a given share of the time, so a
few dozen units find their threshold. The rule `N-down/1-up` steps towards the fast end after N
"slow" answers in a row at a level and towards the slow end after one "not slow"; it converges
on the level felt slow with probability 0.5 ** (1/N) (1-down/1-up: 50 %, 2-down/1-up: 70.7 %);
`1-down/N-up` on 1 - 0.5 ** (1/N) (1-down/2-up: 29.3 %).

Schema (under `staircase:` in STUDY.yaml, instead of `conditions:`; errors name the key)::

    staircase:
      vary: ttft                 # ttft | tps
      profile: frontier          # every level's profile (default frontier)
      levels: [100ms, 200ms, 400ms, 800ms, 1.6s, 3.2s]   # or {from: 100ms, to: 3.2s, count: 11}
      start: 800ms               # the nearest level (default: the middle one)
      rule: 1-down/1-up          # N-down/1-up or 1-down/N-up, N 1-4
      initial_step: 2            # levels per step until the first reversal (default 1)
      answer: slow               # the yes/no "did it feel slow?", or a scale and cut: speed <= 3
      stop: {reversals: 10, units: 40}   # optional: the walk stops (the level stays)
      tps: 50                    # fixed overrides of every level (not the one varied)
      jitter: 0
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from retimer.profile.model import ProfileError
from retimer.profile.units import parse_duration, parse_rate
from retimer.records.schema import Rating

__all__ = ["VARIES", "Answer", "StaircaseError", "StaircaseSettings", "StairState",
           "converges_on", "level_name", "parse_description", "parse_staircase", "position_after"]

VARIES = ("ttft", "tps")
KEYS = ("vary", "profile", "levels", "start", "rule", "initial_step", "answer", "stop",
        "ttft", "tps", "jitter", "speed", "thinking")
FIXED = ("ttft", "tps", "jitter", "speed", "thinking")
MAX_LEVELS = 64
_RULE = re.compile(r"\s*([1-4])\s*-\s*down\s*/\s*([1-4])\s*-\s*up\s*")
_CUT = re.compile(r"\s*([a-z][a-z0-9_]{0,31})\s*<=\s*([1-7])\s*")


class StaircaseError(ValueError):
    """A staircase block that cannot be used; str() is one line naming the key."""


@dataclass(frozen=True)
class Answer:
    """What counts as a "slow" answer: the yes/no question, or a scale at or below a cut."""

    scale: str = ""  # empty: the yes/no question ("slow" in the rating)
    cut: int = 0

    def of(self, rating: Rating) -> bool | None:
        """The answer a rating gives (None: it does not answer)."""
        if not self.scale:
            return rating.slow
        value = rating.scores.get(self.scale)
        return None if value is None else value <= self.cut

    def __str__(self) -> str:
        return f"{self.scale} <= {self.cut}" if self.scale else "slow"


@dataclass(frozen=True)
class StaircaseSettings:
    vary: str  # ttft | tps
    levels: tuple[float, ...]  # fast to slow: ttft in ms ascending, tps in tok/s descending
    start: int  # the first unit's level (an index into levels)
    down: int = 1  # "slow" answers in a row for a step towards the fast end
    up: int = 1  # "not slow" answers in a row for a step towards the slow end
    initial_step: int = 1  # levels per step until the first reversal
    answer: Answer = Answer()
    stop_reversals: int | None = None
    stop_units: int | None = None
    profile: str = "frontier"
    fixed: tuple[tuple[str, str], ...] = ()  # overrides every level shares

    @property
    def target(self) -> float:
        """The share of "slow" answers the rule converges on."""
        return converges_on(self.down, self.up)

    @property
    def rule(self) -> str:
        return f"{self.down}-down/{self.up}-up"

    @property
    def unit_label(self) -> str:
        return "ms" if self.vary == "ttft" else "tok/s"

    def describe(self) -> str:
        """What a unit's record says of the walk: "2-down/1-up; slow" (parse_description)."""
        return f"{self.rule}; {self.answer}"

    def names(self) -> list[str]:
        return [level_name(self.vary, v) for v in self.levels]

    def override(self, level: int) -> tuple[str, str]:
        """The profile override that gives a level."""
        value = self.levels[level]
        return (self.vary, f"{_fmt(value)}ms" if self.vary == "ttft" else _fmt(value))


@dataclass(frozen=True)
class StairState:
    """Where a participant's staircase stands after their answers."""

    level: int  # the next unit's level
    trials: int  # answers taken
    reversals: tuple[int, ...]  # the levels at which the walk turned
    done: bool  # the stop rule was met: the level stays


def _fmt(value: float) -> str:
    return str(int(round(value))) if abs(value - round(value)) < 1e-9 else f"{value:.4g}"


def converges_on(down: int, up: int) -> float:
    """The share of "slow" answers an N-down/1-up or 1-down/N-up walk settles at (Levitt)."""
    return 0.5 ** (1.0 / down) if down >= up else 1.0 - 0.5 ** (1.0 / up)


def parse_description(text: str) -> tuple[float, Answer] | None:
    """(the share of "slow" the rule converges on, the answer) from a record's `staircase`."""
    rule, _, answer = text.partition(";")
    m, cut = _RULE.fullmatch(rule), _CUT.fullmatch(answer)
    if m is None or (answer.strip() != "slow" and cut is None):
        return None
    return converges_on(int(m.group(1)), int(m.group(2))), Answer(cut.group(1), int(cut.group(2))) if cut else Answer()


def level_name(vary: str, value: float) -> str:
    """The condition name of a level: ttft-400ms, tps-12.5."""
    return f"ttft-{_fmt(value)}ms" if vary == "ttft" else f"tps-{_fmt(value)}"


def position_after(settings: StaircaseSettings, answered: Iterable[tuple[int, bool]]) -> StairState:
    """The staircase after the participant's answers, in unit order: (the level the unit was
    given, whether it was called slow). Each answer steps from the level its unit was given, so
    an answer that arrives after the next unit began still counts where it was made."""
    level, step = settings.start, settings.initial_step
    counting_at, slow_run, fine_run = level, 0, 0
    direction = 0  # -1: the last step was towards the fast end, +1 towards the slow end
    reversals: list[int] = []
    trials = 0
    top = len(settings.levels) - 1
    for presented, slow in answered:
        if _stopped(settings, trials, reversals):
            break
        trials += 1
        if presented != counting_at:
            counting_at, slow_run, fine_run = presented, 0, 0
        slow_run, fine_run = (slow_run + 1, 0) if slow else (0, fine_run + 1)
        move = -1 if slow_run >= settings.down else (1 if fine_run >= settings.up else 0)
        level = presented
        if move:
            if direction and move != direction:
                reversals.append(presented)
                step = 1
            direction = move
            level = min(top, max(0, presented + move * step))
            counting_at, slow_run, fine_run = level, 0, 0
    return StairState(level, trials, tuple(reversals), _stopped(settings, trials, reversals))


def _stopped(settings: StaircaseSettings, trials: int, reversals: list[int]) -> bool:
    return (settings.stop_reversals is not None and len(reversals) >= settings.stop_reversals) or \
        (settings.stop_units is not None and trials >= settings.stop_units)


# ---------------------------------------------------------------- parsing


def _show(value: object) -> str:
    text = " ".join((repr(value) if isinstance(value, str) else str(value)).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _value(vary: str, raw: object, key: str) -> float:
    """A level in ms (ttft) or tok/s (tps)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise StaircaseError(f"{key}: expected a {'duration like 400ms' if vary == 'ttft' else 'rate like 30'}"
                             f", got {_show(raw)}")
    try:
        if vary == "ttft":
            ms = parse_duration(raw) * 1000.0
            if ms <= 0:
                raise ProfileError("must be positive")
            return round(ms, 3)
        return round(parse_rate(raw), 3)
    except ProfileError as e:
        raise StaircaseError(f"{key}: {e}") from None


def _levels(vary: str, raw: object) -> tuple[float, ...]:
    if isinstance(raw, Mapping):
        unknown = set(raw) - {"from", "to", "count"}
        if unknown or not {"from", "to", "count"} <= set(raw):
            raise StaircaseError("staircase.levels: expected a list, or {from, to, count} "
                                 "(levels spaced evenly on a log scale)")
        low = _value(vary, raw["from"], "staircase.levels.from")
        high = _value(vary, raw["to"], "staircase.levels.to")
        count = raw["count"]
        if isinstance(count, bool) or not isinstance(count, int) or not 3 <= count <= MAX_LEVELS:
            raise StaircaseError(f"staircase.levels.count: expected a whole number 3-{MAX_LEVELS}, "
                                 f"got {_show(count)}")
        ratio = (high / low) ** (1.0 / (count - 1))
        digits = 0 if vary == "ttft" else 1
        values = [round(low * ratio**i, digits) for i in range(count)]
    elif isinstance(raw, list):
        values = [_value(vary, v, f"staircase.levels[{i}]") for i, v in enumerate(raw)]
    else:
        raise StaircaseError(f"staircase.levels: required: a list of {vary} values, or "
                             f"{{from, to, count}}, got {_show(raw)}")
    if not 3 <= len(values) <= MAX_LEVELS:
        raise StaircaseError(f"staircase.levels: expected 3 to {MAX_LEVELS} levels, got {len(values)}")
    if len(set(values)) != len(values):
        raise StaircaseError("staircase.levels: a level is given twice (or rounds to another)")
    return tuple(sorted(values, reverse=vary == "tps"))


def _stop(raw: object) -> tuple[int | None, int | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping) or not raw or set(raw) - {"reversals", "units"}:
        raise StaircaseError(f"staircase.stop: expected {{reversals: N, units: N}} (either or "
                             f"both), got {_show(raw)}")
    out: list[int | None] = []
    for key in ("reversals", "units"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise StaircaseError(f"staircase.stop.{key}: expected a whole number >= 1, got {_show(value)}")
        out.append(value)
    return out[0], out[1]


def parse_staircase(raw: object, scales: Iterable[str], overrides: Mapping[str, str]) -> StaircaseSettings:
    """The staircase block; `scales` are the rating scales an answer may name, `overrides` the
    already-checked fixed overrides (ttft, tps, jitter, speed, thinking) as strings."""
    if not isinstance(raw, Mapping):
        raise StaircaseError(f"staircase: expected a mapping with vary and levels, got {_show(raw)}")
    for k in raw:
        if k not in KEYS:
            raise StaircaseError(f"staircase.{k}: unknown key (known: {', '.join(KEYS)})")
    vary = raw.get("vary")
    if vary not in VARIES:
        raise StaircaseError(f"staircase.vary: expected one of {', '.join(VARIES)}, got {_show(vary)}")
    if vary in overrides:
        raise StaircaseError(f"staircase.{vary}: is what the staircase varies: give it in levels")
    levels = _levels(vary, raw.get("levels"))
    start = len(levels) // 2
    if "start" in raw:
        first = _value(vary, raw["start"], "staircase.start")
        start = min(range(len(levels)), key=lambda i: (abs(math.log(levels[i] / first)), i))
    rule = raw.get("rule", "1-down/1-up")
    m = _RULE.fullmatch(rule) if isinstance(rule, str) else None
    if m is None or (m.group(1) != "1" and m.group(2) != "1"):
        raise StaircaseError(f"staircase.rule: expected N-down/1-up or 1-down/N-up with N 1-4 "
                             f"(like 2-down/1-up), got {_show(rule)}")
    step = raw.get("initial_step", 1)
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step < len(levels):
        raise StaircaseError(f"staircase.initial_step: expected a whole number of levels from 1 to "
                             f"{len(levels) - 1}, got {_show(step)}")
    answer = _answer(raw.get("answer", "slow"), list(scales))
    stop_reversals, stop_units = _stop(raw.get("stop"))
    profile = raw.get("profile", "frontier")
    if not isinstance(profile, str) or not profile.strip():
        raise StaircaseError(f"staircase.profile: expected a profile name or a YAML path, got {_show(profile)}")
    fixed = tuple((k, overrides[k]) for k in FIXED if k in overrides)
    return StaircaseSettings(vary=str(vary), levels=levels, start=start, down=int(m.group(1)),
                             up=int(m.group(2)), initial_step=step, answer=answer,
                             stop_reversals=stop_reversals, stop_units=stop_units,
                             profile=profile.strip(), fixed=fixed)


def _answer(raw: object, scales: list[str]) -> Answer:
    if raw == "slow":
        return Answer()
    m = _CUT.fullmatch(raw) if isinstance(raw, str) else None
    if m is None:
        raise StaircaseError(f"staircase.answer: expected slow (the yes/no question) or a scale "
                             f"and a cut like 'speed <= 3', got {_show(raw)}")
    if m.group(1) not in scales:
        raise StaircaseError(f"staircase.answer: no rating scale '{m.group(1)}' (the study rates "
                             f"{', '.join(scales)})")
    return Answer(m.group(1), int(m.group(2)))
