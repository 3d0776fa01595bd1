"""A staircase study's thresholds: at what TTFT (or below what rate) each participant starts to
call a response slow, and the group's. Records in, figures out; statsmodels fits.

The trials are the participant's staircase units with the answer that moved the walk (a unit's
first answer; retimer.study.staircase), each at the stimulus it really got: the delivered TTFT
or rate of the unit's first stream (`emitted`), else its level. A unit the upstream paced
(`upstream_bound`) is left out and counted: the participant felt the upstream, not the level.

Per participant, a logistic psychometric function of the log stimulus, slow ~ log(x), fitted by
maximum likelihood (statsmodels' binomial GLM); the threshold is where it crosses the share of
"slow" the rule converges on (50 % for 1-down/1-up), with a 95 % interval from the profile of
the penalised likelihood (retimer.study.psychometric), never narrower than half a level's step
either side (the grid's resolution); an end the answers do not bound is 0 or infinity.
When the answers separate (every "slow" at a slower stimulus than every "not slow"), the slope
has no bound: the threshold is the middle of the gap, its interval the gap and half a step more
either side. When that cannot be fitted (the answers do not overlap, or the slope has the
wrong sign), the geometric mean of the levels at the walk's reversals stands in (Levitt's
estimate), and the line says so. A participant who called every level slow, or none, is
censored: their threshold lies beyond the levels. The group's threshold is the median of the
participants' (the censored ones at the range's ends), with its order-statistic interval: each
person counts once, however many units, and nobody is dropped for being beyond the levels.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from retimer.records.parse import number
from retimer.records.schema import Rating, Record, StreamRecord
from retimer.study.analysis_data import AnalysisError
from retimer.study.psychometric import group_median, profile_interval
from retimer.study.staircase import Answer, StaircaseSettings, parse_description

__all__ = ["Fitted", "Thresholds", "Trial", "collect_trials", "fit_thresholds", "staircase_of",
           "thresholds"]

SLOW = Answer()  # the yes/no question
MIN_TRIALS = 8  # fewer answered units: no estimate for that participant
SKIP_REVERSALS = 2  # Levitt's estimate leaves out the first reversals (the approach)


@dataclass(frozen=True)
class Trial:
    participant: str
    unit: int
    level: float  # the staircase's level (ms or tok/s)
    stimulus: float  # what was delivered (the level when no figure was recorded)
    slow: bool


@dataclass(frozen=True)
class Fitted:
    """One participant's threshold."""

    participant: str
    trials: int
    slow_share: float
    threshold: float | None  # ms or tok/s; None: not estimable
    ci: tuple[float, float] | None
    slope: float | None  # per log unit of the stimulus
    method: str  # psychometric fit | reversals | none
    reversals: int
    note: str = ""
    censored: str = ""  # "faster": every level was slow; "slower": none was; "" otherwise


@dataclass
class Thresholds:
    study: str
    vary: str  # ttft | tps
    unit: str  # ms | tok/s
    target: float  # the share of "slow" the threshold is read at
    people: list[Fitted]
    group: float | None  # the median threshold (None: beyond the levels, or none estimable)
    group_ci: tuple[float, float] | None  # an end beyond the levels is 0 or inf
    excluded: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)

    @property
    def estimated(self) -> list[Fitted]:
        return [p for p in self.people if p.threshold is not None]

    @property
    def censored(self) -> list[Fitted]:
        return [p for p in self.people if p.censored]

    @property
    def counted(self) -> int:
        """The participants in the group's median: estimated or beyond the levels."""
        return len(self.estimated) + len(self.censored)


def _vary_of(name: str) -> str | None:
    for vary in ("ttft", "tps"):
        if name.startswith(f"{vary}-"):
            return vary
    return None


def collect_trials(records: Iterable[Record], study: str,
                   answer: Answer = SLOW) -> tuple[str, list[Trial], Counter[str]]:
    """(what varies, the trials, what was left out) of a staircase study's records."""
    units: dict[tuple[str, int], StreamRecord] = {}
    excluded: Counter[str] = Counter()
    vary = ""
    ratings: list[Rating] = []
    streams: dict[str, tuple[str, int]] = {}
    for r in records:
        if r.study_name != study:
            continue
        if isinstance(r, Rating):
            ratings.append(r)
            continue
        if not isinstance(r, StreamRecord) or r.study is None or r.study.level is None:
            continue
        participant, unit = r.participant, r.unit
        if participant is None or unit is None:
            continue
        found = _vary_of(r.condition or "")
        if found is None:
            continue
        vary = vary or found
        streams[r.id] = (participant, unit)
        units.setdefault((participant, unit), r)  # the unit's first stream is its stimulus
    if not units:
        raise AnalysisError(f"study '{study}' has no staircase units in the log(s) (their stream "
                            "records carry a level)")
    answers: dict[tuple[str, int], bool] = {}
    for rating in sorted(ratings, key=lambda r: r.time):
        key = streams.get(rating.stream)
        if key is None:
            excluded["ratings of responses not in the log(s)"] += 1
            continue
        slow = answer.of(rating)
        if slow is not None:
            answers.setdefault(key, slow)  # the first answer moved the walk
    trials: list[Trial] = []
    for key in sorted(units):
        if key not in answers:
            excluded["units with no answer"] += 1
            continue
        r = units[key]
        if r.upstream_bound is True:
            waited = r.study is not None and r.study.state_wait_ms is not None
            excluded["units late after waiting for the study's state database (upstream-bound)"
                     if waited else "units the upstream paced (upstream-bound)"] += 1
            continue
        assert r.study is not None and r.study.level is not None  # only such units were kept
        level = float(r.study.level)
        emitted = r.emitted
        figure = None if emitted is None else emitted.ttft_ms if vary == "ttft" else emitted.tps
        stimulus = number(figure)
        trials.append(Trial(key[0], key[1], level, stimulus if stimulus and stimulus > 0 else level,
                            answers[key]))
    return vary, trials, excluded


def _reversal_levels(levels: Sequence[float]) -> list[float]:
    """The levels at which the sequence of given levels turned."""
    out: list[float] = []
    direction = 0
    for before, after in zip(levels, levels[1:]):
        if after == before:
            continue
        step = 1 if after > before else -1
        if direction and step != direction:
            out.append(before)
        direction = step
    return out


def _fit_one(participant: str, trials: Sequence[Trial], target: float, vary: str) -> Fitted:
    import numpy as np
    import statsmodels.api as sm

    answers = [t.slow for t in trials]
    share = sum(answers) / len(answers)
    reversals = _reversal_levels([t.level for t in trials])
    kept = reversals[SKIP_REVERSALS:] if len(reversals) >= SKIP_REVERSALS + 2 else reversals
    fallback = math.exp(statistics.fmean(math.log(v) for v in kept)) if len(kept) >= 2 else None

    def by_reversals(note: str) -> Fitted:
        method = "reversals" if fallback is not None else "none"
        return Fitted(participant, len(trials), share, fallback, None, None, method,
                      len(reversals), note)

    if len(trials) < MIN_TRIALS:
        return Fitted(participant, len(trials), share, None, None, None, "none", len(reversals),
                      f"{len(trials)} answered units (at least {MIN_TRIALS} are needed)")
    if all(answers) or not any(answers):
        edge = "the fastest" if all(answers) else "the slowest"
        return Fitted(participant, len(trials), share, None, None, None, "none", len(reversals),
                      f"every answer was {'slow' if all(answers) else 'not slow'}: the threshold "
                      f"is beyond {edge} level", "faster" if all(answers) else "slower")
    x = np.log(np.array([t.stimulus for t in trials]))
    y = np.array(answers, dtype=float)
    distinct = sorted({math.log(t.level) for t in trials})
    half = statistics.median(b - a for a, b in zip(distinct, distinct[1:])) / 2 \
        if len(distinct) > 1 else 0.0
    sign = 1.0 if vary == "ttft" else -1.0  # slower is a longer TTFT, a lower rate
    fine = max(sign * v for v, slow in zip(x, answers) if not slow)
    felt = min(sign * v for v, slow in zip(x, answers) if slow)
    if fine <= felt:  # every "slow" slower than every "not slow": the slope has no bound
        mid = sign * (fine + felt) / 2
        lo, hi = sorted((sign * (fine - half), sign * (felt + half)))
        return Fitted(participant, len(trials), share, math.exp(mid), (math.exp(lo), math.exp(hi)),
                      None, "psychometric fit", len(reversals),
                      "the answers separate: the threshold is between the levels where they turn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = sm.GLM(y, sm.add_constant(x), family=sm.families.Binomial()).fit()
            b0, b1 = (float(v) for v in result.params)
        except Exception:  # noqa: BLE001  # statsmodels raises several kinds on separation
            return by_reversals("the answers do not overlap between levels: reversal estimate")
    if not all(map(math.isfinite, (b0, b1))) or b1 * sign <= 0:
        return by_reversals("no psychometric slope in the answers: reversal estimate")
    logit = math.log(target / (1 - target))
    log_t = (logit - b0) / b1
    low, high = min(x), max(x)
    if not low - 0.5 <= log_t <= high + 0.5:
        return by_reversals("the fitted threshold lies outside the levels given: reversal estimate")
    found = profile_interval([t.stimulus for t in trials], answers, target, sign)
    # answers that flip within one level give a steep slope and a tight interval that the
    # grid cannot resolve: the interval is at least half a level's step either side
    ci = (min(found[0], math.exp(log_t - half)), max(found[1], math.exp(log_t + half)))
    return Fitted(participant, len(trials), share, math.exp(log_t), ci, b1,
                  "psychometric fit", len(reversals))


def fit_thresholds(study: str, vary: str, trials: Sequence[Trial], target: float,
                   excluded: Counter[str] | None = None) -> Thresholds:
    """Each participant's threshold at `target` (the rule's share of "slow"), and the group's."""
    if not trials:
        left = "; ".join(f"{n} {reason}" for reason, n in sorted((excluded or Counter()).items()))
        raise AnalysisError(f"study '{study}': no answered staircase units to fit"
                            + (f" ({left})" if left else ""))
    by_person: dict[str, list[Trial]] = defaultdict(list)
    for t in trials:
        by_person[t.participant].append(t)
    people = [_fit_one(p, sorted(ts, key=lambda t: t.unit), target, vary)
              for p, ts in sorted(by_person.items())]
    sign = 1.0 if vary == "ttft" else -1.0  # slower is a longer TTFT, a lower rate
    axis = [sign * math.log(p.threshold) if p.threshold is not None else
            (-math.inf if p.censored == "faster" else math.inf)
            for p in people if p.threshold is not None or p.censored]
    group, group_ci = None, None
    notes: list[str] = []
    if axis:
        middle, interval = group_median(axis)
        if math.isfinite(middle):
            group = math.exp(sign * middle)
        else:
            notes.append("half the participants or more are beyond the levels: the group's "
                         "threshold is too (widen the levels)")
        if interval is not None:
            ends = sorted(math.exp(sign * e) if math.isfinite(e) else
                          (math.inf if sign * e > 0 else 0.0) for e in interval)
            group_ci = (ends[0], ends[1])
        else:
            notes.append(f"{len(axis)} participants: too few for a group interval (6 or more)")
    missing = [p.participant for p in people if p.threshold is None and not p.censored]
    if missing:
        notes.append(f"no threshold for {len(missing)} participant(s): {', '.join(missing[:8])}"
                     + (" ..." if len(missing) > 8 else ""))
    return Thresholds(study, vary, "ms" if vary == "ttft" else "tok/s", target, people, group,
                      group_ci, excluded or Counter(), notes, list(trials))


def staircase_of(records: Iterable[Record], study: str) -> tuple[float, Answer] | None:
    """(the share of "slow" its rule converges on, its answer) when `study` is a staircase study,
    as its unit records say (`staircase`); else None."""
    for r in records:
        if isinstance(r, StreamRecord) and r.study is not None and r.study.study == study \
                and r.study.staircase is not None:
            if (found := parse_description(r.study.staircase)) is not None:
                return found
    return None


def thresholds(records: Sequence[Record], study: str,
               settings: StaircaseSettings | None = None) -> Thresholds | None:
    """The thresholds of a staircase study (the study file's `settings` over what its records
    say); None when `study` is not one."""
    found = (settings.target, settings.answer) if settings is not None else staircase_of(records, study)
    if found is None:
        return None
    target, answer = found
    vary, trials, excluded = collect_trials(records, study, answer)
    return fit_thresholds(study, vary, trials, target, excluded)
