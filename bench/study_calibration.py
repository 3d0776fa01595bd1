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
from multiprocessing.pool import Pool as WorkerPool  # noqa: E402
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
    # centred, as simulated; a fixed order (within) has no drift
    period = np.zeros((2, draws)) if design.kind == "within" else \
        0.15 * (rng.integers(0, positions, (2, draws)) - (positions - 1) / 2)

    def score(latent: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(latent), 1, 7)

    ref = score(4.0 + person + period[0] + noise[0])
    second = score(4.0 + person + EFFECT + own + period[1] + noise[1])
    return float(second.mean() - ref.mean())


def _one(args: tuple[Design, int, bool]) -> tuple[float, float, float, float | None, tuple[float, ...]]:
    """One simulated study: (p, ci low, ci high, omnibus p) of its first comparison, and the
    p of each other pair (three conditions)."""
    from retimer.study.analysis import analyze
    from retimer.study.analysis_data import collect
    from retimer.study.simulate import simulate_records

    design, seed, alternative = args
    names = ["fast", "slow", "slower"][:design.conditions]
    units = design.units * design.conditions if design.kind == "latin-square" else 1
    records = simulate_records(design.kind, names, design.participants, units,
                               _effects(design, alternative), seed, slope_sd=design.slope_sd)
    result = analyze(collect(records), checks=False)
    first = next((c for c in result.comparisons
                  if c.reference == "fast" and c.condition == "slow"), None)
    other = tuple(c.p for c in result.comparisons if c is not first)
    omnibus = result.omnibus[0].p if result.omnibus else None
    if first is None:  # a note instead of a test (no spread left): counted, never "found"
        return math.nan, math.nan, math.nan, omnibus, other
    return first.p, first.ci[0], first.ci[1], omnibus, other


@dataclass(frozen=True)
class Calibration:
    design: str
    sims: int
    test: str
    untested: int  # studies the analysis gave a note, not a test (null and effect arms)
    type_i: float
    omnibus_type_i: float | None
    other_type_i: float | None  # the other pairs' (3 conditions): each one's rate, the highest
    coverage: float
    power: float
    seconds: float

    @property
    def within_bounds(self) -> bool:
        rates = [self.type_i] + ([self.other_type_i] if self.other_type_i is not None else [])
        return (all(TYPE_I[0] <= r <= TYPE_I[1] for r in rates)
                and COVERAGE[0] <= self.coverage <= COVERAGE[1])


def calibrate(design: Design, sims: int, pool: WorkerPool) -> Calibration:
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
    omni = [o for *_, o, _ in null if o is not None]
    untested = sum(math.isnan(p) for p, *_ in null + alt)
    return Calibration(
        design.name, sims, sample.comparisons[0].test, untested,
        sum(p < 0.05 for p, *_ in null) / sims,
        sum(p < 0.05 for p in omni) / len(omni) if omni else None,
        _other_pairs(null),
        sum(lo <= truth <= hi for _, lo, hi, *_ in alt) / max(1, sum(not math.isnan(lo)
                                                                 for _, lo, *_ in alt)),
        sum(p < 0.05 for p, *_ in alt) / sims, time.perf_counter() - started)


def _other_pairs(null: list[tuple[float, float, float, float | None, tuple[float, ...]]]
                 ) -> float | None:
    """With three conditions, each other pair's Type I error over the null studies (the
    higher of the two); a study's pairs are not independent, so each is counted on its own."""
    others = [o for *_, o in null if o]
    if not others:
        return None
    return max(sum(p < 0.05 for p in pair) / len(others) for pair in zip(*others, strict=True))


@dataclass(frozen=True)
class StaircaseCalibration:
    design: str
    sims: int
    person_coverage: float  # of each participant's own threshold by their interval
    people: int
    group_coverage: float  # of the population's median threshold by the group's interval
    censored: float  # the share of participants beyond the levels


STAIRCASE_MEDIAN = 600.0  # ms: the population's median threshold (log-normal, SD 0.5 in log)


def _one_staircase(args: tuple[float, int, int]) -> tuple[int, int, bool, int, int]:
    """One simulated staircase study: (people covered, people with an interval, group
    covered, censored, participants)."""
    import numpy as np

    from retimer.study.simulate import simulate_staircase
    from retimer.study.staircase import parse_staircase
    from retimer.study.threshold import thresholds

    spread, participants, seed = args
    settings = parse_staircase({"vary": "ttft", "levels": {"from": "100ms", "to": "3.2s",
                                                           "count": 16}}, ["speed"], {})
    rng = np.random.default_rng(seed)
    truth = list(STAIRCASE_MEDIAN * np.exp(rng.normal(0.0, 0.5, participants)))
    result = thresholds(simulate_staircase(settings, truth, 30, seed, spread=spread),
                        "simulated-staircase")
    assert result is not None
    truth_of = {f"P{k + 1}": t for k, t in enumerate(truth)}  # people are sorted by name
    fitted = [(p, truth_of[p.participant]) for p in result.people if p.ci is not None]
    covered = sum(p.ci[0] <= t <= p.ci[1] for p, t in fitted if p.ci is not None)
    ci = result.group_ci
    group = ci is not None and ci[0] <= STAIRCASE_MEDIAN <= ci[1]
    return covered, len(fitted), group, len(result.censored), participants


def calibrate_staircase(spread: float, participants: int, sims: int,
                        pool: WorkerPool) -> StaircaseCalibration:
    runs = pool.map(_one_staircase, [(spread, participants, 900_000 + s) for s in range(sims)],
                    chunksize=10)
    people = sum(r[1] for r in runs)
    return StaircaseCalibration(
        f"staircase {participants} people, 30 units, spread {spread:g}", sims,
        sum(r[0] for r in runs) / people, people, sum(r[2] for r in runs) / sims,
        sum(r[3] for r in runs) / sum(r[4] for r in runs))


def _table(results: list[Calibration], sims: int, seconds: float,
           stairs: list[StaircaseCalibration] | None = None) -> str:
    lines = [f"# Calibration of `retimer study analyze` ({datetime.now(UTC):%Y-%m-%d})", "",
             "Written by `python -m bench.study_calibration` (bench/study_calibration.py): "
             f"{sims} simulated null studies and {sims} with an effect per design, "
             f"{seconds / 60:.0f} minutes on {os.cpu_count()} cores ({platform.python_version()}).",
             "Ratings: person SD 0.8, residual SD 1.0, a period drift of 0.15 per position (centred on "
             "the session's middle), "
             "rounded to 1-7; the effect "
             f"{EFFECT:+g} (latent) for the second condition, twice it for the third.",
             f"Bounds: Type I error {TYPE_I[0]:.1%}-{TYPE_I[1]:.1%}, coverage "
             f"{COVERAGE[0]:.0%}-{COVERAGE[1]:.0%} (the standard error of a 5 % or 95 % share "
             f"of {sims} studies: {math.sqrt(0.05 * 0.95 / sims):.1%}).", "",
             "| design | headline test | Type I | other pairs' Type I (highest) | omnibus Type I "
             "| coverage | power | untested | in bounds |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        omni = "-" if r.omnibus_type_i is None else f"{r.omnibus_type_i:.1%}"
        other = "-" if r.other_type_i is None else f"{r.other_type_i:.1%}"
        lines.append(f"| {r.design} | {r.test} | {r.type_i:.1%} | {other} | {omni} | {r.coverage:.1%} | "
                     f"{r.power:.0%} | {r.untested} | {'yes' if r.within_bounds else '**no**'} |")
    if stairs:
        lines += ["", "Staircases (1-down/1-up on TTFT, 16 levels 100 ms-3.2 s; thresholds drawn "
                  f"log-normal around {STAIRCASE_MEDIAN:g} ms, SD 0.5 in log; `spread` is the "
                  "psychometric function's scale in log units: 0.35 shallow, 0.08 steep):", "",
                  "| design | studies | participants' intervals | covered | group interval "
                  "covers the median | beyond the levels |", "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.design} | {r.sims} | {r.people} | {r.person_coverage:.1%} | "
                  f"{r.group_coverage:.1%} | {r.censored:.1%} |" for r in stairs]
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
    results, stairs = [], []
    with Pool(args.jobs) as pool:
        for design in chosen:
            r = calibrate(design, args.sims, pool)
            results.append(r)
            other = "" if r.other_type_i is None else f" (other pairs {r.other_type_i:.1%})"
            print(f"{r.design:<48} {r.test:<12} type I {r.type_i:6.1%}{other} coverage {r.coverage:6.1%} "
                  f"power {r.power:4.0%}  {r.seconds:5.0f} s", flush=True)
        if not args.only or "staircase" in args.only:
            for spread in (0.35, 0.08):
                st = calibrate_staircase(spread, 12, max(50, args.sims // 8), pool)
                stairs.append(st)
                print(f"{st.design:<48} people {st.person_coverage:6.1%} group "
                      f"{st.group_coverage:6.1%} beyond {st.censored:5.1%}", flush=True)
    table = _table(results, args.sims, time.perf_counter() - started, stairs)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))


if __name__ == "__main__":
    main()
