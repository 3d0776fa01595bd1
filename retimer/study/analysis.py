"""The statistics of a study: did the conditions feel different, by how much, and is it real.
Records in (retimer.study.analysis_data), figures out (retimer.study.results); numpy, scipy and
statsmodels do the arithmetic (the `retimer[analysis]` extra).

The headline test of each comparison (the design the rows show); its interval and p always
come from that same test, and the other tests are printed beside it with their own:
- between participants (each rated one condition): Welch's t on per-participant means, with
  Hedges' g; the Mann-Whitney test and its Hodges-Lehmann shift beside;
- within, each condition rated once per person in one order: the paired t test on
  per-participant differences, with d_z; the Wilcoxon signed-rank test and its Hodges-Lehmann
  interval beside;
- within, with repeated units or conditions in several positions (a Latin square): the mixed
  model the design supports, `score ~ condition + position + (1 + condition | participant)`
  (retimer.study.mixed_model), tested with Satterthwaite's df; the paired tests on
  per-participant means beside.
With three or more conditions: an omnibus F test first (the mixed model's, or Welch's ANOVA
between), then every pair, with Holm's adjustment over the scale's pairs (each scale is its own
family). Every comparison is a later condition against an earlier one in the study's order.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from retimer.records.parse import number
from retimer.records.schema import StreamRecord
from retimer.study.analysis_data import AnalysisError, StudyData
from retimer.study.results import Comparison, ModelReport, Omnibus

if TYPE_CHECKING:
    from retimer.study.mixed_model import ScaleModel
    from retimer.study.ordinal import OrdinalCheck
    from retimer.study.slow_answers import SlowComparison, SlowShare

__all__ = ["Analysis", "Comparison", "Described", "Manipulation", "analyze", "require_extras"]

INSTALL = "pip install 'retimer[analysis]' (scipy and statsmodels)"


def require_extras() -> None:
    """One line naming the extra when scipy or statsmodels is missing."""
    try:
        import scipy.stats  # noqa: F401
        import statsmodels.miscmodels.ordinal_model  # noqa: F401
    except ImportError:
        raise AnalysisError(f"the analysis needs scipy and statsmodels: {INSTALL}") from None


@dataclass(frozen=True)
class Manipulation:
    """What the participants got against what the condition asked (medians of unit streams)."""

    condition: str
    streams: int
    target_ttft_ms: float | None
    ttft_ms: float | None
    target_tps: float | None
    tps: float | None


@dataclass(frozen=True)
class Described:
    condition: str
    scale: str
    ratings: int
    participants: int
    mean: float  # the mean of per-participant means: each person counts once
    sd: float
    ci: tuple[float, float]
    # within designs: the Cousineau-Morey interval, people's own levels taken out (what a
    # within-person comparison of the conditions sees); None between
    within_ci: tuple[float, float] | None = None


@dataclass
class Analysis:
    data: StudyData
    design: str
    manipulation: list[Manipulation]
    described: list[Described]
    comparisons: list[Comparison]
    notes: list[str] = field(default_factory=list)
    omnibus: list[Omnibus] = field(default_factory=list)
    models: list[ModelReport] = field(default_factory=list)
    ordinal: list[OrdinalCheck] = field(default_factory=list)
    slow_shares: list[SlowShare] = field(default_factory=list)
    slow_comparisons: list[SlowComparison] = field(default_factory=list)
    software: dict[str, str] = field(default_factory=dict)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _figure(record: StreamRecord, side: str, key: str) -> float | None:
    part = getattr(record, side)
    return None if part is None else number(getattr(part, key))


def _med(streams: Sequence[StreamRecord], side: str, key: str) -> float | None:
    return _median([v for s in streams if (v := _figure(s, side, key)) is not None])


def manipulation(data: StudyData) -> list[Manipulation]:
    out = []
    for c in data.conditions:
        mine = [s for s in data.streams if s.condition == c]
        out.append(Manipulation(c, len(mine), _med(mine, "target", "ttft_ms"),
                                _med(mine, "emitted", "ttft_ms"), _med(mine, "target", "tps"),
                                _med(mine, "emitted", "tps")))
    return out


def person_means(data: StudyData, scale: str) -> dict[str, dict[str, float]]:
    """condition -> participant -> their mean score on `scale`."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in data.rows:
        if scale in r.scores:
            sums[(r.condition, r.participant)].append(r.scores[scale])
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (condition, participant), values in sums.items():
        out[condition][participant] = sum(values) / len(values)
    return out


def _sd(values: Sequence[float]) -> float:
    """The sample SD (numpy's: statistics.stdev is exact, with fractions, and 100x slower)."""
    import numpy as np

    return float(np.std(values, ddof=1))


def _t_interval(values: Sequence[float]) -> tuple[float, float]:
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return (math.nan, math.nan)
    sd = _sd(values)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return (float(mean - half), float(mean + half))


def _within_intervals(data: StudyData, scale: str) -> dict[str, tuple[float, float]]:
    """Cousineau-Morey intervals: each person's condition means minus their own mean plus the
    grand mean, the t interval of those, widened by sqrt(k / (k - 1)) (Morey 2008), over the
    people who rated every condition."""
    means = person_means(data, scale)
    conditions = [c for c in data.conditions if means.get(c)]
    k = len(conditions)
    people = sorted(set.intersection(*(set(means[c]) for c in conditions))) if k else []
    if k < 2 or len(people) < 2:
        return {}
    own = {p: statistics.fmean(means[c][p] for c in conditions) for p in people}
    grand = statistics.fmean(own.values())
    out = {}
    for c in conditions:
        normed = [means[c][p] - own[p] + grand for p in people]
        low, high = _t_interval(normed)
        centre = statistics.fmean(normed)
        half = (high - low) / 2 * math.sqrt(k / (k - 1))
        out[c] = (centre - half, centre + half)
    return out


def describe(data: StudyData, scale: str) -> list[Described]:
    means = person_means(data, scale)
    within = _within_intervals(data, scale) if data.design == "within" else {}
    out = []
    for c in data.conditions:
        people = list(means.get(c, {}).values())
        ratings = sum(1 for r in data.rows if r.condition == c and scale in r.scores)
        if not people:
            continue
        mean = sum(people) / len(people)
        sd = _sd(people) if len(people) > 1 else math.nan
        out.append(Described(c, scale, ratings, len(people), mean, sd, _t_interval(people),
                             within.get(c)))
    return out


def differences(data: StudyData, scale: str, condition: str, reference: str) -> list[float]:
    """Per-participant differences of mean scores, for the people who rated both."""
    means = person_means(data, scale)
    mine, theirs = means.get(condition, {}), means.get(reference, {})
    return [mine[p] - theirs[p] for p in sorted(set(mine) & set(theirs))]


def _pairs(conditions: Sequence[str]) -> list[tuple[str, str]]:
    """(reference, condition) pairs: against the first condition, then the others' pairs."""
    return list(itertools.combinations(conditions, 2))


def _between(data: StudyData, scale: str) -> tuple[list[Comparison], Omnibus | None]:
    from retimer.study.between import welch_anova, welch_comparison

    means = person_means(data, scale)
    groups = {c: list(means.get(c, {}).values()) for c in data.conditions}
    found = []
    for ref, c in _pairs(data.conditions):
        if len(groups[c]) < 2 or len(groups[ref]) < 2:
            raise AnalysisError(f"{scale}: {c} or {ref} has fewer than 2 participants")
        found.append(welch_comparison(groups[c], groups[ref], scale, c, ref))
    omnibus = welch_anova(list(groups.values()), scale) if len(groups) > 2 else None
    return found, omnibus


def _paired(data: StudyData, scale: str) -> tuple[list[Comparison], Omnibus | None,
                                                  list[ModelReport]]:
    from retimer.study.mixed_model import fit_scale
    from retimer.study.paired import paired_comparison

    found = []
    for ref, c in _pairs(data.conditions):
        diffs = differences(data, scale, c, ref)
        if len(diffs) < 2:
            raise AnalysisError(f"{scale}: fewer than 2 participants rated both {c} and {ref}")
        found.append(paired_comparison(diffs, scale, c, ref))
    if len(data.conditions) < 3:
        return found, None, []
    model = fit_scale(data, scale, slopes=False)
    return found, _omnibus(model, scale), [model.report]


def _omnibus(model: ScaleModel, scale: str) -> Omnibus:
    rows = [model.row(c, model.conditions[0]) for c in model.conditions[1:]]
    f = model.fit.f_test(rows, df_cap=model.df_cap)
    return Omnibus(scale, "mixed model, Satterthwaite df", f.f, f.df1, f.df2, f.p)


def _mixed(data: StudyData, scale: str) -> tuple[list[Comparison], Omnibus | None,
                                                 list[ModelReport], list[str]]:
    from retimer.study.mixed_model import fit_pair, fit_scale
    from retimer.study.paired import d_z, paired_t, wilcoxon

    model = fit_scale(data, scale)
    per_pair = model.each_once and len(model.conditions) > 2  # see mixed_model: sphericity
    found = []
    for ref, c in _pairs(model.conditions):
        pair = fit_pair(data, scale, ref, c) if per_pair else model
        got = pair.fit.contrast(pair.row(c, ref), df_cap=pair.df_cap)
        diffs = differences(data, scale, c, ref)
        spread = len(diffs) >= 2 and statistics.pvariance(diffs) > 0
        companions = (paired_t(diffs), wilcoxon(diffs)) if spread else ()
        people = len({r.participant for r in data.rows
                      if scale in r.scores and r.condition in (c, ref)})
        found.append(Comparison(scale, c, ref, "mixed-model", got.estimate, got.ci, got.p,
                                people, d_z(diffs) if spread and len(diffs) >= 3 else None,
                                df=got.df,
                                companions=companions))
    omnibus = _omnibus(model, scale) if len(model.conditions) > 2 else None
    notes = list(model.notes)
    if per_pair:
        notes.append(f"{scale}: each condition was rated once per person, so each pair is "
                     "tested in the model of its own two conditions' ratings (no one residual "
                     "for every pair); the omnibus F uses the model of all of them")
    return found, omnibus, [model.report], notes


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values: the k-th smallest times (m - k + 1), never
    below the one before, at most 1 (statsmodels' multipletests gives the same, in 0.1 s a
    call)."""
    m = len(ps)
    out = [0.0] * m
    running = 0.0
    for k, i in enumerate(sorted(range(m), key=lambda j: ps[j])):
        running = max(running, min(1.0, (m - k) * ps[i]))
        out[i] = running
    return out


def _holm(found: list[Comparison]) -> list[Comparison]:
    """Each comparison's p adjusted over its scale's family."""
    from dataclasses import replace

    if len(found) < 2:
        return found
    adjusted = holm([c.p for c in found])
    return [replace(c, p_holm=a, family=len(found)) for c, a in zip(found, adjusted)]


def analyze(data: StudyData, *, checks: bool = True) -> Analysis:
    """The whole analysis of one study's rows; `checks=False` leaves out the ordinal check and
    the yes/no question (a simulation of the headline tests needs neither)."""
    require_extras()
    if not data.rows:
        raise AnalysisError(f"study {data.study}: no rated responses to analyse"
                            + (f" ({_left_out(data)})" if data.excluded else ""))
    if len(data.conditions) < 2:
        raise AnalysisError(f"study {data.study}: only {data.conditions[0]} has ratings left "
                            f"({_left_out(data) or 'nothing left out'}): nothing to compare")
    from retimer.study.ordinal import ordinal_check
    from retimer.study.slow_answers import slow_answers

    design = data.design
    analysis = Analysis(data, design, manipulation(data), [], [])
    for scale in data.scales:
        analysis.described += describe(data, scale)
        values = {r.scores[scale] for r in data.rows if scale in r.scores}
        if len(values) == 1:
            analysis.notes.append(f"{scale}: every rating is {values.pop():g}: nothing to test")
            continue
        models: list[ModelReport] = []
        try:
            if design == "between":
                found, omnibus = _between(data, scale)
            elif data.repeated:
                found, omnibus, models, notes = _mixed(data, scale)
                analysis.notes += notes
            else:
                found, omnibus, models = _paired(data, scale)
        except AnalysisError as e:
            analysis.notes.append(str(e))
            continue
        analysis.comparisons += _holm(found)
        analysis.models += models
        if omnibus is not None:
            analysis.omnibus.append(omnibus)
        if checks:
            ordinal, note = ordinal_check(data, scale)
            analysis.ordinal += ordinal
            if note:
                analysis.notes.append(note)
    if checks:
        analysis.slow_shares, analysis.slow_comparisons = slow_answers(data)
    analysis.software = software()
    return analysis


def software() -> dict[str, str]:
    """The versions a methods section names."""
    import numpy
    import scipy
    import statsmodels

    from retimer import __version__

    return {"retimer": __version__, "numpy": numpy.__version__, "scipy": scipy.__version__,
            "statsmodels": statsmodels.__version__}


def _left_out(data: StudyData) -> str:
    return "; ".join(f"{n} {reason}" for reason, n in data.excluded.most_common())
