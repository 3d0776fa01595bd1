"""The sans-io core's CPU per emission: `.venv/bin/python -m bench.core [--repeat N] [--streams N]`.

Issue 41's floor for the paced path without the proxy around it: N OpenAI streams (200 tokens
each, three words per upstream event, paced one token per network event at 100 tok/s, as
bench.cpu's paced route) are fed whole, then their playouts (`retimer.timing.playout.Playout`)
are stepped round robin, each at its own next wake, as the proxy's timers interleave them,
until every stream has ended. Process CPU (parse, schedule, split, count) divided by the
emissions; the best and the median of `--repeat` runs. `--code DIR` measures another
checkout's core (a git worktree, or a build of it) the same way, in the same process order.
Compare with bench.cpu's paced route, where the same work runs between mitmproxy, the kernel's
socket work and other processes and costs more per emission (BENCHMARKS.md, "Session 28").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

TOKENS, WORDS_PER_EVENT = 200, 3


def measure(repeat: int, streams: int) -> dict[str, float]:
    """us per emission, best and median of `repeat` runs (this process's retimer)."""
    import numpy as np

    from bench.harness import make_openai_stream, prose
    from retimer.profile.settings import ProfileSettings
    from retimer.timing import emission
    from retimer.timing.pacer import StreamPacer
    from retimer.timing.playout import Playout, PlayoutPool
    from retimer.wire.protocols.openai_chat import OpenAIChatAdapter

    body = make_openai_stream(prose(TOKENS, 11), words_per_chunk=WORDS_PER_EVENT)
    chunks = [body[i:i + 4000] for i in range(0, len(body), 4000)]
    profile = ProfileSettings("human-reading", "100ms", "100", "0").build()

    def run(seed: int) -> float:
        pool = PlayoutPool()
        playouts = [Playout(StreamPacer(OpenAIChatAdapter(),
                                        profile.stream_timing(np.random.default_rng(seed + i)), 0.0),
                            pool, 0.0) for i in range(streams)]
        c0 = time.process_time()
        for p in playouts:
            for c in chunks:
                p.feed(c, 0.0)
            p.end(0.0)
        now = [0.0] * streams
        live, emissions = list(range(streams)), 0
        while live:
            for i in list(live):
                step = playouts[i].step(now[i], None)
                emissions += bool(step.data)
                if step.data and step.end is None:
                    playouts[i].parse_ahead(now[i], step.wake, emission.PARSE_BATCH_STEPS)  # as the driver
                if step.end is not None:
                    live.remove(i)
                else:
                    now[i] = step.wake if step.wake is not None else now[i] + 0.01
        assert emissions >= streams * TOKENS, emissions  # one token per event, at least
        return (time.process_time() - c0) / emissions * 1e6

    runs = sorted(run(100 * k) for k in range(repeat))
    return {"best_us": runs[0], "median_us": runs[len(runs) // 2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--code", type=Path, metavar="DIR",
                    help="also measure the core of the checkout in DIR, in a process of its own")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    args = ap.parse_args()
    res: dict[str, object] = {"streams": args.streams, "repeat": args.repeat,
                              "this": measure(args.repeat, args.streams)}
    if args.code is not None:
        script = (f"import json, sys; sys.path.insert(0, {str(args.code.resolve())!r}); "
                  "from bench.core import measure; "
                  f"print(json.dumps(measure({args.repeat}, {args.streams})))")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              cwd=args.code, check=True)
        res["base"] = json.loads(done.stdout)
        res["this_over_base"] = res["this"]["best_us"] / res["base"]["best_us"]  # type: ignore[index]
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
