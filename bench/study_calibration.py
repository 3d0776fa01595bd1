"""Does `retimer study analyze` keep its promise? Simulated studies of the designs researchers
run (8 to 48 participants; 1 or 8 units per condition; people alike in their effect or not,
slope SD 0 and 0.6; 2 or 3 conditions), each analysed as a real log would be (records in,
`collect`, `analyze`); per design the headline test's Type I error (no effect: how often
p < 0.05 for the first comparison, and for the omnibus test with 3 conditions), the coverage of
its 95 % interval and its power for a real effect. The interval's truth is the effect on the
1-7 scale the participants answer on (rounded and clipped, so not the latent one), computed
from a million draws.

    .venv/bin/python -m bench.study_calibration [--sims 2000] [--jobs 2] [--out FILE]

Bounds (issue 39): Type I error 3.5-6.5 %, coverage 93-97 %. Seeds are fixed: a run is
reproducible. BLAS threads are off (the matrices are tiny; threads only synchronise).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402

EFFECT = -0.5  # the second condition's latent effect in the alternative (the third: twice it)
TYPE_I = (0.035, 0.065)
COVERAGE = (0.93, 0.97)


@dataclass(frozen=True)
class Design:
    kind: str  # latin-square | within (each condition once, one order)
    participants: int
    units: int  # per condition and participant
    slope_sd: float
    conditions: int

    @property
    def name(self) -> str:
        return (f"{self.kind} {self.participants}x{self.units} slope {self.slope_sd:g}, "
                f"{self.conditions} conditions")


def designs() -> list[Design]:
    out = [Design("latin-square", n, u, s, k) for k in (2, 3) for u in (1, 8)
           for s in (0.0, 0.6) for n in (8, 12, 24, 48)]
    out += [Design("within", n, 1, s, k) for k in (2, 3) for s in (0.0, 0.6) for n in (8, 24)]
    return out


def _effects(design: Design, alternative: bool) -> list[float]:
    return [0.0, EFFECT, 2 * EFFECT][:design.conditions] if alternative else [0.0] * design.conditions


def observed_effect(design: Design, draws: int = 1_000_000) -> float:
    """The second condition's effect on the rounded, clipped 1-7 scale (what a linear model of
    the ratings estimates), by Monte Carlo with simulate_records' own defaults."""
    import numpy as np

    rng = np.random.default_rng(12345)
    person = rng.normal(0.0, 0.8, draws)
    noise = rng.normal(0.0, 1.0, (2, draws))
    own = rng.normal(0.0, design.slope_sd, draws) if design.slope_sd else 0.0
    positions = design.units * design.conditions
    period = 0.0 if design.kind == "within" else 0.15 * rng.integers(0, positions, (2, draws))

    def score(latent: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(latent), 1, 7)

    ref = score(4.0 + person + period[0] + noise[0] if design.kind != "within"
                else 4.0 + person + noise[0])
    second = score(4.0 + person + EFFECT + own + (period[1] if design.kind != "within" else 0.0)
                   + noise[1])
    return float(second.mean() - ref.mean())


def _one(args: tuple[Design, int, bool]) -> tuple[float, float, float, float | None]:
    """One simulated study: (p, ci low, ci high, omnibus p) of its first comparison."""
    from retimer.study.analysis import analyze
    from retimer.study.analysis_data import collect
    from retimer.study.simulate import simulate_records

    design, seed, alternative = args
    names = ["fast", "slow", "slower"][:design.conditions]
    units = design.units * design.conditions if design.kind == "latin-square" else 1
    records = simulate_records(design.kind, names, design.participants, units,
                               _effects(design, alternative), seed, slope_sd=design.slope_sd)
    result = analyze(collect(records))
    first = next(c for c in result.comparisons if c.reference == "fast" and c.condition == "slow")
    omnibus = result.omnibus[0].p if result.omnibus else None
    return first.p, first.ci[0], first.ci[1], omnibus


@dataclass(frozen=True)
class Calibration:
    design: str
    sims: int
    test: str
    type_i: float
    omnibus_type_i: float | None
    coverage: float
    power: float
    seconds: float

    @property
    def within_bounds(self) -> bool:
        return TYPE_I[0] <= self.type_i <= TYPE_I[1] and COVERAGE[0] <= self.coverage <= COVERAGE[1]


def calibrate(design: Design, sims: int, pool: Pool) -> Calibration:  # type: ignore[valid-type]
    from retimer.study.analysis import analyze
    from retimer.study.analysis_data import collect
    from retimer.study.simulate import simulate_records

    started = time.perf_counter()
    # fixed seeds of its own per design
    base = sum(ord(ch) * 131 ** i for i, ch in enumerate(design.name)) % 10**6 * 10_000
    null = pool.map(_one, [(design, base + s, False) for s in range(sims)], chunksize=20)
    alt = pool.map(_one, [(design, base + sims + s, True) for s in range(sims)], chunksize=20)
    truth = observed_effect(design)
    names = ["fast", "slow", "slower"][:design.conditions]
    units = design.units * design.conditions if design.kind == "latin-square" else 1
    sample = analyze(collect(simulate_records(design.kind, names, design.participants, units,
                                              _effects(design, True), 1, slope_sd=design.slope_sd)))
    omni = [o for *_, o in null if o is not None]
    return Calibration(
        design.name, sims, sample.comparisons[0].test,
        sum(p < 0.05 for p, *_ in null) / sims,
        sum(p < 0.05 for p in omni) / len(omni) if omni else None,
        sum(lo <= truth <= hi for _, lo, hi, _ in alt) / sims,
        sum(p < 0.05 for p, *_ in alt) / sims, time.perf_counter() - started)


def _table(results: list[Calibration], sims: int, seconds: float) -> str:
    lines = [f"# Calibration of `retimer study analyze` ({datetime.now(UTC):%Y-%m-%d})", "",
             "Written by `python -m bench.study_calibration` (bench/study_calibration.py): "
             f"{sims} simulated null studies and {sims} with an effect per design, "
             f"{seconds / 60:.0f} minutes on {os.cpu_count()} cores ({platform.python_version()}).",
             "Ratings: person SD 0.8, residual SD 1.0, a period drift of 0.15 per position, "
             "rounded to 1-7; the effect "
             f"{EFFECT:+g} (latent) for the second condition, twice it for the third.",
             f"Bounds: Type I error {TYPE_I[0]:.1%}-{TYPE_I[1]:.1%}, coverage "
             f"{COVERAGE[0]:.0%}-{COVERAGE[1]:.0%} (the standard error of a 5 % or 95 % share "
             f"of {sims} studies: {math.sqrt(0.05 * 0.95 / sims):.1%}).", "",
             "| design | headline test | Type I | omnibus Type I | coverage | power | in bounds |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        omni = "-" if r.omnibus_type_i is None else f"{r.omnibus_type_i:.1%}"
        lines.append(f"| {r.design} | {r.test} | {r.type_i:.1%} | {omni} | {r.coverage:.1%} | "
                     f"{r.power:.0%} | {'yes' if r.within_bounds else '**no**'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulated studies per design and arm")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="only designs whose name contains this")
    ap.add_argument("--out", default="", help="also write the table (Markdown) here")
    ap.add_argument("--json", default="", help="also write the figures (JSON) here")
    args = ap.parse_args()
    chosen = [d for d in designs() if args.only in d.name]
    started = time.perf_counter()
    results = []
    with Pool(args.jobs) as pool:
        for design in chosen:
            r = calibrate(design, args.sims, pool)
            results.append(r)
            print(f"{r.design:<48} {r.test:<12} type I {r.type_i:6.1%} coverage {r.coverage:6.1%} "
                  f"power {r.power:4.0%}  {r.seconds:5.0f} s", flush=True)
    table = _table(results, args.sims, time.perf_counter() - started)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
