"""Intervals for a staircase's thresholds: a participant's by the profile of the penalised
(Firth) likelihood of their psychometric function, the group's as a median that keeps the
participants whose threshold lies beyond the levels. Pure (numpy, scipy).

Why a penalised profile likelihood: a threshold is a ratio of the logistic fit's coefficients,
and with 20-40 answers from a staircase the maximum-likelihood slope is biased steep (a median
3.8 where the truth was 2.9: docs/study-calibration.md). Intervals built on that fit run
narrow: the delta method's covered the truth 78-84 % of the time for shallow functions, a
parametric bootstrap from the fit 88-90 %. The likelihood ratio of the threshold, each value's
likelihood maximised over the slope, with Firth's penalty (half the log-determinant of the
Fisher information: Jeffreys' prior, which removes the first-order bias and keeps separated
answers finite; Heinze & Schemper 2002, R's logistf) covered 94-95 %, and needs no random
draws. Where the data do not bound the threshold on a side, the interval says so (0 or
infinity) rather than inventing an end.

Why a median: a participant who called every level slow, or none, has a threshold beyond the
levels, not a missing one. Leaving them out biases the group towards the middle of the range
(4 of 12 above the top level gave a geometric mean 30 % too low). Placed at the range's ends,
they still count in a median, and its distribution-free interval (order statistics) holds as
long as the interval's ends are not theirs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["CHI2_95", "group_median", "profile_interval"]

CHI2_95 = 3.841458820694124  # the 95 % point of chi-squared with 1 df
REACH = 1.5  # log units beyond the stimuli the threshold is looked for (a factor of 4.5)
THRESHOLD_GRID = 241  # candidate thresholds, from REACH below the stimuli to REACH above
SLOPES = np.exp(np.linspace(math.log(0.02), math.log(80.0), 160))  # per log unit, on the slowness axis
Array = NDArray[np.float64]


def profile_interval(stimuli: Sequence[float], slow: Sequence[bool], target: float, sign: float,
                     ) -> tuple[float, float]:
    """The 95 % interval of the stimulus (in its units) felt slow with probability `target`:
    every threshold whose penalised profile likelihood is within CHI2_95 / 2 of the best.
    `sign`: 1 when a larger stimulus is slower (TTFT), -1 when smaller is (a rate). An end the
    answers do not bound is 0 or infinity."""
    s = sign * np.log(np.asarray(stimuli, dtype=float))  # larger: slower
    y = np.asarray(slow, dtype=float)
    logit = math.log(target / (1 - target))
    grid = np.linspace(s.min() - REACH, s.max() + REACH, THRESHOLD_GRID)
    best = np.empty(len(grid))
    rows = max(1, 2_000_000 // (len(SLOPES) * len(s)))  # a bounded block of the grid at a time
    for i in range(0, len(grid), rows):
        theta = grid[i:i + rows]
        # logit P(slow) = slope * (s - theta) + logit(target): theta is the threshold
        eta = np.clip(SLOPES[None, :, None] * (s[None, None, :] - theta[:, None, None]) + logit,
                      -30.0, 30.0)
        p = 1 / (1 + np.exp(-eta))
        w = p * (1 - p)
        loglik = (y * eta - np.logaddexp(0.0, eta)).sum(axis=-1)
        # Firth's penalty: the Fisher information of (intercept, slope) with the design [1, s]
        i00, i01, i11 = w.sum(axis=-1), (w * s).sum(axis=-1), (w * s * s).sum(axis=-1)
        det = np.maximum(i00 * i11 - i01 * i01, 1e-300)
        best[i:i + rows] = (loglik + 0.5 * np.log(det)).max(axis=1)
    inside = np.flatnonzero(2 * (best.max() - best) <= CHI2_95)
    first, last = int(inside[0]), int(inside[-1])
    step = grid[1] - grid[0]  # an end is rounded outwards, to the grid point past it
    low = -math.inf if first == 0 else float(grid[first] - step)
    high = math.inf if last == len(grid) - 1 else float(grid[last] + step)
    ends = sorted(sign * e for e in (low, high))  # back from the slowness axis to log x
    return math.exp(ends[0]), math.exp(ends[1])


def group_median(values: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """The median of values on the slowness axis (-inf and +inf for the participants beyond
    the levels) and its distribution-free 95 % interval: the k-th smallest and largest, k from
    the binomial(n, 1/2); None when n is too small for one (n < 6). An end may be infinite: the
    interval reaches beyond the levels."""
    from scipy import stats

    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    with np.errstate(invalid="ignore"):  # -inf and +inf in the middle: no median (nan)
        median = float(np.median(v))
    k = int(stats.binom.ppf(0.025, n, 0.5))
    if stats.binom.cdf(k, n, 0.5) > 0.025:
        k -= 1
    # P(X <= k) <= 2.5 %: [v_(k+1), v_(n-k)] (1-based) covers the median at least 95 %
    if k < 0:
        return median, None
    return median, (float(v[k]), float(v[n - k - 1]))

