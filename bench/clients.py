"""Real clients, as they ship, through the real retimer: how much longer a user waits with an exact
profile than with `--profile passthrough`, against what the profile predicts from the records.

The cases are the client tests' own (tests/e2e/test_clients_{agents,ide,sdk}.py: the agents, the
IDE agents' engines and the SDKs, forward and reverse, against tests/support/clients/fakeapi.py).
With RETIMER_CLIENT_BENCH set, each case runs its paced run and a passthrough run back to back
and writes the figures here; the tests themselves hold only bounds a loaded machine keeps. Run it
on a quiet machine: an agent's own pauses between calls vary by seconds under load.

    .venv/bin/python -m bench.clients                  # every case, about 25 minutes
    .venv/bin/python -m bench.clients -k codex         # a subset (pytest's -k)
    .venv/bin/python -m bench.clients --suite sdk      # one file: agents, ide or sdk

"Grew" is the paced run minus the passthrough run (agents: from the first LLM request to the
answer on stdout; SDKs: the client's own time around its calls); "predicted" is the union over
the paced run's calls of TTFT + (tokens - 1) / rate (less the passthrough run's own time in the
same calls). A case is within the goal when grew is within 15 % of predicted, and Codex's two
transports within 10 % of each other.

`--suite cassettes` runs the record-and-replay cases (tests/support/clients/cassette_run.py):
each agent's task recorded once (after a warm-up run), then replayed from the cassette with
nothing upstream at 15,000 tok/s (50 ms TTFT) and at o3 (no jitter). The goals are issue 40's:
at 15,000 tok/s the agent's wall time (its process, start to exit) within 20 % of the
recording's wall time less its model time plus the profile's; at o3 the replay's session time
(first call's start to last call's end) within 10 % of what `retimer whatif` predicted for o3
from the recording. Both figures are in the table for every replay.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITES = {"agents": "tests/e2e/test_clients_agents.py", "ide": "tests/e2e/test_clients_ide.py",
          "sdk": "tests/e2e/test_clients_sdk.py"}
CASSETTES = "cassettes"  # the record-and-replay cases of the agents' and IDE agents' files
GOAL, SAME_TIME = 0.15, 0.10
# The goals, by replay profile: at 15,000 tok/s the agent's wall time (its process,
# start to exit) within 20 % of the recording's time outside the model plus the profile's model
# time; at o3 the replay's session time within 10 % of what `retimer whatif` predicted.
CASSETTE_GOAL = {"taalas": 0.20, "o3": 0.10}


def run_cases(suites: list[str], select: str | None, out: Path) -> int:
    """The client tests in benchmark mode, one at a time; returns pytest's exit status."""
    files = {SUITES[s] for s in suites if s in SUITES}
    if CASSETTES in suites:
        files |= {SUITES["agents"], SUITES["ide"]}
        if not set(suites) & {"agents", "ide"}:  # the cassette cases alone
            select = f"({select}) and cassette" if select else "cassette"
    elif not select:
        select = "not cassette"
    argv = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
            "-m", "e2e", *sorted(files)]
    if select:
        argv += ["-k", select]
    env = {**os.environ, "RETIMER_CLIENT_BENCH": str(out)}
    return subprocess.run(argv, cwd=ROOT, env=env).returncode


def within(row: dict[str, Any]) -> bool:
    if row["suite"] == CASSETTES:
        got, want = cassette_measure(row)
        return abs(got - want) <= cassette_goal(row) * want
    return abs(row["grew_s"] - row["predicted_s"]) <= GOAL * row["predicted_s"]


def cassette_goal(row: dict[str, Any]) -> float:
    return next(g for name, g in CASSETTE_GOAL.items() if row["profile"].startswith(name))


def cassette_measure(row: dict[str, Any]) -> tuple[float, float]:
    """(measured, predicted) as the row's goal compares them: the process's wall time at the
    fastest profile, the session's time at o3 (see CASSETTE_GOAL)."""
    if row["profile"].startswith("taalas"):
        return row["wall_s"], row["predicted_wall_s"]
    return row["replay_s"], row["predicted_s"]


def cassette_table(rows: list[dict[str, Any]]) -> str:
    """The record-and-replay figures: each replay's session time (first call's start to last
    call's end) against `retimer whatif`'s prediction from the recording, and the agent
    process's wall time against the recording's wall time less its model time plus the
    profile's."""
    lines = ["| client | mode | replayed at | calls | recorded s | between calls s | whatif s | "
             "replay s | replay / whatif | process wall s | predicted wall s |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['client']} | {r['mode']} | {r['profile'].split(':')[0]} | {r['calls']} | "
                     f"{r['recorded_s']:.3f} | {r['between_s']:.3f} | {r['predicted_s']:.3f} | "
                     f"{r['replay_s']:.3f} | {r['replay_s'] / r['predicted_s']:.3f} | "
                     f"{r['wall_s']:.2f} | {r['predicted_wall_s']:.2f} |")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    """The figures as a Markdown table, one row per case."""
    lines = ["| suite | client | mode | passthrough s | paced s | grew s | predicted s | grew / predicted |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["suite"] in ("codex-transports", CASSETTES):
            continue
        ratio = r["grew_s"] / r["predicted_s"] if r["predicted_s"] else float("nan")
        lines.append(f"| {r['suite']} | {r['client']} | {r['mode']} | {r['base_s']:.2f} | "
                     f"{r['paced_s']:.2f} | {r['grew_s']:.3f} | {r['predicted_s']:.3f} | {ratio:.3f} |")
    return "\n".join(lines)


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """What misses the goal, one line each (empty: every case met it)."""
    misses = [f"{r['suite']} {r['client']} ({r['mode']}): grew {r['grew_s']:.3f}s, predicted "
              f"{r['predicted_s']:.3f}s" for r in rows
              if r["suite"] not in ("codex-transports", CASSETTES) and not within(r)]
    misses += [f"cassette {r['client']} ({r['mode']}) at {r['profile']}: "
               f"{cassette_measure(r)[0]:.3f}s, predicted {cassette_measure(r)[1]:.3f}s"
               for r in rows if r["suite"] == CASSETTES and not within(r)]
    codex = {r["client"]: r["grew_s"] for r in rows if r["suite"] == "codex-transports"}
    if len(codex) == 2 and abs(codex["codex-ws"] - codex["codex-sse"]) > SAME_TIME * codex["codex-sse"]:
        misses.append(f"Codex grew {codex['codex-ws']:.3f}s over WebSocket, {codex['codex-sse']:.3f}s "
                      "over SSE: more than 10 % apart")
    return misses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=sorted([*SUITES, CASSETTES]), action="append",
                    help="a client file to run, or the record-and-replay cases (repeatable; "
                         "default: all)")
    ap.add_argument("-k", dest="select", help="pytest's -k expression, to run some cases")
    ap.add_argument("--json", type=Path, help="also write the rows to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.jsonl"
        out.touch()
        status = run_cases(args.suite or [*SUITES, CASSETTES], args.select, out)
        rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    if replays := [r for r in rows if r["suite"] == CASSETTES]:
        print("\nSession cassettes, recorded then replayed with nothing upstream:\n")
        print(cassette_table(replays))
    misses = verdicts(rows)
    codex = {r["client"]: r for r in rows if r["suite"] == "codex-transports"}
    if codex:
        print("\nCodex, same task: " + ", ".join(
            f"{name} grew {r['grew_s']:.3f}s (predicted {r['predicted_s']:.3f}s)" for name, r in codex.items()))
    print(f"\nclients: {len(rows)} rows, {len(misses)} outside the goal; the tests: pytest exit {status}")
    for line in misses:
        print(f"  outside: {line}")
    sys.exit(1 if misses or status not in (0,) else 0)


if __name__ == "__main__":
    main()
