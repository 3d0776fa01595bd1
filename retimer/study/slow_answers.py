"""The study page's yes/no question, "did this feel slow?": how often each condition was called
slow, and whether two conditions differ, with a test made for paired binary answers. Pure
(scipy).

Which test: each person answered once per condition (within): McNemar's exact test, the
binomial test of the discordant pairs, with the conditional odds ratio and its exact interval
(the same binomial); several answers per person and condition: the paired t test on each
person's share of "slow" answers (a summary statistic, valid whatever the person-to-person
variation); between: Welch's t on each person's share.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from retimer.study.analysis_data import StudyData

__all__ = ["SlowComparison", "SlowShare", "slow_answers"]


@dataclass(frozen=True)
class SlowShare:
    condition: str
    answered: int
    slow: int

    @property
    def share(self) -> float:
        return self.slow / self.answered if self.answered else math.nan


@dataclass(frozen=True)
class SlowComparison:
    condition: str
    reference: str
    test: str  # mcnemar | paired-t | welch
    measure: str  # what `estimate` is
    estimate: float
    ci: tuple[float, float]
    p: float
    participants: int


def _shares(data: StudyData) -> dict[str, dict[str, list[bool]]]:
    out: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in data.rows:
        if r.slow is not None:
            out[r.condition][r.participant].append(r.slow)
    return out


def _mcnemar(a: dict[str, list[bool]], b: dict[str, list[bool]], condition: str,
             reference: str) -> SlowComparison | None:
    from scipy import stats

    people = sorted(set(a) & set(b))
    only_condition = sum(1 for p in people if a[p][0] and not b[p][0])
    only_reference = sum(1 for p in people if b[p][0] and not a[p][0])
    discordant = only_condition + only_reference
    if discordant == 0:
        return None
    result = stats.binomtest(only_condition, discordant, 0.5)
    low, high = result.proportion_ci(0.95, method="exact")
    ratio = lambda q: math.inf if q >= 1 else float(q / (1 - q))  # noqa: E731
    estimate = ratio(only_condition / discordant)
    return SlowComparison(condition, reference, "mcnemar",
                          "odds ratio of 'slow' (discordant pairs)", estimate,
                          (ratio(low), ratio(high)), float(result.pvalue), len(people))


def slow_answers(data: StudyData) -> tuple[list[SlowShare], list[SlowComparison]]:
    """Per condition the answers and the "slow" ones; per pair of conditions, the test."""
    from scipy import stats

    by = _shares(data)
    if not by:
        return [], []
    shares = [SlowShare(c, sum(len(v) for v in by[c].values()),
                        sum(sum(v) for v in by[c].values())) for c in data.conditions if c in by]
    found: list[SlowComparison] = []
    once = all(len(v) == 1 for c in by.values() for v in c.values())
    for reference, condition in itertools.combinations([s.condition for s in shares], 2):
        a, b = by[condition], by[reference]
        if data.design == "within" and once:
            got = _mcnemar(a, b, condition, reference)
            if got is not None:
                found.append(got)
            continue
        share = {c: {p: sum(v) / len(v) for p, v in by[c].items()} for c in (condition, reference)}
        if data.design == "between":
            x, y = list(share[condition].values()), list(share[reference].values())
            if len(x) < 2 or len(y) < 2 or statistics.pvariance(x + y) == 0:
                continue
            result = stats.ttest_ind(x, y, equal_var=False)
            test, people = "welch", len(x) + len(y)
            estimate = statistics.fmean(x) - statistics.fmean(y)
        else:
            people_both = sorted(set(share[condition]) & set(share[reference]))
            diffs = [share[condition][p] - share[reference][p] for p in people_both]
            if len(diffs) < 2 or statistics.pvariance(diffs) == 0:
                continue
            result = stats.ttest_1samp(diffs, 0.0)
            test, people, estimate = "paired-t", len(diffs), statistics.fmean(diffs)
        low, high = result.confidence_interval(0.95)
        found.append(SlowComparison(condition, reference, test,
                                    "difference in the share called slow", estimate,
                                    (float(low), float(high)), float(result.pvalue), people))
    return shares, found
