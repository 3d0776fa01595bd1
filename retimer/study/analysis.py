"""The statistics of a study: did the conditions feel different, by how much, and is it real.
Records in (retimer.study.analysis_data), figures out; scipy and statsmodels do the statistics
(the `retimer[analysis]` extra), nothing is hand-made.

Which test (the design the rows show):
- between participants (each rated one condition): per-participant means; Welch's t (the
  estimate, its 95 % interval and p) with Hedges' g, and the Mann-Whitney rank test's p;
- within participants, each condition rated once per person in one order: the paired
  difference of per-participant means (its t interval), the Wilcoxon signed-rank test's p, and
  Cohen's d_z;
- within, with repeated units or conditions in several positions (a Latin square): a linear
  mixed model, score ~ condition + position + (1 | participant), its Wald interval and p; the
  Wilcoxon test on per-participant means alongside.
Every comparison is a condition against the reference (the first condition), per scale.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from retimer.records.parse import number
from retimer.records.schema import StreamRecord
from retimer.study.analysis_data import AnalysisError, StudyData

__all__ = ["Analysis", "Comparison", "Described", "Manipulation", "analyze", "require_extras"]

INSTALL = "pip install 'retimer[analysis]' (scipy and statsmodels)"
POSITIONS_AS_FACTOR = 12  # more distinct positions than this: position is a linear trend


def require_extras() -> None:
    """One line naming the extra when scipy or statsmodels is missing."""
    try:
        import scipy.stats  # noqa: F401
        import statsmodels.formula.api  # noqa: F401
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


@dataclass(frozen=True)
class Comparison:
    scale: str
    condition: str
    reference: str
    test: str  # welch | paired | mixed-model
    estimate: float  # condition minus reference, in rating points
    ci: tuple[float, float]
    p: float
    participants: int
    effect_size: tuple[str, float] | None = None
    also: dict[str, float] = field(default_factory=dict)  # the companion test's p


@dataclass
class Analysis:
    data: StudyData
    design: str
    manipulation: list[Manipulation]
    described: list[Described]
    comparisons: list[Comparison]
    notes: list[str] = field(default_factory=list)


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


def _means(data: StudyData, scale: str) -> dict[str, dict[str, float]]:
    """condition -> participant -> their mean score on `scale`."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in data.rows:
        if scale in r.scores:
            sums[(r.condition, r.participant)].append(r.scores[scale])
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (condition, participant), values in sums.items():
        out[condition][participant] = sum(values) / len(values)
    return out


def _t_interval(values: Sequence[float]) -> tuple[float, float]:
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return (math.nan, math.nan)
    sd = statistics.stdev(values)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return (float(mean - half), float(mean + half))


def describe(data: StudyData, scale: str) -> list[Described]:
    means = _means(data, scale)
    out = []
    for c in data.conditions:
        people = list(means.get(c, {}).values())
        ratings = sum(1 for r in data.rows if r.condition == c and scale in r.scores)
        if not people:
            continue
        mean = sum(people) / len(people)
        sd = statistics.stdev(people) if len(people) > 1 else math.nan
        out.append(Described(c, scale, ratings, len(people), mean, sd, _t_interval(people)))
    return out


def _welch(data: StudyData, scale: str, condition: str) -> Comparison:
    from scipy import stats

    means = _means(data, scale)
    ref = data.conditions[0]
    a, b = list(means.get(condition, {}).values()), list(means.get(ref, {}).values())
    if len(a) < 2 or len(b) < 2:
        raise AnalysisError(f"{scale}: {condition} or {ref} has fewer than 2 participants")
    result = stats.ttest_ind(a, b, equal_var=False)
    low, high = result.confidence_interval(0.95)
    pooled = math.sqrt(((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b))
                       / (len(a) + len(b) - 2))
    diff = statistics.fmean(a) - statistics.fmean(b)
    g = diff / pooled * (1 - 3 / (4 * (len(a) + len(b)) - 9)) if pooled > 0 else math.nan
    rank = stats.mannwhitneyu(a, b, alternative="two-sided")
    return Comparison(scale, condition, ref, "welch", diff, (float(low), float(high)),
                      float(result.pvalue), len(a) + len(b), ("hedges_g", g),
                      {"mann_whitney_p": float(rank.pvalue)})


def _paired(data: StudyData, scale: str, condition: str) -> tuple[list[float], float | None]:
    """Per-participant differences (condition minus reference), and the Wilcoxon p."""
    from scipy import stats

    means = _means(data, scale)
    ref = data.conditions[0]
    mine, theirs = means.get(condition, {}), means.get(ref, {})
    diffs = [mine[p] - theirs[p] for p in sorted(set(mine) & set(theirs))]
    if len(diffs) < 2:
        raise AnalysisError(f"{scale}: fewer than 2 participants rated both {condition} and {ref}")
    p = None if all(d == 0 for d in diffs) else float(stats.wilcoxon(diffs).pvalue)
    return diffs, p


def _paired_comparison(data: StudyData, scale: str, condition: str) -> Comparison:
    diffs, p = _paired(data, scale, condition)
    mean = statistics.fmean(diffs)
    sd = statistics.stdev(diffs)
    return Comparison(scale, condition, data.conditions[0], "paired", mean, _t_interval(diffs),
                      1.0 if p is None else p, len(diffs),
                      ("cohens_dz", mean / sd if sd > 0 else math.nan))


def _mixed(data: StudyData, scale: str) -> tuple[list[Comparison], list[str]]:
    """score ~ condition + position + (1 | participant), one fit for all conditions."""
    import pandas as pd
    import statsmodels.formula.api as smf

    code = {c: f"c{i}" for i, c in enumerate(data.conditions)}
    rows = [r for r in data.rows if scale in r.scores]
    frame = pd.DataFrame({"score": [r.scores[scale] for r in rows],
                          "condition": [code[r.condition] for r in rows],
                          "position": [r.position for r in rows],
                          "participant": [r.participant for r in rows]})
    if frame["participant"].nunique() < 3:
        raise AnalysisError(f"{scale}: a mixed model needs at least 3 participants")
    factor = frame["position"].nunique() <= POSITIONS_AS_FACTOR
    position = " + C(position)" if factor and frame["position"].nunique() > 1 else \
        (" + position" if frame["position"].nunique() > 1 else "")
    formula = f"score ~ C(condition, Treatment(reference='c0')){position}"
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit = smf.mixedlm(formula, frame, groups=frame["participant"]).fit(reml=True)
        except (ValueError, ArithmeticError) as e:  # numpy's LinAlgError is a ValueError
            raise AnalysisError(f"{scale}: the mixed model could not be fitted ({e})") from None
    if any("converge" in str(w.message).lower() for w in caught) or not fit.converged:
        notes.append(f"{scale}: the mixed model did not fully converge; read its interval with care")
    intervals = fit.conf_int(0.05)
    out = []
    for c in data.conditions[1:]:
        term = f"C(condition, Treatment(reference='c0'))[T.{code[c]}]"
        low, high = intervals.loc[term]
        _, wilcoxon_p = _paired(data, scale, c) if _pairs(data, scale, c) else ([], None)
        also = {"wilcoxon_p": wilcoxon_p} if wilcoxon_p is not None else {}
        people = frame[frame["condition"].isin(["c0", code[c]])]["participant"].nunique()
        out.append(Comparison(scale, c, data.conditions[0], "mixed-model",
                              float(fit.params[term]), (float(low), float(high)),
                              float(fit.pvalues[term]), int(people), None, also))
    return out, notes


def _pairs(data: StudyData, scale: str, condition: str) -> bool:
    means = _means(data, scale)
    return len(set(means.get(condition, {})) & set(means.get(data.conditions[0], {}))) >= 2


def analyze(data: StudyData) -> Analysis:
    """The whole analysis of one study's rows."""
    require_extras()
    if not data.rows:
        raise AnalysisError(f"study {data.study}: no rated responses to analyse"
                            + (f" ({_left_out(data)})" if data.excluded else ""))
    if len(data.conditions) < 2:
        raise AnalysisError(f"study {data.study}: only {data.conditions[0]} has ratings left "
                            f"({_left_out(data) or 'nothing left out'}): nothing to compare")
    design = data.design
    analysis = Analysis(data, design, manipulation(data), [], [])
    for scale in data.scales:
        analysis.described += describe(data, scale)
        values = {r.scores[scale] for r in data.rows if scale in r.scores}
        if len(values) == 1:
            analysis.notes.append(f"{scale}: every rating is {values.pop():g}: nothing to test")
            continue
        try:
            if design == "between":
                found = [_welch(data, scale, c) for c in data.conditions[1:]]
            elif data.repeated:
                found, notes = _mixed(data, scale)
                analysis.notes += notes
            else:
                found = [_paired_comparison(data, scale, c) for c in data.conditions[1:]]
        except AnalysisError as e:
            analysis.notes.append(str(e))
            continue
        analysis.comparisons += found
    return analysis


def _left_out(data: StudyData) -> str:
    return "; ".join(f"{n} {reason}" for reason, n in data.excluded.most_common())
