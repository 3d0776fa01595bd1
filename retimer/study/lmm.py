"""A linear mixed model with per-participant random intercepts and slopes, fitted by REML, with
Satterthwaite's degrees of freedom for its tests. Pure: arrays in, a fit out (numpy, scipy).

Why our own: statsmodels' MixedLM tests with a Wald z and no small-sample degrees of freedom,
which calls an effect in 11-15 % of null studies of 8-24 people whose effect varies from
person to person. This is the model lme4 fits and lmerTest tests (Bates et al. 2015, J. Stat.
Softw. 67(1); Kuznetsova et al. 2017, J. Stat. Softw. 82(13)): the REML criterion profiled
over the residual variance, the random effects' covariance as sigma^2 Lambda Lambda' with
Lambda lower triangular (`theta` its entries), and for a contrast L the Satterthwaite df
2 (L C L')^2 / (g' A g), C the fixed effects' covariance, g its gradient and A the inverse of
half the criterion's Hessian, both over (theta, sigma). tests/unit/test_study_lmm.py holds it to
lme4's `sleepstudy` fit.

Every group's rows enter only through their sums (Z'Z, Z'X, Z'y), so one evaluation of the
criterion is a handful of batched q x q solves, whatever the number of ratings.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from retimer.study.derivatives import hessian_of_gradient, jacobian

__all__ = ["Contrast", "FTest", "GroupSums", "MixedFit", "RemlCriterion", "fit_mixed", "fixed_solution",
           "profiled_value", "simplex_ftol"]

Structure = Literal["unstructured", "diagonal"]
SINGULAR = 1e-4  # a relative SD (theta's diagonal) below this is at its boundary: lme4's rule
# the simplex's criterion tolerance, relative to the criterion's size: the REML criterion of a
# few hundred ratings is ~3,000 and its rounding noise ~1e-10, so an absolute 1e-10 (or 1e-11)
# is never met and the search runs to its iteration cap, then reports no convergence
SIMPLEX_FTOL = 1e-12
Array = NDArray[np.float64]


@dataclass(frozen=True)
class Contrast:
    """One linear combination of the fixed effects, tested with Satterthwaite's df."""

    estimate: float
    se: float
    df: float
    t: float
    p: float
    ci: tuple[float, float]


@dataclass(frozen=True)
class FTest:
    """A multi-row contrast (an omnibus test): F on (df1, df2), df2 by Satterthwaite."""

    f: float
    df1: int
    df2: float
    p: float


@functools.cache
def _theta_index(q: int, structure: Structure) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Where theta's entries go in Lambda: lme4's order, column by column."""
    if structure == "diagonal":
        return np.arange(q), np.arange(q)
    rows, cols = np.tril_indices(q)
    order = np.lexsort((rows, cols))
    return rows[order], cols[order]


def _lambda(theta: Array, q: int, structure: Structure) -> Array:
    lam = np.zeros((q, q))
    lam[_theta_index(q, structure)] = theta
    return lam


class GroupSums:
    """The data's sufficient statistics per group, for one evaluation after another."""

    def __init__(self, y: Array, x: Array, z: Array, groups: NDArray[np.int64]) -> None:
        order = np.argsort(groups, kind="stable")
        y, x, z, groups = y[order], x[order], z[order], groups[order]
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        self.n, self.p = x.shape
        self.q = z.shape[1]
        self.groups = len(starts)
        self.ztz = np.add.reduceat(z[:, :, None] * z[:, None, :], starts, axis=0)
        self.ztx = np.add.reduceat(z[:, :, None] * x[:, None, :], starts, axis=0)
        self.zty = np.add.reduceat(z * y[:, None], starts, axis=0)
        self.xtx = x.T @ x
        self.xty = x.T @ y
        self.yty = float(y @ y)

    def parts(self, lam: Array) -> tuple[float, Array, Array, float, Array]:
        """(log|H|, X'H^-1 X, X'H^-1 y, y'H^-1 y, T) for H = I + Z Lambda Lambda' Z', with
        T = Lambda A^-1 Lambda' per group (A = Lambda' Z'Z Lambda + I): by Woodbury,
        H^-1 = I - Z T Z' within a group."""
        a = lam.T @ self.ztz @ lam + np.eye(self.q)
        with np.errstate(invalid="ignore", over="ignore"):  # a wild theta: refused below
            sign, logdets = np.linalg.slogdet(a)
        if not np.all(sign > 0) or not np.all(np.isfinite(logdets)):
            raise np.linalg.LinAlgError("its variances grew without bound")
        t = lam @ np.linalg.inv(a) @ lam.T
        xhx, xhy, yhy = self.inner(t)
        return float(logdets.sum()), xhx, xhy, yhy, t

    def inner(self, t: Array) -> tuple[Array, Array, float]:
        """(X'H^-1 X, X'H^-1 y, y'H^-1 y) for H^-1 = I - Z T Z' within each group."""
        tzx = t @ self.ztx
        tzy = np.einsum("gqr,gr->gq", t, self.zty)
        xhx = self.xtx - np.einsum("gqi,gqj->ij", self.ztx, tzx)
        xhy = self.xty - np.einsum("gqi,gq->i", self.ztx, tzy)
        yhy = self.yty - float(np.einsum("gq,gq->", self.zty, tzy))
        return xhx, xhy, yhy


def fixed_solution(logdet_h: float, xhx: Array, xhy: Array, yhy: float
                   ) -> tuple[float, float, Array, Array]:
    """(log|H| + log|X'H^-1 X|, r^2, beta, X'H^-1 X) from H's parts (LinAlgError when
    X'H^-1 X is not positive definite)."""
    with np.errstate(invalid="ignore", over="ignore"):
        sign, logdet_x = np.linalg.slogdet(xhx)
    if not sign > 0 or not np.isfinite(logdet_x):
        raise np.linalg.LinAlgError("X'H^-1 X is not positive definite")
    beta = np.linalg.solve(xhx, xhy)
    return logdet_h + float(logdet_x), max(yhy - float(beta @ xhy), 1e-300), beta, xhx


def profiled_value(solve: Callable[[Array], tuple[float, float, Array, Array]], at: Array,
                   dof: int) -> float:
    """The REML criterion profiled over sigma at `at` (inf where `solve` cannot go)."""
    try:
        logdets, rss, _, _ = solve(at)
    except np.linalg.LinAlgError:
        return math.inf
    return logdets + dof * (1.0 + math.log(2.0 * math.pi * rss / dof))


class RemlCriterion:
    """The REML criterion (-2 log restricted likelihood) as a function of theta (profiled) or
    of (theta, sigma), and the fixed effects' covariance as a function of (theta, sigma)."""

    def __init__(self, sums: GroupSums, structure: Structure) -> None:
        self.sums = sums
        self.structure = structure
        self.index = _theta_index(sums.q, structure)
        self.diagonal = self.index[0] == self.index[1]

    def lam(self, theta: Array) -> Array:
        return _lambda(theta, self.sums.q, self.structure)

    def _solve(self, theta: Array) -> tuple[float, float, Array, Array]:
        return fixed_solution(*self.sums.parts(self.lam(theta))[:4])

    def profiled(self, theta: Array) -> float:
        return profiled_value(self._solve, theta, self.sums.n - self.sums.p)

    def _gradient_parts(self, theta: Array) -> tuple[float, float, Array, Array, Array]:
        """(log|H| + log|X'H^-1 X|, r^2, tr-term matrix, y'P..P y matrix, Lambda) at theta: the
        derivative of either criterion in theta_k is 2 [(A - B / s2) Lambda] at k's place, A
        the sum of Z_g' P_gg Z_g (P the REML projection: only its diagonal blocks enter), B the
        outer product of Z'P y, s2 the residual variance (sigma^2, or r^2 / (n - p) profiled)."""
        s = self.sums
        lam = self.lam(theta)
        logdet, xhx, xhy, yhy, t = s.parts(lam)
        with np.errstate(invalid="ignore", over="ignore"):
            sign, logdet_x = np.linalg.slogdet(xhx)
        if not sign > 0 or not np.isfinite(logdet_x):
            raise np.linalg.LinAlgError("X'H^-1 X is not positive definite")
        c = np.linalg.inv(xhx)
        beta = c @ xhy
        rss = max(yhy - float(beta @ xhy), 1e-300)
        ztz_t = s.ztz @ t
        zhz = s.ztz - ztz_t @ s.ztz
        zhx = s.ztx - ztz_t @ s.ztx
        zhy = s.zty - np.einsum("gqr,gr->gq", ztz_t, s.zty)
        proj = zhz.sum(axis=0) - np.einsum("gqi,ij,grj->qr", zhx, c, zhx)
        v = zhy - zhx @ beta
        return logdet + float(logdet_x), rss, proj, v.T @ v, lam

    def profiled_and_gradient(self, theta: Array) -> tuple[float, Array]:
        """The profiled criterion and its exact gradient: d/dtheta_k = tr(P dH) - (n - p)
        y'P dH P y / r^2, with dH = Z (E_k Lambda' + Lambda E_k') Z'."""
        try:
            logdets, rss, proj, outer, lam = self._gradient_parts(theta)
        except np.linalg.LinAlgError:
            return math.inf, np.zeros_like(theta)
        dof = self.sums.n - self.sums.p
        value = logdets + dof * (1.0 + math.log(2.0 * math.pi * rss / dof))
        grad = 2.0 * ((proj - dof / rss * outer) @ lam)
        return value, grad[self.index]

    def full_gradient(self, varpar: Array) -> Array:
        """The gradient of the unprofiled criterion in (theta, sigma), exact."""
        theta, sigma = varpar[:-1], float(varpar[-1])
        _, rss, proj, outer, lam = self._gradient_parts(theta)
        dof = self.sums.n - self.sums.p
        grad = 2.0 * ((proj - outer / sigma ** 2) @ lam)
        return np.r_[grad[self.index], 2.0 * dof / sigma - 2.0 * rss / sigma ** 3]

    def full(self, varpar: Array) -> float:
        """The unprofiled criterion in (theta, sigma): what `full_gradient` differentiates (the
        tests hold the one to the other)."""
        theta, sigma = varpar[:-1], varpar[-1]
        logdets, rss, _, _ = self._solve(theta)
        dof = self.sums.n - self.sums.p
        return logdets + dof * math.log(2.0 * math.pi * sigma ** 2) + rss / sigma ** 2

    def vcov(self, varpar: Array) -> Array:
        theta, sigma = varpar[:-1], varpar[-1]
        _, _, _, xhx = self._solve(theta)
        return sigma ** 2 * np.linalg.inv(xhx)


@dataclass(frozen=True)
class MixedFit:
    """A fitted model: the fixed effects (`names`, `beta`, `vcov`), the random effects' SDs and
    correlations, the residual SD, and Satterthwaite tests of contrasts."""

    names: tuple[str, ...]
    random: tuple[str, ...]
    structure: Structure
    beta: Array
    vcov: Array
    sigma: float
    theta: Array
    criterion: float  # the REML criterion at the optimum (lme4's "REML criterion")
    converged: bool
    singular: bool  # a random effect's variance (or a correlation) at its boundary
    observations: int
    groups: int
    _jac: Array  # d vcov / d (theta, sigma): (k, p, p)
    _cov_varpar: Array  # asymptotic covariance of (theta, sigma)
    # fitted with no sign constraint on the variances (retimer.study.lmm_unbounded): the random
    # effects' covariance over sigma^2, which may have a variance below zero; theta is then its
    # lower triangle
    relative: Array | None = None

    @property
    def covariance(self) -> Array:
        """The random effects' covariance matrix (q x q), in the data's units squared."""
        if self.relative is not None:
            return self.sigma ** 2 * self.relative
        lam = _lambda(self.theta, len(self.random), self.structure)
        return self.sigma ** 2 * lam @ lam.T

    @property
    def sds(self) -> dict[str, float]:
        """Each random effect's SD (0 for a variance estimated below zero), and the residual's."""
        sd = np.sqrt(np.maximum(np.diag(self.covariance), 0.0))
        return {**{name: float(v) for name, v in zip(self.random, sd)}, "residual": self.sigma}

    def _df(self, row: Array) -> float:
        var = float(row @ self.vcov @ row)
        grad = np.einsum("kij,i,j->k", self._jac, row, row)
        spread = float(grad @ self._cov_varpar @ grad)
        if spread <= 0 or not math.isfinite(spread):
            return math.inf
        return 2.0 * var ** 2 / spread

    def contrast(self, row: ArrayLike, level: float = 0.95,
                 df_cap: float | None = None) -> Contrast:
        """`row` @ beta with its t test; `df_cap` bounds Satterthwaite's df (see
        retimer.study.mixed_model: a person variance at zero)."""
        from scipy import stats

        vector = np.asarray(row, dtype=float)
        estimate = float(vector @ self.beta)
        se = math.sqrt(float(vector @ self.vcov @ vector))
        df = self._df(vector) if df_cap is None else min(self._df(vector), df_cap)
        t = estimate / se if se > 0 else math.nan
        p = float(2 * stats.t.sf(abs(t), df)) if math.isfinite(t) else math.nan
        half = float(stats.t.ppf(0.5 + level / 2, df)) * se
        return Contrast(estimate, se, df, t, p, (estimate - half, estimate + half))

    def f_test(self, rows: ArrayLike, df_cap: float | None = None) -> FTest:
        """Several rows at once (lmerTest's `contestMD`): F from the contrasts' covariance,
        df2 from each eigen-direction's Satterthwaite df."""
        from scipy import stats

        matrix = np.atleast_2d(np.asarray(rows, dtype=float))
        cov = matrix @ self.vcov @ matrix.T
        values, vectors = np.linalg.eigh(cov)
        keep = values > 1e-12 * max(float(values.max()), 1e-300)
        values, vectors = values[keep], vectors[:, keep]
        k = int(keep.sum())
        directions = vectors.T @ matrix
        t2 = (directions @ self.beta) ** 2 / values
        f = float(t2.sum() / k)
        nus = np.array([self._df(d) for d in directions])
        if np.any(nus <= 2):
            df2 = 2.0
        else:
            e = float((nus / (nus - 2)).sum())
            df2 = 2 * e / (e - k) if e > k else math.inf
        if df_cap is not None:
            df2 = min(df2, df_cap)
        free = self.structure == "unstructured" and len(self.random) > 1
        if free and k > 1 and math.isfinite(df2) and df2 > k:
            # lmerTest's F is T^2 / k on (k, n - 1) where a person's covariance over the
            # conditions is free (a balanced design: Hotelling's T^2 exactly), and Hotelling's F
            # is T^2 (n - k) / (k (n - 1)) on (k, n - k): the F scaled as Kenward and Roger's is
            # there. It called 5.9-7.0 % of null studies of 12 people with three conditions
            # unscaled. With (1 | participant) the F is the repeated-measures ANOVA's, exact
            # under sphericity: not scaled (scaled, 8 people called 3.7 %, not 5 %).
            f *= (df2 - k + 1) / df2
            df2 -= k - 1
        return FTest(f, k, df2, float(stats.f.sf(f, k, df2)))


def simplex_ftol(value: float) -> float:
    """Nelder-Mead's `fatol` for a criterion of about `value`: above its rounding noise."""
    return SIMPLEX_FTOL * max(1.0, abs(value)) if math.isfinite(value) else 1e-10


def fit_mixed(y: Array, x: Array, z: Array, groups: NDArray[np.int64], names: tuple[str, ...],
              random: tuple[str, ...], structure: Structure = "unstructured") -> MixedFit:
    """REML fit of y = X beta + Z b_group + e, b ~ N(0, Sigma) per group, e ~ N(0, sigma^2).

    Raises ValueError (one line) when X is rank-deficient or the data too few."""
    from scipy import optimize

    y, x, z = (np.asarray(a, dtype=float) for a in (y, x, z))
    if np.linalg.matrix_rank(x) < x.shape[1]:
        raise ValueError("the fixed effects are confounded (a column of X is a mix of others)")
    if len(y) <= x.shape[1]:
        raise ValueError("fewer ratings than fixed effects")
    fitted = x @ np.linalg.lstsq(x, y, rcond=None)[0]
    if float(np.sum((y - fitted) ** 2)) <= 1e-12 * max(float(np.sum((y - y.mean()) ** 2)), 1e-12):
        raise ValueError("the fixed effects explain every rating exactly: no variation is left "
                         "to test against")
    sums = GroupSums(y, x, z, np.asarray(groups))
    crit = RemlCriterion(sums, structure)
    start = np.where(crit.diagonal, 1.0, 0.0)
    bounds = [(0.0, None) if d else (None, None) for d in crit.diagonal]
    best = optimize.minimize(crit.profiled_and_gradient, start, jac=True, method="L-BFGS-B",
                             bounds=bounds, options={"ftol": 1e-14, "gtol": 1e-9})
    theta = np.asarray(best.x)
    # a line search that stops on rounding with the gradient flat has converged all the same
    # (at a variance's bound of 0 only a pull below it is allowed to remain)
    _, grad = crit.profiled_and_gradient(theta)
    projected = np.where(crit.diagonal & (theta <= 0), np.minimum(grad, 0.0), grad)
    success = bool(best.success) or float(np.abs(projected).max()) < 1e-4
    if not success:  # a rough surface: the simplex, which needs no gradient
        polish = optimize.minimize(crit.profiled, best.x, method="Nelder-Mead",
                                   options={"xatol": 1e-8, "fatol": simplex_ftol(best.fun),
                                            "maxiter": 4000})
        if polish.fun <= best.fun:
            theta, success = np.asarray(polish.x), bool(polish.success)
    theta = np.where(crit.diagonal, np.abs(theta), theta)  # Lambda's sign is free
    value = crit.profiled(theta)
    _, rss, beta, _ = crit._solve(theta)
    dof = sums.n - sums.p
    sigma = math.sqrt(rss / dof)
    if sigma <= 1e-6 * max(float(np.std(y)), 1e-12):
        raise ValueError("the people's own levels explain every rating exactly: no variation "
                         "within a person is left to test against")
    varpar = np.r_[theta, sigma]
    singular = bool(np.any(theta[crit.diagonal] < SINGULAR))
    # the df's ingredients over the parameters away from their boundary (a variance at 0 is
    # not a free parameter there: lmerTest's practice too)
    free = np.r_[~(crit.diagonal & (theta < SINGULAR)), True]
    # an off-diagonal entry in a zero column is not identified either
    dead = np.flatnonzero(np.abs(np.diag(crit.lam(theta))) < SINGULAR)
    free[:-1] &= ~np.isin(crit.index[1], dead)
    sub = np.flatnonzero(free)

    def gradient_sub(v: Array) -> Array:
        whole = varpar.copy()
        whole[sub] = v
        return crit.full_gradient(whole)[sub]

    def vcov_sub(v: Array) -> Array:
        whole = varpar.copy()
        whole[sub] = v
        return crit.vcov(whole)

    hess = hessian_of_gradient(gradient_sub, varpar[sub])
    try:
        cov_varpar = 2.0 * np.linalg.inv(hess)
        eig = np.linalg.eigvalsh(hess)
        converged = success and bool(eig.min() > 0)
    except np.linalg.LinAlgError:
        cov_varpar = np.full_like(hess, np.nan)
        converged = False
    return MixedFit(names, random, structure, beta, crit.vcov(varpar), sigma, theta, value,
                    converged, singular, sums.n, sums.groups, jacobian(vcov_sub, varpar[sub]),
                    cov_varpar)
