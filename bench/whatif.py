"""How long `retimer whatif` takes on a long session: a synthetic agent log of N calls (prompts up
to 150k tokens, outputs up to 3,000, some cached) against every built-in profile, side by side
with reading the same log back (retimer.records.reader), in one run.

    .venv/bin/python -m bench.whatif [--calls 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from retimer.profile.loader import builtin_profiles
from retimer.records.reader import read_logs
from retimer.report.whatif import whatif


def synthetic_log(path: Path, calls: int, seed: int = 1) -> None:
    """An agent-like session: calls a few seconds apart, some overlapping."""
    rng = random.Random(seed)
    t0, t = datetime(2026, 12, 1, tzinfo=UTC), 0.0
    with path.open("w") as f:
        for _ in range(calls):
            t += rng.expovariate(1 / 3.0)
            wait, tokens = rng.uniform(0.3, 20.0), rng.randint(1, 3000)
            prompt = rng.randint(100, 150_000)
            rec = {"time": (t0 + timedelta(seconds=t)).isoformat(), "protocol": "openai-chat",
                   "outcome": "complete", "status": 200,
                   "upstream": {"duration_ms": wait * 800, "tokens": tokens,
                                "channels": {"text": tokens}},
                   "emitted": {"duration_ms": wait * 1000, "tokens": tokens,
                               "channels": {"text": tokens}},
                   "model": {"prompt_tokens": prompt, "cached_tokens": rng.randint(0, prompt)}}
            f.write(json.dumps(rec) + "\n")


def best_of(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    profiles = [p for p in builtin_profiles() if not p.passthrough]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "session.jsonl"
        synthetic_log(log, args.calls)
        records = read_logs([log]).streams
        read_s = best_of(args.repeat, lambda: read_logs([log]))
        whatif_s = best_of(args.repeat, lambda: whatif("bench", records, profiles))
    print(f"{args.calls} calls x {len(profiles)} profiles: whatif {whatif_s * 1000:.1f} ms, "
          f"reading the log {read_s * 1000:.1f} ms (whatif / read = {whatif_s / read_s:.2f})")


if __name__ == "__main__":
    main()
