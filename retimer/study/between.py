"""Tests between groups of participants (each rated one condition): Welch's t test with Hedges'
g, the Mann-Whitney test with its Hodges-Lehmann shift, Welch's ANOVA for three or more groups.
Pure (numpy, scipy). Each person counts once, by their mean rating.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from retimer.study.paired import LEVEL, noncentral_interval
from retimer.study.results import Companion, Comparison, EffectSize, Omnibus

__all__ = ["hedges_g", "mann_whitney", "welch_anova", "welch_comparison"]


def hedges_g(a: Sequence[float], b: Sequence[float]) -> EffectSize | None:
    """(mean a - mean b) over the pooled SD, small-sample corrected, with its noncentral-t
    interval (Hedges and Olkin)."""
    n1, n2 = len(a), len(b)
    df = n1 + n2 - 2
    pooled = math.sqrt(((n1 - 1) * statistics.variance(a) + (n2 - 1) * statistics.variance(b))
                       / df)
    if pooled == 0:
        return None
    d = (statistics.fmean(a) - statistics.fmean(b)) / pooled
    correction = 1 - 3 / (4 * df - 1)
    scale = math.sqrt(1 / n1 + 1 / n2)
    low, high = noncentral_interval(d / scale, df)
    return EffectSize("hedges_g", d * correction, (low * scale * correction, high * scale * correction))


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> Companion:
    """The Mann-Whitney test's p with the Hodges-Lehmann shift (the median of all differences
    a_i - b_j) and its interval (normal approximation of the U distribution; ties make it
    approximate)."""
    import numpy as np
    from scipy import stats

    diffs = np.sort(np.subtract.outer(np.asarray(a, float), np.asarray(b, float)).ravel())
    m, n = len(a), len(b)
    k = int(math.floor(m * n / 2 - stats.norm.ppf(0.5 + LEVEL / 2)
                       * math.sqrt(m * n * (m + n + 1) / 12)))
    ci = (float(diffs[k - 1]), float(diffs[len(diffs) - k])) if k >= 1 else (-math.inf, math.inf)
    p = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    return Companion("mann-whitney", float(np.median(diffs)), ci, p)


def welch_comparison(a: Sequence[float], b: Sequence[float], scale: str, condition: str,
                     reference: str) -> Comparison:
    """Condition (a) against reference (b): Welch's t (estimate, interval, p, df), Hedges' g,
    the Mann-Whitney test beside."""
    from scipy import stats

    result = stats.ttest_ind(a, b, equal_var=False)
    low, high = result.confidence_interval(LEVEL)
    diff = statistics.fmean(a) - statistics.fmean(b)
    return Comparison(scale, condition, reference, "welch", diff, (float(low), float(high)),
                      float(result.pvalue), len(a) + len(b), hedges_g(a, b),
                      df=float(result.df), companions=(mann_whitney(a, b),))


def welch_anova(groups: Sequence[Sequence[float]], scale: str) -> Omnibus | None:
    """Welch's heteroscedastic one-way ANOVA (Welch 1951): F on (k - 1, df2); None when a
    group has no spread (its weight would be infinite)."""
    from scipy import stats

    if any(len(g) < 2 or statistics.variance(g) == 0 for g in groups):
        return None
    k = len(groups)
    n = [len(g) for g in groups]
    w = [ni / statistics.variance(g) for ni, g in zip(n, groups)]
    total = sum(w)
    lam = sum((1 - wi / total) ** 2 / (ni - 1) for wi, ni in zip(w, n))
    df2 = (k * k - 1) / (3 * lam)
    result = stats.f_oneway(*groups, equal_var=False)
    return Omnibus(scale, "Welch's ANOVA", float(result.statistic), k - 1, df2,
                   float(result.pvalue))
