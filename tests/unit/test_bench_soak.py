"""bench.soak's verdicts on synthetic samples (no proxy is run): a run too short to fit a line
through its second half says so instead of failing on a missing figure or inventing a trend,
and a run long enough is still judged by its fits."""

from __future__ import annotations

from typing import Any

from bench.soak import MIN_FIT_SAMPLES, analyse
from bench.soak_report import TOO_FEW, render

PERIOD_S = 2.0
MIB = 1024


def _run(per_half: int, rss_rise_per_sample_kb: float = 0.0, fds_after: int = 10) -> dict[str, Any]:
    """A soak's results with `per_half` samples in each half's fit window, idle phases of 3."""
    samples: list[dict[str, Any]] = []
    halves: list[tuple[float, float]] = []

    def add(phase: str, n: int, rss_kb: float, fds: int) -> None:
        for _ in range(n):
            t = len(samples) * PERIOD_S
            samples.append({"t": t, "phase": phase, "rss_kb": rss_kb, "fds": fds, "threads": 2,
                            "streams_done": 0, "active": 0})
            rss_kb += rss_rise_per_sample_kb if phase.startswith("load") else 0.0

    add("idle-before", 3, 100 * MIB, 10)
    for half, idle in ((1, "idle-mid"), (2, "idle-after")):
        start = len(samples) * PERIOD_S
        add(f"load-{half}", per_half, 104 * MIB, 60)
        halves.append((start, start + (per_half - 1) * PERIOD_S))
        add(idle, 3, samples[-1]["rss_kb"], fds_after if half == 2 else 10)
    client = {"streams": 300, "t0": 0.0, "counts": {}, "duration_p50_s": 0.4, "duration_p99_s": 2.0}
    return {"started": "2026-12-03 08:00 UTC", "quick": False, "seconds": 12.0, "concurrency": 32,
            "profile": "--profile gpt-5", "halves": halves, "clients": [client, client],
            "counts": {"openai-chat ok": 600}, "samples": samples, "records": {},
            "proxy_log": {"lines": 0, "tracebacks": 0, "kinds": {}},
            "machine": {"retimer": "abc1234", "nproc": 2, "cpu": "test", "python": "3.12",
                        "mitmproxy": "12", "loadavg_start": "0.1 0.1 0.1"}}


MEMORY = "memory: RSS fit over the second half rises < 4 MiB (2 %), idle RSS too"
DESCRIPTORS = "descriptors: idle count back to its level, fit over the second half flat"


def test_a_short_soak_reports_too_few_samples_instead_of_a_trend() -> None:
    res = _run(per_half=MIN_FIT_SAMPLES - 1)
    res["analysis"] = a = analyse(res)
    assert a["rss_kb"]["second_half"] == {"n": 2, "mean": 104 * MIB, "min": 104 * MIB, "max": 104 * MIB}
    assert a["checks"][MEMORY] is None and a["checks"][DESCRIPTORS] is None
    assert a["checks"]["threads: none added by the second half"] is True  # no line needed
    assert a["pass"]  # nothing failed; what could not be judged is said so below
    text = render(res)
    assert f"| {MEMORY} | not judged: {TOO_FEW} |" in text
    assert "**Verdict: PASS** (2 of 5 checks not judged" in text
    assert f"| resident memory (MiB) | 100.0 | 104.0-104.0 | 104.0 | 104.0-104.0 | {TOO_FEW} (2 samples) | {TOO_FEW} |" in text


def test_a_short_soak_still_fails_on_what_it_can_judge() -> None:
    res = _run(per_half=MIN_FIT_SAMPLES - 1, fds_after=30)  # descriptors left open after the load
    a = analyse(res)
    assert a["checks"][DESCRIPTORS] is False and a["checks"][MEMORY] is None
    assert not a["pass"]


def test_a_long_enough_soak_is_judged_by_its_fits() -> None:
    steady = analyse(_run(per_half=20))
    assert steady["checks"][MEMORY] is True and steady["checks"][DESCRIPTORS] is True and steady["pass"]
    res = _run(per_half=20, rss_rise_per_sample_kb=MIB)  # 1 MiB per sample: a leak
    res["analysis"] = leak = analyse(res)
    assert abs(leak["rss_kb"]["second_half"]["growth"] - 19 * MIB) < 1  # 19 steps of 1 MiB
    assert leak["checks"][MEMORY] is False and not leak["pass"]
    assert f"| {MEMORY} | **FAIL** |" in render(res)
