"""Run the retimer benchmarks: `.venv/bin/python -m bench.run [--quick] [--update-doc]` (from the checkout).

Starts a fake LLM upstream (tests/support/upstream.py), the real `retimer` CLI and plain `mitmdump`
as subprocesses, and a measuring client in its own process (bench.client). Writes
bench/results/<time>.json and bench/results/latest.{json,md}, prints the markdown tables, and
with --update-doc replaces the results section of BENCHMARKS.md. Timing depends on the
machine: compare numbers from one run, never across machines. Nothing here asserts timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import scenarios
from bench.harness import Client, FakeLLM
from bench.report import render

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOC = HERE.parent / "BENCHMARKS.md"
START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
SECTIONS = ("fidelity", "jitter", "overhead", "concurrency", "formats")


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import httpx
    from mitmproxy.version import VERSION

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "retimer": retimer_version(),
        "nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
        "python": platform.python_version(), "mitmproxy": VERSION, "httpx": httpx.__version__,
        "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def retimer_version(checkout: Path = HERE.parent) -> str:
    """The commit under test (of `checkout`), marked when retimer/ has uncommitted changes."""
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" + uncommitted changes in retimer/" if git("status", "--porcelain",
                                                                  "retimer") else "")


def update_doc(markdown: str) -> None:
    """Replace the text between the result markers in BENCHMARKS.md."""
    text = DOC.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{DOC} has no {START} ... {END} section")
    new = re.sub(re.escape(START) + r".*?" + re.escape(END),
                 lambda _: f"{START}\n{markdown}{END}", text, flags=re.S)
    DOC.write_text(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 2 minutes)")
    ap.add_argument("--only", action="append", choices=SECTIONS,
                    help="run only this section (repeatable)")
    ap.add_argument("--seed", type=int, default=7, help="seed for texts and the proxies' timing")
    ap.add_argument("--update-doc", action="store_true",
                    help="write the tables into BENCHMARKS.md between its result markers")
    ap.add_argument("--from-json", metavar="FILE", type=Path,
                    help="measure nothing: render the tables of an earlier results file")
    args = ap.parse_args()
    if args.from_json:
        markdown = render(json.loads(args.from_json.read_text()))
        print(markdown)
        if args.update_doc:
            update_doc(markdown)
        return
    plan = scenarios.QUICK if args.quick else scenarios.FULL
    sections = args.only or list(SECTIONS)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    res: dict[str, Any] = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "quick": args.quick,
                           "seed": args.seed, "machine": machine(), "plan": plan.__dict__}
    with tempfile.TemporaryDirectory(prefix="retimer-bench-") as td, \
            FakeLLM(bursts=3) as fake, Client() as client:
        tmp = Path(td)
        res["section_s"] = {}
        for name in sections:
            s0 = time.monotonic()
            res[name] = getattr(scenarios, name)(client, fake, tmp, plan, args.seed)
            res["section_s"][name] = time.monotonic() - s0
    res["duration_s"] = time.monotonic() - t0
    res["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    markdown = render(res)
    RESULTS.mkdir(exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    name = f"{stamp}{'-quick' if args.quick else ''}.json"
    for path in (RESULTS / name, RESULTS / "latest.json"):
        path.write_text(json.dumps(res, indent=1, default=float))
    (RESULTS / "latest.md").write_text(markdown)
    print(markdown)
    print(f"[bench] results: {RESULTS / name} ({res['duration_s']:.0f} s)", file=sys.stderr)
    if args.update_doc:
        update_doc(markdown)
        print(f"[bench] updated {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
