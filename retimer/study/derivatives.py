"""Finite-difference derivatives for the mixed models' degrees of freedom. Pure: numpy only.

Why by differences: the df (Satterthwaite's, Kenward and Roger's scaling) need the fixed
effects' covariance differentiated over the variance parameters and the criterion's Hessian;
an exact gradient exists for the bounded fit's criterion only. Central differences with
Richardson's extrapolation are accurate to ~1e-6 here, far below what a df is read to.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

__all__ = ["JACOBIAN_STEP", "VALUE_STEP", "hessian", "hessian_of_gradient", "jacobian"]

Array = NDArray[np.float64]
# relative steps, halved once for Richardson's extrapolation: with the REML criterion near
# 10^3 a step much below 1e-3 loses the curvature to rounding
JACOBIAN_STEP = 1e-2  # for a matrix-valued function's first derivatives
VALUE_STEP = 1e-3  # for a scalar's second derivatives from its values


def _richardson(estimate: Callable[[float], Array], step: float) -> Array:
    """A central difference's O(h^2) error removed: (4 D(h/2) - D(h)) / 3."""
    return (4 * estimate(step / 2) - estimate(step)) / 3


def jacobian(f: Callable[[Array], Array], at: Array) -> Array:
    """d f / d at for a matrix-valued f, shape (k, *f.shape), by central differences."""
    def estimate(step: float) -> Array:
        h = step * np.maximum(np.abs(at), 1e-2)
        parts = []
        for i in range(len(at)):
            e = np.zeros(len(at))
            e[i] = h[i]
            parts.append((f(at + e) - f(at - e)) / (2 * h[i]))
        return np.asarray(parts)

    return _richardson(estimate, JACOBIAN_STEP)


def hessian_of_gradient(gradient: Callable[[Array], Array], at: Array) -> Array:
    """The Hessian as the Jacobian of an exact gradient (2k gradients, not O(k^2) values),
    symmetrised."""
    h = jacobian(gradient, at)
    return (h + h.T) / 2


def hessian(f: Callable[[Array], float], at: Array) -> Array:
    """The Hessian of a scalar function from its values (no gradient known)."""
    def estimate(step: float) -> Array:
        h = step * np.maximum(np.abs(at), 1e-2)
        k = len(at)
        out = np.zeros((k, k))
        for i in range(k):
            for j in range(i, k):
                ei, ej = np.zeros(k), np.zeros(k)
                ei[i], ej[j] = h[i], h[j]
                value = (f(at + ei + ej) - f(at + ei - ej) - f(at - ei + ej) + f(at - ei - ej)) \
                    / (4 * h[i] * h[j])
                out[i, j] = out[j, i] = value
        return out

    return _richardson(estimate, VALUE_STEP)
