"""A sensitivity check for treating 1-7 ratings as numbers: the same comparison in a
cumulative-link (proportional-odds logit) model, which uses only the ratings' order. Pure
(statsmodels' OrderedModel).

Its standard errors are clustered by participant (a person's ratings are not independent);
with few people a sandwich estimate is optimistic, so this is a check of direction and rough
size beside the headline test, not a second headline. A condition's odds ratio above 1 means
higher ratings than the reference's.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from retimer.study.analysis_data import StudyData

__all__ = ["OrdinalCheck", "ordinal_check"]


@dataclass(frozen=True)
class OrdinalCheck:
    scale: str
    condition: str
    reference: str
    odds_ratio: float  # of a higher rating, condition against reference
    ci: tuple[float, float]
    p: float
    participants: int


def ordinal_check(data: StudyData, scale: str) -> tuple[list[OrdinalCheck], str]:
    """Each condition against the reference in a proportional-odds model of `scale`, and a
    note when it cannot be fitted ("" otherwise)."""
    import numpy as np
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    rows = [r for r in data.rows if scale in r.scores]
    levels = sorted({r.scores[scale] for r in rows})
    if len(levels) < 3:
        return [], f"{scale}: fewer than 3 distinct ratings: no ordinal check"
    conditions = [c for c in data.conditions if any(r.condition == c for r in rows)]
    y = np.array([levels.index(r.scores[scale]) for r in rows])
    columns = [[float(r.condition == c) for c in conditions[1:]] for r in rows]
    positions = sorted({r.position for r in rows})
    if data.design != "between" and 1 < len(positions) <= 12:
        columns = [row + [float(r.position == p) for p in positions[1:]]
                   for row, r in zip(columns, rows)]
    x = np.array(columns)
    if np.linalg.matrix_rank(x) < x.shape[1]:  # a fixed order: position is the condition
        x = x[:, :len(conditions) - 1]
    people = sorted({r.participant for r in rows})
    groups = np.array([people.index(r.participant) for r in rows])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = OrderedModel(y, x, distr="logit").fit(
                method="bfgs", disp=False, maxiter=500, cov_type="cluster",
                cov_kwds={"groups": groups})
    except (ValueError, np.linalg.LinAlgError) as e:
        return [], f"{scale}: the ordinal check could not be fitted ({e})"
    out = []
    for i, c in enumerate(conditions[1:]):
        beta, se = float(fit.params[i]), float(fit.bse[i])
        if not (math.isfinite(beta) and math.isfinite(se)):
            return [], f"{scale}: the ordinal check did not converge"
        both = {r.participant for r in rows if r.condition in (c, conditions[0])}
        out.append(OrdinalCheck(scale, c, conditions[0], math.exp(beta),
                                (math.exp(beta - 1.959964 * se), math.exp(beta + 1.959964 * se)),
                                float(fit.pvalues[i]), len(both)))
    return out, ""
