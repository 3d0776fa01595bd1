"""How many participants a study needs to find an effect: simulated on the study's own design
and spread. Pure: an Analysis in, a table out (numpy draws, scipy tests).

Why simulate: the usual formulas assume a design the study may not have (units per person,
a repeated-measures design, ratings on a 7-point scale). From the analysed data it takes the
spread between people and within a person and the units per person, then draws many studies of
n participants with the given effect and runs the design's test on each: the share that finds
it (p < 0.05) is the power at n. Within designs are tested on per-participant mean differences
(the paired test), which a mixed model at least matches.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from retimer.study.analysis import Analysis

__all__ = ["PowerRow", "power_table"]

SIZES = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 200)
DRAWS = 2000
TARGET = 0.8


@dataclass(frozen=True)
class PowerRow:
    participants: int
    power: float


def _spread(analysis: Analysis, scale: str) -> tuple[float, float, float]:
    """(between-person sd, within-person sd, units per person and condition) on `scale`."""
    by_person: dict[str, list[float]] = defaultdict(list)
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in analysis.data.rows:
        if scale in r.scores:
            by_person[r.participant].append(r.scores[scale])
            cells[(r.participant, r.condition)].append(r.scores[scale])
    residuals = [v - statistics.fmean(vs) for vs in cells.values() for v in vs if len(vs) > 1]
    person = statistics.stdev([statistics.fmean(v) for v in by_person.values()]) \
        if len(by_person) > 1 else 1.0
    within = statistics.pstdev(residuals) if len(residuals) > 1 else 1.0
    units = statistics.median(len(v) for v in cells.values()) if cells else 1.0
    return person, max(within, 0.3), float(units)


def power_table(analysis: Analysis, effect: float, scale: str | None = None,
                seed: int = 0) -> tuple[list[PowerRow], int | None]:
    """The power at each size of SIZES to find `effect` rating points on `scale` (the first by
    default) with the analysis's design, and the smallest size reaching 80 % (None: none)."""
    import numpy as np
    from scipy import stats

    scale = scale or analysis.data.scales[0]
    person, within, units = _spread(analysis, scale)
    rng = np.random.default_rng(seed)
    rows: list[PowerRow] = []
    for n in SIZES:
        if analysis.design == "between":
            half = n // 2
            sd = math.sqrt(person ** 2 + within ** 2 / units)
            a = rng.normal(effect, sd, (DRAWS, half))
            b = rng.normal(0.0, sd, (DRAWS, n - half))
            p = stats.ttest_ind(a, b, axis=1, equal_var=False).pvalue
        else:
            sd = within * math.sqrt(2 / units)
            d = rng.normal(effect, sd, (DRAWS, n))
            p = stats.ttest_1samp(d, 0.0, axis=1).pvalue
        rows.append(PowerRow(n, float(np.mean(p < 0.05))))
    enough = next((r.participants for r in rows if r.power >= TARGET), None)
    return rows, enough
