"""What a real client's run through a paced retimer must show on any machine however loaded, and
the figures bench/clients.py collects when the same cases run as a benchmark.

A busy machine can only make a paced stream later, never sooner: so a stream's record must not
show it leaving the proxy sooner than its profile allows (to the millisecond), and the client must
not be seen going on before the whole paced stream could have reached it. How much later a loaded
machine makes it is a benchmark's figure, not a test's: the upper bounds here only catch a stream
held grossly too long (a stall of seconds)."""

from __future__ import annotations

import json
import os
from typing import Any

# set by bench/clients.py: a JSON-lines file the client tests append their timing figures to,
# running each case with the passthrough profile too (see bench/clients.py)
BENCH_OUT = os.environ.get("RETIMER_CLIENT_BENCH", "")
EARLY_S = 0.005  # rounding of the records' milliseconds and of clocks read in two processes
SLOW_FACTOR, SLOW_SLACK_S = 1.5, 1.5  # a stream held longer than this is a stall, not load


def benchmarking() -> bool:
    return bool(BENCH_OUT)


def write_bench_row(**row: Any) -> None:
    """One case's timing figures for bench/clients.py."""
    with open(BENCH_OUT, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def predicted_s(rec: dict[str, Any]) -> float:
    """The seconds the record's own profile gives its stream: TTFT + (tokens - 1) / rate."""
    target, n = rec["target"], rec["emitted"]["tokens"]
    return target["ttft_ms"] / 1000 + max(n - 1, 0) / target["tps"]


def record_problems(what: str, rec: dict[str, Any]) -> list[str]:
    """The proxy's own account of one paced stream, against its profile."""
    if not rec["emitted"]["tokens"]:
        return []
    want = predicted_s(rec)
    ttft, took = rec["emitted"]["ttft_ms"] / 1000, rec["emitted"]["duration_ms"] / 1000
    problems = []
    if ttft < rec["target"]["ttft_ms"] / 1000 - EARLY_S:
        problems.append(f"{what}: first token after {ttft:.3f}s, the profile's TTFT is "
                        f"{rec['target']['ttft_ms'] / 1000:.3f}s")
    if took < want - EARLY_S:
        problems.append(f"{what}: {rec['emitted']['tokens']} tokens in {took:.3f}s, sooner than the "
                        f"profile's {want:.3f}s")
    if took > SLOW_FACTOR * want + SLOW_SLACK_S:
        problems.append(f"{what}: {rec['emitted']['tokens']} tokens in {took:.3f}s, the profile "
                        f"gives {want:.3f}s: held far too long")
    return problems
