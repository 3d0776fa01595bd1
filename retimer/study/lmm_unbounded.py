"""The maximal mixed model fitted with no sign constraint on its variances, for its test when
the constrained fit puts a slope's variance at zero. Pure: arrays in, a fit out.

Why: with people who do not differ in their effect, the constrained REML fit of
`(1 + condition | participant)` is singular about half the time; dropping the slope then tests
against the pooled residual, and keeping it tests against the spread of the people's effects,
so the test takes the larger of two estimates of one error term and calls 3.3-3.8 % of null
studies of 12 people with 8 units a condition (docs/study-calibration.md), not 5 %. Letting
the slope's variance go below zero (SAS's NOBOUND) makes the estimate the one the
repeated-measures ANOVA uses, whose test keeps its level in a balanced design whether people
differ or not; where the constrained fit is not singular the two fits are one. The model is
the maximal model still: only its variances' bound is lifted, while every group's covariance
(sigma^2 (I + Z S Z')) stays positive definite.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from retimer.study.derivatives import hessian, jacobian
from retimer.study.lmm import GroupSums, MixedFit, fixed_solution, profiled_value, simplex_ftol

__all__ = ["UnboundedCriterion", "fit_unbounded"]

Array = NDArray[np.float64]


class UnboundedCriterion:
    """The REML criterion over S = Sigma / sigma^2 (its lower triangle, `s`), any symmetric S
    whose groups' covariances are positive definite."""

    def __init__(self, sums: GroupSums) -> None:
        self.sums = sums
        self.index = np.tril_indices(sums.q)

    def matrix(self, s: Array) -> Array:
        m = np.zeros((self.sums.q, self.sums.q))
        m[self.index] = s
        return m + np.tril(m, -1).T

    def _solve(self, s: Array) -> tuple[float, float, Array, Array]:
        """(log|H| + log|X'H^-1 X|, r^2, beta, X'H^-1 X): H^-1 = I - Z S (I + Z'Z S)^-1 Z'
        per group, and |H| = |I + Z'Z S|, whose eigenvalues (those of I + R S R', Z'Z = R'R)
        are all positive exactly when H is positive definite."""
        sums, m = self.sums, self.matrix(s)
        b = np.eye(sums.q) + sums.ztz @ m
        with np.errstate(invalid="ignore", over="ignore"):
            eig = np.linalg.eigvals(b)
        if not np.all(np.isfinite(eig)) or float(eig.real.min()) <= 1e-10:
            raise np.linalg.LinAlgError("a group's covariance is not positive definite")
        logdet = float(np.log(eig.real).sum())
        return fixed_solution(logdet, *sums.inner(m @ np.linalg.inv(b)))

    def profiled(self, s: Array) -> float:
        return profiled_value(self._solve, s, self.sums.n - self.sums.p)

    def full(self, varpar: Array) -> float:
        """The unprofiled criterion in (s, sigma)."""
        s, sigma = varpar[:-1], float(varpar[-1])
        try:
            logdets, rss, _, _ = self._solve(s)
        except np.linalg.LinAlgError:
            return math.inf
        dof = self.sums.n - self.sums.p
        return logdets + dof * math.log(2.0 * math.pi * sigma ** 2) + rss / sigma ** 2

    def vcov(self, varpar: Array) -> Array:
        _, _, _, xhx = self._solve(varpar[:-1])
        return float(varpar[-1]) ** 2 * np.linalg.inv(xhx)


def fit_unbounded(constrained: MixedFit, y: Array, x: Array, z: Array,
                  groups: NDArray[np.int64]) -> MixedFit | None:
    """The model of `constrained` (its fixed and random terms) refitted with no bound on its
    variances, starting from the constrained optimum; None when no better optimum is found
    inside the region where every group's covariance is positive definite (the caller keeps
    its own way)."""
    from scipy import optimize

    y, x, z = (np.asarray(a, dtype=float) for a in (y, x, z))
    sums = GroupSums(y, x, z, np.asarray(groups))
    crit = UnboundedCriterion(sums)
    start = (constrained.covariance / constrained.sigma ** 2)[crit.index]
    best = optimize.minimize(crit.profiled, start, method="Nelder-Mead",
                             options={"xatol": 1e-9, "fatol": simplex_ftol(constrained.criterion),
                                      "maxiter": 20000,
                                      "initial_simplex": _simplex(start)})
    s = np.asarray(best.x)
    value = crit.profiled(s)
    if not math.isfinite(value) or value > constrained.criterion + 1e-9:
        return None
    _, rss, beta, _ = crit._solve(s)
    sigma = math.sqrt(rss / (sums.n - sums.p))
    varpar = np.r_[s, sigma]
    # the df's derivatives step around the optimum: one that lies so near the edge of the
    # positive-definite region that a step leaves it cannot be tested this way
    hess = hessian(crit.full, varpar)
    if not np.all(np.isfinite(hess)):
        return None
    try:
        cov_varpar = 2.0 * np.linalg.inv(hess)
        if not (best.success and np.linalg.eigvalsh(hess).min() > 0):
            return None
        jac = jacobian(crit.vcov, varpar)
    except np.linalg.LinAlgError:
        return None
    return MixedFit(constrained.names, constrained.random, "unstructured", beta,
                    crit.vcov(varpar), sigma, s, value, True, False, sums.n, sums.groups,
                    jac, cov_varpar, relative=crit.matrix(s))


def _simplex(start: Array) -> Array:
    """A first simplex around `start` whose steps reach below zero (the constrained optimum sits
    on the bound the search is to cross)."""
    k = len(start)
    points = [start]
    for i in range(k):
        point = start.copy()
        point[i] -= max(0.05, 0.5 * abs(start[i]))
        points.append(point)
    return np.asarray(points)
