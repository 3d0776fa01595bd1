"""Tests on per-participant differences (condition minus reference): the paired t test, and the
Wilcoxon signed-rank test with its Hodges-Lehmann estimate and interval. Pure (numpy, scipy).

Why per-participant differences: each person is their own control, and a person whose effect
differs from the others' (a random slope) is one difference, not many ratings: the test on
their mean differences is exact for a balanced within design, whatever the slopes.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

from retimer.study.analysis_data import AnalysisError
from retimer.study.results import Companion, Comparison, EffectSize

__all__ = ["d_z", "hodges_lehmann", "noncentral_interval", "paired_comparison", "paired_t",
           "wilcoxon"]

LEVEL = 0.95


def paired_t(diffs: Sequence[float]) -> Companion:
    """The one-sample t test of the differences: mean, its t interval, p, df."""
    from scipy import stats

    n = len(diffs)
    mean = statistics.fmean(diffs)
    if statistics.pvariance(diffs) == 0:
        raise AnalysisError(f"every participant's difference is {mean:+g}: no spread to test "
                            "against")
    result = stats.ttest_1samp(diffs, 0.0)
    low, high = result.confidence_interval(LEVEL)
    return Companion("paired-t", mean, (float(low), float(high)), float(result.pvalue), n - 1)


@functools.cache
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """How many of the 2^n sign patterns give each signed-rank sum 0..n(n+1)/2."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    return tuple(counts)


def hodges_lehmann(diffs: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """The median of the Walsh averages and its distribution-free interval (Hollander and
    Wolfe): the k-th smallest and largest Walsh averages, k from the signed-rank null
    distribution (exact up to 60 people, normal beyond). Ties make it approximate. With too few
    people for the level the interval is unbounded."""
    import numpy as np

    d = np.sort(np.asarray(diffs, dtype=float))
    n = len(d)
    walsh = np.sort(((d[:, None] + d[None, :]) / 2)[np.triu_indices(n)])
    estimate = float(np.median(walsh))
    alpha = 1 - LEVEL
    if n <= 60:
        counts = _signed_rank_counts(n)
        total = 2 ** n
        cumulative, k = 0, 0
        for c in counts:  # k: the largest with P(T <= k - 1) <= alpha / 2
            if (cumulative + c) / total > alpha / 2:
                break
            cumulative += c
            k += 1
    else:
        from scipy import stats

        mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        k = int(math.floor(mean - stats.norm.ppf(1 - alpha / 2) * sd))
    if k < 1:
        return estimate, (-math.inf, math.inf)
    return estimate, (float(walsh[k - 1]), float(walsh[len(walsh) - k]))


def wilcoxon(diffs: Sequence[float]) -> Companion:
    """The Wilcoxon signed-rank test's p with the Hodges-Lehmann estimate and interval."""
    from scipy import stats

    estimate, ci = hodges_lehmann(diffs)
    p = 1.0 if all(d == 0 for d in diffs) else float(stats.wilcoxon(diffs).pvalue)
    return Companion("wilcoxon", estimate, ci, p)


def noncentral_interval(t: float, df: float) -> tuple[float, float]:
    """The noncentrality parameters whose t distributions put `t` at their 97.5th and 2.5th
    percentiles: the interval of a standardized effect times its scale."""
    from scipy import optimize, stats

    alpha = 1 - LEVEL

    def edge(target: float) -> float:
        f = lambda ncp: float(stats.nct.sf(t, df, ncp)) - target  # noqa: E731
        span = 10 + 2 * abs(t)
        return float(optimize.brentq(f, t - span, t + span))

    return edge(alpha / 2), edge(1 - alpha / 2)


def d_z(diffs: Sequence[float]) -> EffectSize | None:
    """Cohen's d_z (mean difference over the differences' SD) with its noncentral-t interval."""
    n = len(diffs)
    sd = statistics.stdev(diffs)
    if sd == 0 or n < 3:
        return None
    value = statistics.fmean(diffs) / sd
    low, high = noncentral_interval(value * math.sqrt(n), n - 1)
    return EffectSize("d_z", value, (low / math.sqrt(n), high / math.sqrt(n)))


def paired_comparison(diffs: Sequence[float], scale: str, condition: str,
                      reference: str) -> Comparison:
    """The headline for each condition rated once per person: the paired t test (estimate,
    interval and p from it), with d_z; the Wilcoxon test and its Hodges-Lehmann interval beside."""
    t = paired_t(diffs)
    return Comparison(scale, condition, reference, "paired", t.estimate, t.ci, t.p, len(diffs),
                      d_z(diffs), df=t.df, companions=(wilcoxon(diffs),))
