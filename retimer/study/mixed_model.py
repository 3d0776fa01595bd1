"""The mixed model of a within study with repeated units or a Latin square's orders: the maximal
model the design supports, simplified only when it cannot be fitted, tested with Satterthwaite's
degrees of freedom (retimer.study.lmm). Pure: a study's rows in, a fit and its report out.

The maximal model is `score ~ condition + position + (1 + condition | participant)`: people
differ in their level and in their effect (a random slope per condition), and a test that
ignores the second calls effects that are not there (Barr et al. 2013, J. Mem. Lang. 68(3)).
A slope needs repeated ratings of a condition by one person, so a design that rates each
condition once per person supports `(1 | participant)` (its residual then holds the slopes).
Its residual is then one variance for every pair of conditions, which people who differ in
their effects break (sphericity): with three conditions the pooled residual made one pair's
test conservative (3 % of null studies called) and another's liberal, so there each pair is
tested in a model of its own two conditions' ratings (`fit_pair`).
When the maximal fit is singular (a variance or a correlation at its boundary), its variances
are estimated again without their bound at zero (retimer.study.lmm_unbounded: the test then
keeps its level when people do not differ in their effect, where dropping the slope made it
conservative). When that finds nothing better, or the fit does not converge, the steps are:
drop the correlations (`||`), then the terms whose variance is zero; the model fitted and why
are reported.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from retimer.study.analysis_data import AnalysisError, StudyData
from retimer.study.lmm import MixedFit, Structure, fit_mixed
from retimer.study.lmm_unbounded import fit_unbounded
from retimer.study.results import ModelReport

__all__ = ["POSITIONS_AS_FACTOR", "ScaleModel", "fit_pair", "fit_scale"]

POSITIONS_AS_FACTOR = 12  # more distinct positions than this: position is a linear trend
METHOD = "REML; t and F tests with Satterthwaite's degrees of freedom (as lmerTest)"
UNBOUNDED = ("; the variances estimated without their bound at zero, as the repeated-measures "
             "ANOVA's error terms (the bounded fit was singular)")


@dataclass(frozen=True)
class ScaleModel:
    """One scale's fit: the conditions' columns in its fixed effects, and its report."""

    fit: MixedFit
    conditions: list[str]  # the conditions it compares, the reference first
    report: ModelReport
    notes: list[str]
    # With (1 | participant) and the people's variance estimated at zero, the fit is ordinary
    # least squares and Satterthwaite's df become the residual's, between people included: a
    # 2 x 2 crossover of 8 people then tested on 13 df, not its 6, and called 7.3 % of null
    # studies. The conditions are compared within people, so their df are at most the
    # within-person residual's (ratings - people - other fixed effects), as a fixed-participant
    # analysis would give.
    df_cap: float | None = None
    each_once: bool = False  # every condition rated once per person: no slopes to fit

    def row(self, condition: str, reference: str) -> np.ndarray:
        """The contrast `condition - reference` over the fixed effects."""
        row = np.zeros(len(self.fit.beta))
        for sign, c in ((1.0, condition), (-1.0, reference)):
            i = self.conditions.index(c)
            if i:
                row[i] += sign
        return row


def _random_formula(terms: list[str], structure: Structure, conditions: int) -> str:
    bar = "||" if structure == "diagonal" and len(terms) > 1 else "|"
    if terms == ["1"] + [f"condition[{i}]" for i in range(1, conditions)]:
        return f"(1 + condition {bar} participant)"
    inside = " + ".join(terms if terms[0] == "1" else ["0", *terms])
    return f"({inside} {bar} participant)"


def fit_scale(data: StudyData, scale: str, *, slopes: bool = True) -> ScaleModel:
    """The mixed model of `scale`'s ratings (AnalysisError: one line when it cannot be fitted).
    `slopes=False` fits `(1 | participant)` whatever the design (the each-once omnibus)."""
    rows = [r for r in data.rows if scale in r.scores]
    conditions = [c for c in data.conditions if any(r.condition == c for r in rows)]
    people = sorted({r.participant for r in rows})
    if len(people) < 3:
        raise AnalysisError(f"{scale}: a mixed model needs at least 3 participants")
    person = np.array([people.index(r.participant) for r in rows])
    y = np.array([r.scores[scale] for r in rows])
    dummies = np.array([[float(r.condition == c) for c in conditions[1:]] for r in rows])
    dummies = dummies.reshape(len(rows), len(conditions) - 1)
    positions = sorted({r.position for r in rows})
    notes: list[str] = []
    x_parts, names = [np.ones((len(rows), 1)), dummies], ["(Intercept)", *conditions[1:]]
    fixed = "score ~ condition"
    if len(positions) > 1:
        if len(positions) <= POSITIONS_AS_FACTOR:  # a factor: each position its own drift
            pos = np.array([[float(r.position == p) for p in positions[1:]] for r in rows])
            pos_names = [f"position {p}" for p in positions[1:]]
        else:
            pos = np.array([[float(r.position)] for r in rows])
            pos_names = ["position"]
        candidate = np.hstack([*x_parts, pos])
        if np.linalg.matrix_rank(candidate) == candidate.shape[1]:
            x_parts.append(pos)
            names += pos_names
            fixed += " + position"
        else:
            notes.append(f"{scale}: position is confounded with condition (everyone had the "
                         "same order): it is not in the model")
    x = np.hstack(x_parts)
    z_all = np.hstack([np.ones((len(rows), 1)), dummies])
    terms_all = ["1"] + [f"condition[{i}]" for i in range(1, len(conditions))]
    replicated = max(Counter((r.participant, r.condition) for r in rows).values()) > 1
    maximal_terms = terms_all if slopes and replicated and len(conditions) > 1 else ["1"]
    maximal = f"{fixed} + {_random_formula(maximal_terms, 'unstructured', len(conditions))}"
    steps: list[tuple[list[int], Structure]] = [(list(range(len(maximal_terms))), "unstructured")]
    if len(maximal_terms) > 1:
        steps.append((list(range(len(maximal_terms))), "diagonal"))
    why: list[str] = []
    method = METHOD
    labels = {"1": "participant", **{f"condition[{i}]": f"slope {c}"
                                     for i, c in enumerate(conditions[1:], start=1)}}
    fit = None
    columns: list[int] = []
    structure: Structure = "unstructured"
    while steps:
        columns, structure = steps.pop(0)
        try:
            fit = fit_mixed(y, x, z_all[:, columns], person, tuple(names),
                            tuple(terms_all[i] for i in columns), structure)
        except (ValueError, np.linalg.LinAlgError) as e:
            raise AnalysisError(f"{scale}: the mixed model could not be fitted ({e})") from None
        if fit.converged and not fit.singular:
            break
        what = "singular" if fit.singular else "not converged"
        label = _random_formula([terms_all[i] for i in columns], structure, len(conditions))
        if structure == "unstructured" and len(columns) > 1 and fit.singular and \
                (free := fit_unbounded(fit, y, x, z_all[:, columns], person)) is not None:
            fit, method = free, METHOD + UNBOUNDED
            negative = [name for name, v in zip(fit.random, np.diag(fit.covariance)) if v < 0]
            if negative:
                notes.append(f"{scale}: a variance estimated below zero ("
                             + ", ".join(labels[n] for n in negative)
                             + "): people differ in it less than the ratings' noise shows; "
                             "its SD is shown as 0")
            elif np.linalg.eigvalsh(fit.covariance).min() < 0:
                notes.append(f"{scale}: the people's levels and effects estimated with a "
                             "correlation beyond 1: they differ in them less than the ratings' "
                             "noise shows")
            break
        if not steps:
            if structure == "diagonal" and fit.singular and len(columns) > 1:
                alive = [c for c, t in zip(columns, fit.theta) if t >= 1e-4]
                if alive and alive != columns:
                    why.append(f"{label} was {what}: its zero-variance terms were dropped")
                    steps.append((alive, "diagonal"))
                    continue
            if fit.singular:
                notes.append(f"{scale}: the fitted model is singular (a variance at zero): "
                             "it is the simplest the data allow")
            if not fit.converged:
                notes.append(f"{scale}: the mixed model did not fully converge; read its "
                             "intervals with care")
            break
        why.append(f"{label} was {what}")
    assert fit is not None
    terms = [terms_all[i] for i in columns]
    formula = f"{fixed} + {_random_formula(terms, structure, len(conditions))}"
    sds = {labels[name]: sd
           for name, sd in fit.sds.items() if name != "residual"}
    sds["residual"] = fit.sigma
    correlations: dict[str, float] = {}
    if structure == "unstructured" and len(terms) > 1:
        cov = fit.covariance
        keys = [labels[t] for t in terms]
        for i in range(len(terms)):
            for j in range(i):
                if cov[i, i] <= 0 or cov[j, j] <= 0:
                    continue  # no correlation with a variance at or below zero
                denom = float(np.sqrt(cov[i, i] * cov[j, j]))
                correlations[f"{keys[j]} ~ {keys[i]}"] = float(cov[i, j]) / denom
    report = ModelReport(scale, formula, maximal, "; ".join(why), method, sds, correlations,
                         fit.observations, fit.groups)
    cap = None
    if terms == ["1"] and fit.singular:
        cap = float(fit.observations - fit.groups - (len(names) - 1))
    return ScaleModel(fit, conditions, report, notes, cap, each_once=not replicated)


def fit_pair(data: StudyData, scale: str, reference: str, condition: str) -> ScaleModel:
    """The model of `scale` on the ratings of two conditions only (the reference first)."""
    rows = [r for r in data.rows if r.condition in (reference, condition)]
    return fit_scale(replace(data, rows=rows, conditions=[reference, condition]), scale)
