"""How many participants a study needs to find an effect: the power of the test the analysis
reports, from the study's own variance. Pure: an Analysis in, a table and its assumptions out.

Within designs: the headline test of a condition against another is, or (a mixed model with
balanced units) behaves as, a t test on each person's mean difference, on n - 1 df. That
difference's SD comes from the data: sqrt(tau^2 + 2 sigma^2 / u) from the fitted mixed model's
components (tau the person-to-person SD of the effect, sigma the residual SD, u the units per
condition and person) when the design repeats units; the observed SD of the differences when
each condition was rated once (it holds tau and sigma together). Between designs: Welch's t on
per-person means, their SD from the data. The power at n is the noncentral t's (exact for the
t tests); bench/study_calibration.py and tests/e2e/test_study_power.py hold it to simulations
of the mixed model's own test. With three or more conditions a pair is tested at 0.05 / pairs,
the level Holm's first step needs, so the figure is conservative.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass

from retimer.study.analysis import Analysis, differences, person_means
from retimer.study.analysis_data import AnalysisError

__all__ = ["PowerAssumptions", "PowerRow", "power_table"]

SIZES = (6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 200)
TARGET = 0.8


@dataclass(frozen=True)
class PowerRow:
    participants: int
    power: float


@dataclass(frozen=True)
class PowerAssumptions:
    """What the power figures rest on, as the output says it."""

    test: str
    scale: str
    condition: str
    reference: str
    alpha: float
    sd: float  # of a person's mean difference (within) or of a person's mean (between)
    source: str  # where `sd` comes from
    units: float  # ratings per condition and person
    slope_sd: float | None = None
    residual_sd: float | None = None


def _units(analysis: Analysis, scale: str) -> float:
    cells = Counter((r.participant, r.condition) for r in analysis.data.rows if scale in r.scores)
    return float(statistics.median(cells.values())) if cells else 1.0


def _within_sd(analysis: Analysis, scale: str, condition: str, reference: str,
               units: float) -> tuple[float, str, float | None, float | None]:
    model = next((m for m in analysis.models if m.scale == scale), None)
    if model is not None and analysis.data.repeated and units > 1:  # slopes are estimable
        tau = model.sds.get(f"slope {condition}", 0.0)
        if reference != analysis.data.conditions[0]:
            tau = math.sqrt(tau ** 2 + model.sds.get(f"slope {reference}", 0.0) ** 2)
        sigma = model.sds["residual"]
        sd = math.sqrt(tau ** 2 + 2 * sigma ** 2 / units)
        return sd, (f"the fitted mixed model: effect SD between people {tau:.2f}, residual SD "
                    f"{sigma:.2f}, {units:g} units per condition"), tau, sigma
    diffs = differences(analysis.data, scale, condition, reference)
    if len(diffs) < 2:
        raise AnalysisError(f"--power: fewer than 2 participants rated both {condition} and "
                            f"{reference}")
    sd = statistics.stdev(diffs)
    return sd, (f"the SD of {len(diffs)} participants' differences (it holds the effect's "
                "variation between people and the residual together)"), None, None


def _between_sd(analysis: Analysis, scale: str, condition: str, reference: str) -> float:
    means = person_means(analysis.data, scale)
    groups = [list(means.get(c, {}).values()) for c in (condition, reference)]
    if any(len(g) < 2 for g in groups):
        raise AnalysisError(f"--power: {condition} or {reference} has fewer than 2 participants")
    pooled = sum((len(g) - 1) * statistics.variance(g) for g in groups)
    return math.sqrt(pooled / (sum(len(g) for g in groups) - 2))


def _power(effect: float, sd: float, n: int, alpha: float, paired: bool) -> float:
    from scipy import stats

    if sd <= 0:
        return 1.0 if effect else alpha
    if paired:
        df, ncp = n - 1, effect / sd * math.sqrt(n)
    else:
        half = n / 2
        df, ncp = n - 2, effect / (sd * math.sqrt(2 / half))
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    return float(stats.nct.sf(crit, df, abs(ncp)) + stats.nct.cdf(-crit, df, abs(ncp)))


def power_table(analysis: Analysis, effect: float, scale: str | None = None
                ) -> tuple[list[PowerRow], int | None, PowerAssumptions]:
    """The power at each size of SIZES to find `effect` rating points between the first
    condition after the reference and the reference on `scale` (the first by default), the
    smallest size reaching 80 % (None: none), and what the figures assume."""
    scale = scale or analysis.data.scales[0]
    conditions = analysis.data.conditions
    reference, condition = conditions[0], conditions[1]
    pairs = len(conditions) * (len(conditions) - 1) // 2
    alpha = 0.05 / pairs
    units = _units(analysis, scale)
    if analysis.design == "between":
        sd = _between_sd(analysis, scale, condition, reference)
        assumptions = PowerAssumptions(
            "Welch's t on per-participant means, half the participants per condition", scale,
            condition, reference, alpha, sd, "the pooled SD of the per-participant means", units)
    else:
        sd, source, tau, sigma = _within_sd(analysis, scale, condition, reference, units)
        test = ("the mixed model's test of the condition (as a t test on each person's mean "
                "difference, n - 1 df)" if analysis.data.repeated else
                "the paired t test on per-participant differences")
        assumptions = PowerAssumptions(test, scale, condition, reference, alpha, sd, source,
                                       units, tau, sigma)
    rows = [PowerRow(n, _power(effect, sd, n, alpha, analysis.design != "between"))
            for n in SIZES]
    enough = next((r.participants for r in rows if r.power >= TARGET), None)
    return rows, enough, assumptions
