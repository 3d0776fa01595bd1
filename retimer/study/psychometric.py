"""Intervals for a staircase's thresholds: a participant's by a parametric bootstrap of their
psychometric function, the group's as a median that keeps the participants whose threshold lies
beyond the levels. Pure (numpy, scipy).

Why a bootstrap: the delta method's interval of a logistic threshold is symmetric on the log
scale and assumes many answers near it; with 20-40 answers and a shallow function it covered
the truth 78-84 % of the time. Redrawing every answer from the fitted function at the stimuli
the participant got, refitting, and taking the 2.5th and 97.5th percentiles follows the
function's real uncertainty. The refits are Newton steps on all replicates at once (a few
milliseconds for 400; a GLM fit each would take seconds per participant).

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

__all__ = ["REPLICATES", "bootstrap_interval", "group_median"]

REPLICATES = 400
Array = NDArray[np.float64]


def _log_thresholds(x: Array, answers: NDArray[np.bool_], logit: float, sign: float,
                    start: tuple[float, float] = (0.0, 0.0)) -> Array:
    """Each replicate's (rows of `answers`) log threshold: -inf or +inf on the slowness axis
    (sign * log x) when it is beyond the stimuli (every answer slow, or none), the middle of the
    gap when the answers separate, else the logistic fit's (Newton's method)."""
    reps = answers.shape[0]
    s = sign * x  # larger: slower
    slow_any, slow_all = answers.any(axis=1), answers.all(axis=1)
    fine = np.where(answers, -np.inf, s).max(axis=1)  # the slowest "not slow"
    felt = np.where(answers, s, np.inf).min(axis=1)  # the fastest "slow"
    separated = slow_any & ~slow_all & (fine <= felt)
    out = np.full(reps, np.nan)
    out[~slow_any] = np.inf
    out[slow_all] = -np.inf
    out[separated] = (fine[separated] + felt[separated]) / 2
    todo = np.flatnonzero(np.isnan(out))
    if todo.size:
        y = answers[todo].astype(float)
        centre = float(s.mean())  # centred: the intercept stays near 0 whatever the units
        beta = np.tile(np.asarray(start, dtype=float), (todo.size, 1))
        design = np.c_[np.ones_like(s), s - centre]
        for _ in range(60):
            eta = np.clip(beta @ design.T, -30, 30)
            p = 1 / (1 + np.exp(-eta))
            w = p * (1 - p)
            grad = (y - p) @ design
            hess = np.einsum("rn,ni,nj->rij", w, design, design) + 1e-9 * np.eye(2)
            step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
            step *= np.minimum(1.0, 20.0 / np.maximum(np.abs(step).max(axis=1), 1e-12))[:, None]
            beta += step
            if np.abs(step).max() < 1e-8:
                break
        b0, b1 = beta[:, 0], beta[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            found = centre + (logit - b0) / b1
        low, high = s.min(), s.max()
        # a flat or reversed function says nothing of where the threshold is: the range's ends
        found = np.where(b1 > 0, found, np.where(y.mean(axis=1) >= 0.5, -np.inf, np.inf))
        out[todo] = np.clip(found, low - 10, high + 10)
    return out


def bootstrap_interval(stimuli: Sequence[float], b0: float, b1: float, target: float,
                       sign: float, seed: int, replicates: int = REPLICATES
                       ) -> tuple[float, float]:
    """The 95 % percentile interval of the threshold (in the stimulus's units) by redrawing the
    answers from the fitted function logit P(slow) = b0 + b1 log x at the same stimuli."""
    x = np.log(np.asarray(stimuli, dtype=float))
    rng = np.random.default_rng(seed)
    p = 1 / (1 + np.exp(-(b0 + b1 * x)))
    answers = rng.random((replicates, len(x))) < p
    logit = math.log(target / (1 - target))
    # the fitted function on the slowness axis, centred as _log_thresholds fits it
    s = sign * x
    slope = b1 * sign
    start = (b0 + slope * float(s.mean()), slope)
    found = np.sort(_log_thresholds(x, answers, logit, sign, start))
    low, high = np.quantile(found, [0.025, 0.975], method="inverted_cdf")
    ends = sign * np.array([low, high])  # back from the slowness axis to log x
    ends = np.clip(ends, x.min() - 10, x.max() + 10)
    a, b = sorted(float(math.exp(e)) for e in ends)
    return a, b


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

