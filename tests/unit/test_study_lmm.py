"""retimer.study.lmm against published and independent figures: lme4/lmerTest's `sleepstudy`
fit, statsmodels' REML estimates on a three-condition design, the paired t test it must equal
when each person rates each condition once."""

from __future__ import annotations

import csv
import math
import warnings

import numpy as np
import pytest

from retimer.study.lmm import fit_mixed
from tests.support.paths import ROOT

SLEEPSTUDY = ROOT / "tests" / "fixtures" / "stats" / "sleepstudy.csv"


def _sleepstudy() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with SLEEPSTUDY.open() as f:
        rows = list(csv.DictReader(f))
    y = np.array([float(r["Reaction"]) for r in rows])
    days = np.array([float(r["Days"]) for r in rows])
    return y, np.c_[np.ones_like(days), days], np.array([int(r["Subject"]) for r in rows])


def test_sleepstudy_is_lme4_and_lmertest_own() -> None:
    """lmer(Reaction ~ Days + (Days | Subject)), summary() with lmerTest (published output)."""
    y, x, subject = _sleepstudy()
    fit = fit_mixed(y, x, x, subject, ("(Intercept)", "Days"), ("(Intercept)", "Days"))
    assert fit.converged and not fit.singular
    assert fit.criterion == pytest.approx(1743.6, abs=0.05)  # "REML criterion at convergence"
    days = fit.contrast([0, 1])
    assert (round(days.estimate, 3), round(days.se, 3), round(days.df, 3)) == (10.467, 1.546, 17.0)
    assert round(days.t, 3) == 6.771 and f"{days.p:.2e}" == "3.26e-06"
    intercept = fit.contrast([1, 0])
    assert (round(intercept.estimate, 3), round(intercept.se, 3)) == (251.405, 6.825)
    assert round(intercept.df, 3) == 17.0
    sds = fit.sds
    # (printed to 3 decimals; the optimum's ridge is flat to about 1e-3 in the intercept's SD)
    assert [sds["(Intercept)"], sds["Days"], sds["residual"]] == pytest.approx(
        [24.741, 5.922, 25.592], abs=1.5e-3)
    cov = fit.covariance
    assert round(cov[0, 1] / math.sqrt(cov[0, 0] * cov[1, 1]), 2) == 0.07
    one_row = fit.f_test([[0, 1]])  # an F on one row is the t test squared, same df
    assert one_row.f == pytest.approx(days.t ** 2) and one_row.df2 == pytest.approx(days.df)
    assert one_row.p == pytest.approx(days.p)


def _three_conditions(seed: int, people: int = 16, units: int = 4, slope_sd: float = 0.6
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = []
    for person in range(people):
        offset = rng.normal(0, 0.8)
        slopes = [0.0, *rng.normal(0, slope_sd, 2)]
        for condition in range(3):
            for _ in range(units):
                rows.append((person, condition, 4 + offset + [0, -0.4, -1.0][condition]
                             + slopes[condition] + rng.normal(0, 1.0)))
    person = np.array([r[0] for r in rows])
    condition = np.array([r[1] for r in rows])
    x = np.c_[np.ones(len(rows)), condition == 1, condition == 2].astype(float)
    return np.array([r[2] for r in rows]), x, x.copy(), person


def test_a_three_condition_fit_matches_statsmodels_reml() -> None:
    """The same REML optimum as statsmodels' MixedLM with a full random-slope covariance."""
    import pandas as pd
    import statsmodels.formula.api as smf

    y, x, z, person = _three_conditions(seed=3)
    fit = fit_mixed(y, x, z, person, ("1", "c1", "c2"), ("1", "c1", "c2"))
    frame = pd.DataFrame({"y": y, "c1": x[:, 1], "c2": x[:, 2], "person": person})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = smf.mixedlm("y ~ c1 + c2", frame, groups=frame["person"],
                             re_formula="~ c1 + c2").fit(reml=True, method=["lbfgs"])
    assert fit.beta == pytest.approx(theirs.fe_params.to_numpy(), abs=2e-4)
    assert np.sqrt(np.diag(fit.vcov)) == pytest.approx(theirs.bse_fe.to_numpy(), rel=2e-3)
    assert fit.sigma == pytest.approx(math.sqrt(theirs.scale), rel=1e-3)
    assert fit.covariance == pytest.approx(theirs.cov_re.to_numpy(), abs=5e-3)
    # the df lie between the subjects' n - 1 and the ratings' count, and the omnibus test's
    # denominator df among them
    omnibus = fit.f_test([[0, 1, 0], [0, 0, 1]])
    for row in ([0, 1, 0], [0, 0, 1]):
        assert 15 * 0.8 < fit.contrast(row).df < len(y)
    assert omnibus.df1 == 2 and 10 < omnibus.df2 < len(y)


def test_each_condition_once_is_the_paired_t_test() -> None:
    """(1 | person) with two conditions each rated once: the contrast's t, df and p are the
    paired t test's, exactly (a balanced design, people's variance estimated above zero)."""
    from scipy import stats

    rng = np.random.default_rng(8)
    people = 11
    base = rng.normal(4, 1, people)
    a, b = base + rng.normal(0, 1, people), base - 0.5 + rng.normal(0, 1, people)
    y = np.r_[a, b]
    x = np.c_[np.ones(2 * people), np.r_[np.zeros(people), np.ones(people)]]
    person = np.r_[np.arange(people), np.arange(people)]
    fit = fit_mixed(y, x, np.ones((2 * people, 1)), person, ("1", "b"), ("1",))
    assert not fit.singular
    got = fit.contrast([0, 1])
    paired = stats.ttest_rel(b, a)
    assert got.t == pytest.approx(paired.statistic, rel=1e-5)
    assert got.df == pytest.approx(people - 1, rel=1e-3)
    assert got.p == pytest.approx(paired.pvalue, rel=1e-3)
    assert got.ci == pytest.approx(tuple(paired.confidence_interval(0.95)), rel=1e-3)


def test_no_person_effect_is_a_singular_fit() -> None:
    rng = np.random.default_rng(1)
    person = np.repeat(np.arange(10), 6)
    x = np.c_[np.ones(60), np.tile([0.0, 1.0], 30)]
    y = 3 + 0.5 * x[:, 1] + rng.normal(0, 1, 60)  # nobody differs from anybody
    fit = fit_mixed(y, x, x, person, ("1", "b"), ("1", "b"), structure="diagonal")
    assert fit.singular
    assert fit.contrast([0, 1]).df > 30  # the residual's df, not the people's


def test_confounded_fixed_effects_are_refused_in_one_line() -> None:
    x = np.c_[np.ones(8), np.ones(8)]
    with pytest.raises(ValueError, match="confounded"):
        fit_mixed(np.arange(8.0), x, np.ones((8, 1)), np.repeat(np.arange(4), 2), ("a", "b"),
                  ("1",))


def test_holm_is_statsmodels_own() -> None:
    from statsmodels.stats.multitest import multipletests

    from retimer.study.analysis import holm

    rng = np.random.default_rng(5)
    for m in (2, 3, 6):
        ps = list(rng.uniform(0, 0.2, m))
        assert holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]), abs=1e-12)


def test_the_criterions_gradients_are_exact() -> None:
    """The analytic gradients (the optimizer's, and Satterthwaite's Hessian's) against
    central differences of the criteria themselves."""
    from retimer.study.lmm import GroupSums, RemlCriterion

    y, x, z, person = _three_conditions(seed=4)
    crit = RemlCriterion(GroupSums(y, x, z, person), "unstructured")
    theta = np.array([0.8, 0.1, -0.2, 0.5, 0.05, 0.4])
    value, grad = crit.profiled_and_gradient(theta)
    h = 1e-6
    numeric = [(crit.profiled(theta + e) - crit.profiled(theta - e)) / (2 * h)
               for e in np.eye(len(theta)) * h]
    assert value == pytest.approx(crit.profiled(theta)) and grad == pytest.approx(numeric, abs=1e-4)
    varpar = np.r_[theta, 1.1]
    numeric = [(crit.full(varpar + e) - crit.full(varpar - e)) / (2 * h)
               for e in np.eye(len(varpar)) * h]
    assert crit.full_gradient(varpar) == pytest.approx(numeric, abs=1e-4)


def _replicated(seed: int, people: int, reps: int, slope_sd: float) -> tuple[np.ndarray, ...]:
    """Two conditions, `reps` ratings of each per person, no order effect: balanced."""
    rng = np.random.default_rng(seed)
    rows = []
    for person in range(people):
        level, slope = rng.normal(0, 0.8), rng.normal(0, slope_sd)
        for condition in (0, 1):
            for _ in range(reps):
                rows.append((person, condition, 4 + level + condition * (slope - 0.3) + rng.normal()))
    person = np.array([r[0] for r in rows])
    x = np.c_[np.ones(len(rows)), [float(r[1]) for r in rows]]
    return np.array([r[2] for r in rows]), x, person


def test_a_singular_maximal_fit_refitted_without_bounds_is_the_repeated_measures_test() -> None:
    """People who do not differ in their effect: the bounded fit of (1 + condition | person) is
    singular (the slope's variance at zero) on these seeds; refitted with no bound on the
    variances, its test is the by-person test of a balanced design (the repeated-measures
    ANOVA's: a paired t on each person's condition means, n - 1 df), whose level holds whether
    people differ or not. The bounded fit's own test is not it (its df are the ratings')."""
    from scipy import stats

    from retimer.study.lmm_unbounded import fit_unbounded

    singular = 0
    for seed in range(6):
        y, x, person = _replicated(seed, people=10, reps=4, slope_sd=0.0)
        bounded = fit_mixed(y, x, x, person, ("1", "b"), ("1", "b"))
        if not bounded.singular:
            continue
        singular += 1
        free = fit_unbounded(bounded, y, x, x, person)
        assert free is not None and free.criterion <= bounded.criterion
        got = free.contrast([0, 1])
        means = [[y[(person == p) & (x[:, 1] == c)].mean() for p in range(10)] for c in (0, 1)]
        paired = stats.ttest_rel(means[1], means[0])
        assert got.t == pytest.approx(paired.statistic, rel=1e-3)
        assert got.df == pytest.approx(9, rel=2e-2)
        assert got.p == pytest.approx(paired.pvalue, rel=2e-2, abs=1e-4)
        # past the bounds: a variance below zero, or a correlation beyond 1
        assert np.linalg.eigvalsh(free.covariance).min() < 0
        assert all(sd >= 0 for sd in free.sds.values())
    assert singular >= 2  # the case is exercised


def test_a_fit_inside_its_bounds_is_the_same_without_them() -> None:
    """sleepstudy's fit is not singular: lifting the bounds finds the same optimum."""
    from retimer.study.lmm_unbounded import fit_unbounded

    y, x, subject = _sleepstudy()
    bounded = fit_mixed(y, x, x, subject, ("(Intercept)", "Days"), ("(Intercept)", "Days"))
    free = fit_unbounded(bounded, y, x, x, subject)
    assert free is not None
    assert free.criterion == pytest.approx(bounded.criterion, abs=1e-6)
    got, theirs = free.contrast([0, 1]), bounded.contrast([0, 1])
    assert (got.estimate, got.se, got.df) == pytest.approx((theirs.estimate, theirs.se, theirs.df), rel=2e-3)


def test_the_omnibus_f_is_hotellings_where_each_person_has_a_free_covariance() -> None:
    """Three conditions, 4 ratings of each per person, people who differ in their effects:
    the maximal model's omnibus F over both contrasts is Hotelling's T^2 test of the people's
    condition means (F = T^2 (n - 2) / (2 (n - 1)) on 2 and n - 2 df), as Kenward and Roger's
    F is; lmerTest's Satterthwaite F (T^2 / 2 on 2 and n - 1) is larger by (n - 1) / (n - 2)."""
    from scipy import stats

    from retimer.study.lmm_unbounded import fit_unbounded

    people = 16
    y, x, z, person = _three_conditions(seed=3, people=people)
    fit = fit_mixed(y, x, z, person, ("1", "c1", "c2"), ("1", "c1", "c2"))
    if fit.singular:
        free = fit_unbounded(fit, y, x, z, person)
        assert free is not None
        fit = free
    got = fit.f_test([[0, 1, 0], [0, 0, 1]])
    condition = x[:, 1] + 2 * x[:, 2]
    means = np.array([[y[(person == p) & (condition == c)].mean() for c in range(3)]
                      for p in range(people)])
    d = means[:, 1:] - means[:, :1]
    t2 = people * d.mean(axis=0) @ np.linalg.solve(np.cov(d, rowvar=False), d.mean(axis=0))
    f = t2 * (people - 2) / (2 * (people - 1))
    assert (got.f, got.df2) == pytest.approx((f, people - 2), rel=2e-2)
    assert got.p == pytest.approx(float(stats.f.sf(f, 2, people - 2)), rel=5e-2)


def test_the_omnibus_f_with_one_variance_per_person_is_the_repeated_measures_anovas() -> None:
    """Three conditions rated once each, (1 | person): the F is the two-way ANOVA's (condition
    against the person x condition residual, on 2 and 2 (n - 1) df), exact under sphericity,
    and is not scaled as where a person's covariance is free."""
    from scipy import stats

    rng = np.random.default_rng(11)
    people = 10
    level = rng.normal(0, 1.2, people)
    table = np.array([[4 + level[p] + [0, -0.3, -0.6][c] + rng.normal() for c in range(3)]
                      for p in range(people)])
    y = table.ravel()
    person = np.repeat(np.arange(people), 3)
    condition = np.tile(np.arange(3), people)
    x = np.c_[np.ones(len(y)), condition == 1, condition == 2].astype(float)
    fit = fit_mixed(y, x, np.ones((len(y), 1)), person, ("1", "c1", "c2"), ("1",))
    assert not fit.singular
    got = fit.f_test([[0, 1, 0], [0, 0, 1]])
    grand = table.mean()
    ss_condition = people * float(((table.mean(axis=0) - grand) ** 2).sum())
    residual = table - table.mean(axis=1, keepdims=True) - table.mean(axis=0) + grand
    f = (ss_condition / 2) / (float((residual ** 2).sum()) / (2 * (people - 1)))
    assert (got.f, got.df2) == pytest.approx((f, 2 * (people - 1)), rel=1e-3)
    assert got.p == pytest.approx(float(stats.f.sf(f, 2, 2 * (people - 1))), rel=1e-3)
