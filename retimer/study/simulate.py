"""Simulated studies with a known effect: the records a real study would leave, for checking the
analysis (does it find the effect it was given, and nothing when there is none) and for the
sample-size helper. Pure: numbers in, records out (numpy draws them).

A participant's rating of a unit is base + their own offset (person_sd) + the condition's effect
(0 for the reference) + their own deviation from that effect (slope_sd: people differ in how
much a condition bothers them, a random slope) + a drift per position (a period effect, which a
Latin square balances) + noise (noise_sd), rounded and kept within 1-7, as a 7-point scale would
record it. The `within` design gives everyone the same order, which no analysis can tell from a
drift, so it has none.

The drift is centred on the session's middle position. Why: the 1-7 scale is clipped, and a
drift that carried the later positions toward 7 made people who differ in their effect differ
on average on the recorded scale too (their larger effects clipped more than their smaller
ones): a simulated null study of 24 or 48 people with 16-24 positions then held a true
difference of 0.02-0.03 points, which the analysis rightly found more often than 5 % of the
time. Centred, the scale's symmetry about its middle (4, rounded half to even) keeps a null
study null.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from retimer.records.schema import Rating, Record, Side, StreamRecord, StudyTags, Target
from retimer.study.design import williams_square
from retimer.study.staircase import StaircaseSettings, level_name, position_after

__all__ = ["DESIGNS", "feels_slow", "simulate_records", "simulate_staircase"]

DESIGNS = ("between", "within", "latin-square")


def simulate_records(design: str, conditions: Sequence[str], participants: int, units: int,
                     effects: Sequence[float], seed: int, *, person_sd: float = 0.8,
                     noise_sd: float = 1.0, base: float = 4.0, drift: float = 0.15,
                     slope_sd: float = 0.0,
                     scale: str = "speed", study: str = "simulated",
                     upstream_bound: float = 0.0, slow_below: float | None = None) -> list[Record]:
    """Stream and rating records of a simulated study.

    `effects[i]` is condition i's effect in rating points (effects[0], the reference's, is
    usually 0). between: each participant rates `units` units of one condition (participants
    take the conditions in turn); within: every participant rates each condition once, in the
    same order; latin-square: `units` units in their row of a Williams square. A share
    `upstream_bound` of the streams is marked as paced by the upstream. With `slow_below`, the
    participant also answers the page's "did this feel slow?": yes when the response's latent
    rating, with noise of its own (noise_sd), is below it (None: the question is not asked)."""
    import numpy as np

    if design not in DESIGNS:
        raise ValueError(f"design: expected one of {', '.join(DESIGNS)}, got {design!r}")
    rng = np.random.default_rng(seed)
    n = len(conditions)
    square = williams_square(n)
    records: list[Record] = []
    for k in range(participants):
        person = f"P{k + 1}"
        offset = rng.normal(0.0, person_sd)
        own = [0.0, *rng.normal(0.0, slope_sd, n - 1)] if slope_sd else [0.0] * n
        if design == "between":
            sequence = [k % n] * units
        elif design == "within":
            sequence = list(range(n))
        else:
            row = square[k % len(square)]
            sequence = [row[u % n] for u in range(units)]
        middle = (len(sequence) - 1) / 2
        for position, c in enumerate(sequence):
            stream = f"{person}-{position}"
            # a fixed order (within) confounds a drift: it has none
            period = 0.0 if design == "within" else drift * (position - middle)
            latent = base + offset + effects[c] + own[c] + period + rng.normal(0.0, noise_sd)
            score = int(min(7, max(1, round(float(latent)))))
            bound = bool(rng.random() < upstream_bound)
            slow = None if slow_below is None else \
                bool(latent + rng.normal(0.0, noise_sd) < slow_below)
            tags = StudyTags(study, person, conditions[c], position)
            records.append(StreamRecord(
                id=stream, study=tags, outcome="complete", upstream_bound=bound,
                target=Target(100.0 * (c + 1), 50.0 * (n - c)),
                emitted=Side(ttft_ms=100.0 * (c + 1) + 2, tps=50.0 * (n - c) - 1)))
            records.append(Rating(stream=stream, scores={scale: score}, slow=slow, study=study,
                                  participant=person, condition=conditions[c], unit=position))
    return records


def feels_slow(vary: str, stimulus: float, threshold: float, spread: float) -> float:
    """A simulated participant's chance of calling a stimulus slow: a logistic function of the
    log stimulus, 50 % at their threshold; `spread` is its scale in log units (0.1: from 0.27
    to 0.73 between 10 % under and over the threshold)."""
    z = math.log(stimulus / threshold) / spread
    z = z if vary == "ttft" else -z  # a lower rate is slower
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def simulate_staircase(settings: StaircaseSettings, thresholds: Sequence[float], units: int,
                       seed: int, *, spread: float = 0.12, delivery_sd: float = 0.0,
                       study: str = "simulated-staircase") -> list[Record]:
    """Stream and rating records of a staircase study whose participant k has threshold
    `thresholds[k]` (ms or tok/s): each unit's level follows their answers
    (retimer.study.staircase.position_after), the delivered stimulus is the level times a log-normal
    error (`delivery_sd`), and the answer is drawn from `feels_slow`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    records: list[Record] = []
    key = "ttft_ms" if settings.vary == "ttft" else "tps"
    for k, threshold in enumerate(thresholds):
        person = f"P{k + 1}"
        answered: list[tuple[int, bool]] = []
        for unit in range(units):
            level = position_after(settings, answered).level
            value = settings.levels[level]
            stimulus = value * math.exp(float(rng.normal(0.0, delivery_sd))) if delivery_sd else value
            slow = bool(rng.random() < feels_slow(settings.vary, stimulus, threshold, spread))
            answered.append((level, slow))
            stream = f"{person}-{unit}"
            tags = StudyTags(study, person, level_name(settings.vary, value), unit, level=value,
                             staircase=settings.describe())  # as the proxy writes it
            records.append(StreamRecord(
                id=stream, study=tags, outcome="complete", upstream_bound=False,
                target=Target(ttft_ms=value) if key == "ttft_ms" else Target(tps=value),
                emitted=Side(ttft_ms=stimulus) if key == "ttft_ms" else Side(tps=stimulus)))
            records.append(Rating(stream=stream, time=f"{k:04d}-{unit:06d}", slow=slow,
                                  study=study, participant=person, unit=unit))
    return records
