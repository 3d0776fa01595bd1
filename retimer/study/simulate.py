"""Simulated studies with a known effect: the records a real study would leave, for checking the
analysis (does it find the effect it was given, and nothing when there is none) and for the
sample-size helper. Pure: numbers in, records out (numpy draws them).

A participant's rating of a unit is base + their own offset (person_sd) + the condition's effect
(0 for the reference) + a drift per position (a period effect, which a Latin square balances) +
noise (noise_sd), rounded and kept within 1-7, as a 7-point scale would record it. The `within`
design gives everyone the same order, which no analysis can tell from a drift, so it has none.
"""

from __future__ import annotations

from collections.abc import Sequence

from retimer.study.design import williams_square

__all__ = ["DESIGNS", "simulate_records"]

DESIGNS = ("between", "within", "latin-square")


def simulate_records(design: str, conditions: Sequence[str], participants: int, units: int,
                     effects: Sequence[float], seed: int, *, person_sd: float = 0.8,
                     noise_sd: float = 1.0, base: float = 4.0, drift: float = 0.15,
                     scale: str = "speed", study: str = "simulated",
                     upstream_bound: float = 0.0) -> list[dict[str, object]]:
    """Stream and rating records of a simulated study.

    `effects[i]` is condition i's effect in rating points (effects[0], the reference's, is
    usually 0). between: each participant rates `units` units of one condition (participants
    take the conditions in turn); within: every participant rates each condition once, in the
    same order; latin-square: `units` units in their row of a Williams square. A share
    `upstream_bound` of the streams is marked as paced by the upstream."""
    import numpy as np

    if design not in DESIGNS:
        raise ValueError(f"design: expected one of {', '.join(DESIGNS)}, got {design!r}")
    rng = np.random.default_rng(seed)
    n = len(conditions)
    square = williams_square(n)
    records: list[dict[str, object]] = []
    for k in range(participants):
        person = f"P{k + 1}"
        offset = rng.normal(0.0, person_sd)
        if design == "between":
            sequence = [k % n] * units
        elif design == "within":
            sequence = list(range(n))
        else:
            row = square[k % len(square)]
            sequence = [row[u % n] for u in range(units)]
        for position, c in enumerate(sequence):
            stream = f"{person}-{position}"
            period = 0.0 if design == "within" else drift * position  # a fixed order confounds it
            latent = base + offset + effects[c] + period + rng.normal(0.0, noise_sd)
            score = int(min(7, max(1, round(float(latent)))))
            bound = bool(rng.random() < upstream_bound)
            records.append({"id": stream, "study": study, "participant": person,
                            "condition": conditions[c], "unit": position, "outcome": "complete",
                            "upstream_bound": bound,
                            "target": {"ttft_ms": 100.0 * (c + 1), "tps": 50.0 * (n - c)},
                            "emitted": {"ttft_ms": 100.0 * (c + 1) + 2, "tps": 50.0 * (n - c) - 1}})
            records.append({"type": "rating", "stream": stream, "study": study,
                            "participant": person, "condition": conditions[c], "unit": position,
                            scale: score})
    return records
