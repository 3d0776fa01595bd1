"""The harness the agent-client tests share (tests/e2e/test_clients_agents.py: the CLI agents;
tests/e2e/test_clients_ide.py: the IDE agents' engines): one task, the fake model that scripts it, the
proxies, one run of an agent and the checks of what it did and how long it took.

The task: one tool call that writes FILE with CONTENT (the agent's own file-writing tool), then a
text answer, FINAL. Each (agent, mode) runs with an exact profile (`--ttft 500ms --tps 30
--jitter 0`): it must exit 0, write FILE, print FINAL, call the tool once and answer once; every
LLM call has one complete record with the agent's protocol and the tokens the fake sent; and the
pacing holds with bounds a loaded machine keeps (`pacing_problems`): no stream left the proxy
sooner than the profile allows, the agent saw each paced stream whole before it went on, and no
stream took grossly longer. How close the agent's wait comes to the prediction (a paced run against
a passthrough run, within a few per cent on a quiet machine) is a benchmark: bench/clients.py runs
the same cases with RETIMER_CLIENT_BENCH set, and then `check_agent` runs both profiles and writes
the figures there instead.
  forward  `retimer run -- AGENT ...`: the agent uses a REAL provider host; upstream_map.py
           points that host at the fake API inside the proxy.
  reverse  `retimer --upstream https://127.0.0.1:<fake TLS port>`, the agent's base URL pointed at
           retimer's plain-HTTP listener.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from retimer.wire.tokenizer import count_tokens
from tests.support.clients.agent_script import ApiRequest, Reply
from tests.support.clients.api_bodies import token_deltas
from tests.support.clients.fakeapi import FakeAPI
from tests.support.clients.pacing import (
    EARLY_S,
    benchmarking,
    predicted_s,
    record_problems,
    write_bench_row,
)
from tests.support.paths import SUPPORT, TESTS
from tests.support.proxy import RetimerProxy

ROOT = TESTS.parent
CLIENTS_DIR = Path(os.environ.get("RETIMER_CLIENTS_DIR", ROOT / ".venv" / "clients"))
NPM_BIN = CLIENTS_DIR / "npm" / "node_modules" / ".bin"
UPSTREAM_MAP = SUPPORT / "clients" / "upstream_map.py"

TTFT_MS, TPS = 500.0, 30.0
PACED = ("--profile", "gpt-5", "--ttft", f"{TTFT_MS:.0f}ms", "--tps", f"{TPS:.0f}", "--jitter", "0")
PASSTHROUGH = ("--profile", "passthrough")

FILE = "retimer-check.txt"
CONTENT = "retimer agent check: 42 zebras crossed the road\n"
PROMPT = f"Create the file {FILE} with the agreed line in it, then tell me when you are done."
FINAL = ("Done: I wrote the agreed line to retimer-check.txt in the working directory, and the file "
         "now holds exactly that one line with its trailing newline. Nothing else was changed, no "
         "other file was touched, and no command is still running. Retimer keeps every word of "
         "this answer and changes only the time between them, which is why this sentence is long "
         "enough to measure a decode rate of thirty tokens per second with some confidence. The "
         "same words arrive whether the proxy plays them at the pace of a fast model or a slow one, "
         "and an agent that waits for them waits exactly as long as the profile says it should, "
         "call after call, whatever the transport underneath.")
SIDE = "Retimer agent check"  # any call without the tool (a session title, a summary)
# Gemini CLI's model router (`-m auto`) asks a small model, without streaming, how complex the
# request is, as JSON of the schema it sends
ROUTE = '{"complexity_reasoning": "One small file to write.", "complexity_score": 12}'
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-agent-test-fake", "OPENAI_API_KEY": "sk-agent-test-fake",
        "CODEX_API_KEY": "sk-agent-test-fake", "GEMINI_API_KEY": "agent-test-fake"}
_SCRUB = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
          "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
          "NODE_EXTRA_CA_CERTS", "NODE_USE_ENV_PROXY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
          "GOOGLE_GEMINI_BASE_URL", "OPENCODE_CONFIG_CONTENT", "CODEX_HOME", "XDG_CONFIG_HOME",
          "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")
# the protocol (adapter) retimer must name in the record of each kind of fake API call
PROTOCOL = {"openai-chat": "openai-chat", "openai-responses": "openai-responses",
            "openai-responses-ws": "websocket", "anthropic-messages": "anthropic-messages",
            "gemini": "gemini-sse"}


@dataclass
class Launch:
    """How one run starts: argv, extra environment, and the files the agent reads."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Agent:
    name: str
    api: str  # the fake API kind its LLM calls are (fakeapi's ApiRequest.api)
    tool: str | None  # its file-writing tool, as the API offers it (None: aider's edit in text)
    arguments: Callable[[Path], dict[str, Any]]  # the tool call's arguments, given FILE's path
    launch: Callable[[Path, Path, str | None], Launch]  # (work, home, reverse base URL or None)
    binary: Path
    # a Responses custom (freeform) tool's raw input instead of JSON arguments (Codex's apply_patch)
    custom_input: Callable[[Path], str] | None = None
    # on stdout once the agent has its whole answer (aider prints the answer as it streams in, and
    # its edit block comes after FINAL)
    done: str = FINAL[-40:]
    # what FILE holds after the tool ran (Cline's apply_patch leaves out the last line's newline)
    written: str = CONTENT



def path_args(key: str, content: str = "content") -> Callable[[Path], dict[str, Any]]:
    """A file-writing tool's arguments: FILE's absolute path under `key`, CONTENT under `content`."""
    return lambda p: {key: str(p), content: CONTENT}


def patch_text(path: Path) -> str:
    """An apply_patch patch that adds FILE with CONTENT (Codex's, Cline's and Copilot's file tool).
    The path is relative to the working directory, so every run is sent the same tokens."""
    lines = "".join(f"+{line}\n" for line in CONTENT.splitlines())
    return f"*** Begin Patch\n*** Add File: {path.name}\n{lines}*** End Patch\n"


WHOLE_EDIT_REPLY = f"{FINAL}\n\n{FILE}\n```\n{CONTENT}```\n"


def expected_answers(agent: Agent) -> list[tuple[str | None, str]]:
    """(tool, text) of each answer the task takes: the tool call, then FINAL; an agent that edits in text (aider): one answer."""
    if agent.tool is None:
        return [(None, WHOLE_EDIT_REPLY)]
    return [(agent.tool, ""), (None, FINAL)]


class TaskScript:
    """The fake model: the agent's file-writing tool (once), then FINAL; SIDE when no tool is
    offered (a title or summary call), ROUTE to Gemini CLI's router. `target` is set per run:
    where FILE must go."""

    def __init__(self) -> None:
        self.agent: Agent | None = None
        self.target: Path | None = None

    def __call__(self, req: ApiRequest) -> Reply:
        agent = self.agent
        if agent is not None and agent.tool is None:  # aider: the edit is in the text
            return Reply(WHOLE_EDIT_REPLY)
        if _is_router(req):
            return Reply(ROUTE)
        if agent is None or agent.tool not in req.tools:
            return Reply(SIDE)
        if req.has_tool_result:
            return Reply(FINAL)
        assert self.target is not None
        if agent.custom_input is not None:
            return Reply("", agent.tool, custom_input=agent.custom_input(self.target))
        return Reply("", agent.tool, agent.arguments(self.target))


def _is_router(req: ApiRequest) -> bool:
    config = req.body.get("generationConfig") if isinstance(req.body, dict) else None
    schema = config.get("responseJsonSchema") if isinstance(config, dict) else None
    return req.api == "gemini" and not req.stream and "complexity_score" in json.dumps(schema)


def protocol(req: ApiRequest) -> str:
    """The protocol retimer must name in the record of a fake API call."""
    return PROTOCOL[req.api] if req.stream or req.api == "openai-responses-ws" else "non-streaming"


# --------------------------------------------------------------------------------------------
# the proxies (forward/reverse x passthrough/paced) a test module shares
# --------------------------------------------------------------------------------------------
class Proxies:
    """retimer proxies shared by the cases (each costs seconds to start on a loaded machine):
    forward (upstream_map.py points the real hosts at the fake) and reverse (`--upstream` the
    fake's TLS port), each with the passthrough and the paced profile."""

    def __init__(self, tmp: Path, fake: FakeAPI) -> None:
        self.tmp, self.fake, self.confdir = tmp, fake, tmp / "confdir"
        self.running: dict[tuple[str, tuple[str, ...]], RetimerProxy] = {}

    def get(self, mode: str, profile: tuple[str, ...]) -> RetimerProxy:
        if (mode, profile) not in self.running:
            name = f"{mode}-{'paced' if profile == PACED else 'passthrough'}"
            self.running[mode, profile] = start_proxy(self.tmp / name, self.fake, self.confdir,
                                                      mode, profile)
        return self.running[mode, profile]

    def stop(self) -> None:
        for proxy in self.running.values():
            proxy.stop()

    def __enter__(self) -> Proxies:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_proxy(tmp: Path, fake: FakeAPI, confdir: Path, mode: str, args: tuple[str, ...],
                fake_port: int | None = None) -> RetimerProxy:
    """A started retimer in `mode` over the fake API (forward: upstream_map.py points the real
    hosts at `fake_port`, the fake's by default; reverse: `--upstream` it), with `confdir`'s CA
    (`retimer run` checks it to reuse a proxy)."""
    port = fake.port if fake_port is None else fake_port
    argv = ["--quiet", *args]
    if mode == "forward":
        argv += ["--set", f"scripts={UPSTREAM_MAP}"]

    else:
        argv += ["--upstream", f"https://127.0.0.1:{port}"]
    proxy = RetimerProxy(tmp, *argv, upstream_ca=fake.ca_path)
    proxy.confdir = confdir
    proxy.args = [f"confdir={confdir}" if a.startswith("confdir=") else a for a in proxy.args]
    with pytest.MonkeyPatch.context() as mp:  # read by upstream_map.py in the proxy
        mp.setenv("FAKEAPI_PORT", str(port))
        mp.setenv("FAKEAPI_HTTP_PORT", str(fake.http_port))
        return proxy.start()


@dataclass
class Run:
    agent: str
    mode: str
    paced: bool
    returncode: int
    stdout: str
    stderr: str
    work: Path
    wall: float  # process start to exit
    active: float  # the first LLM request's arrival at the fake API to the answer on stdout
    llm: list[ApiRequest]  # the calls the fake model answered
    turns: list[ApiRequest]  # every LLM call, with a Codex WebSocket prewarm (generate: false)
    records: list[dict[str, Any]]

    @property
    def what(self) -> str:
        return f"{self.agent} ({self.mode}, {'paced' if self.paced else 'passthrough'})"


RESULTS: dict[tuple[str, str, bool], Run] = {}


def log_lines(proxy: RetimerProxy) -> list[str]:
    if not proxy.log_path.exists():
        return []
    return [x for x in proxy.log_path.read_text().split("\n")[:-1] if x.strip()]


def is_turn(req: ApiRequest) -> bool:
    return req.api in PROTOCOL


def execute(argv: list[str], env: dict[str, str], cwd: Path, done: str,
             timeout: float = 240) -> tuple[int, str, str, float | None]:
    """Run to exit; returns (exit code, stdout, stderr, when `done` reached stdout: the answer).
    The agent's own work after it has shown the answer (saving its session, flushing logs,
    stopping helpers) varies by a second on a loaded machine and is no part of what it waited for."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    out, err = bytearray(), bytearray()
    answered: list[float] = []
    last_words = done.encode()

    def read_out() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):
            out.extend(chunk)
            if not answered and last_words in out:
                answered.append(time.time())

    def read_err() -> None:
        assert proc.stderr is not None
        while chunk := proc.stderr.read1(65536):
            err.extend(chunk)

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for t in readers:
        t.start()
    try:
        returncode = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in readers:
            t.join(10)
    return (returncode, out.decode(errors="replace"), err.decode(errors="replace"),
            answered[0] if answered else None)


def run_agent(agent: Agent, mode: str, paced: bool, fake: FakeAPI, script: TaskScript,
              proxies: Proxies, tmp: Path, proxy: RetimerProxy | None = None) -> Run:
    """One run of `agent` through the shared proxy of (mode, profile), or through `proxy`."""
    assert agent.binary.exists(), (
        f"{agent.name}: {agent.binary} is not installed: run scripts/install-clients")
    if proxy is None:
        proxy = proxies.get(mode, PACED if paced else PASSTHROUGH)
    work, home = tmp / "work", tmp / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    launch = agent.launch(work, home, proxy.url if mode == "reverse" else None)
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update({**KEYS, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **launch.env})
    if mode == "forward":  # retimer run finds the running forward proxy (same CA) and reuses it
        argv = [sys.executable, "-m", "retimer", "run", "--listen-port", str(proxy.port),
                "--set", f"confdir={proxies.confdir}", "--", *launch.argv]
    else:
        argv = launch.argv
    fake.clear()
    script.agent, script.target = agent, work / FILE
    seen = len(log_lines(proxy))
    start = time.time()
    try:
        returncode, stdout, stderr, answered = execute(argv, env, work, agent.done)
    finally:
        script.agent = None
    end = time.time()
    turns = [r for r in fake.requests if is_turn(r)]
    run = Run(agent.name, mode, paced, returncode, stdout, stderr, work, end - start,
              (answered or end) - turns[0].time if turns else 0.0, fake.llm_requests(), turns, [])
    deadline = time.monotonic() + 5  # a record is written as its stream ends at the proxy
    while True:
        run.records = [json.loads(x) for x in log_lines(proxy)[seen:]]
        if len(run.records) >= len(run.turns) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    RESULTS[agent.name, mode, paced] = run
    return run


def expected_tokens(req: ApiRequest) -> int:
    assert req.reply is not None
    return sum(count_tokens(d) for d in token_deltas(req.api, req.reply))


def summary(records: list[dict]) -> list[tuple]:
    return [(r["protocol"], r["url"], r["upstream"]["tokens"], r["emitted"]["tokens"],
             r["emitted"]["ttft_ms"], r["emitted"]["duration_ms"]) for r in records]


def check_run(run: Run, agent: Agent) -> list[str]:
    """Asserts what the agent did; returns what is wrong with the records (the timing check still
    runs and reports its figures when a record is missing)."""
    what = run.what
    tail = f"\n--- stdout ---\n{run.stdout[-3000:]}\n--- stderr ---\n{run.stderr[-5000:]}"
    assert run.returncode == 0, f"{what}: exit {run.returncode}{tail}"
    written = run.work / FILE
    assert written.exists(), f"{what}: {FILE} was not written{tail}"
    assert written.read_text() == agent.written, f"{what}: {FILE} holds {written.read_text()!r}"
    assert FINAL in run.stdout, f"{what}: the final answer is not in the agent's output{tail}"
    # the task: one tool call, then one answer after its result (calls without the tool, such as
    # a title, may come too)
    answered = [(r.reply.tool, r.reply.text) for r in run.llm if r.reply is not None]
    assert [a for a in answered if a not in ((None, SIDE), (None, ROUTE))] == expected_answers(agent), (
        f"{what}: the fake model answered {answered}")
    assert all(r.api == agent.api for r in run.turns), (what, [r.api for r in run.turns])
    # every LLM call has a complete record of the agent's protocol with the tokens it was sent
    seen = summary(run.records)
    if len(run.records) != len(run.turns):
        return [f"{what}: {len(run.turns)} LLM calls ({[r.api for r in run.turns]}), "
                f"{len(run.records)} records {seen}"]
    problems = []
    previous = float("-inf")  # when the call before reached the fake API
    for req, rec in zip(run.turns, run.records, strict=True):
        expect = expected_tokens(req) if req.reply is not None else 0
        if rec["protocol"] != protocol(req) or rec["outcome"] != "complete" or (
                rec["upstream"]["tokens"], rec["emitted"]["tokens"]) != (expect, expect):
            problems.append(f"{what}: a {req.api} call that sent {expect} tokens has the record "
                            f"{rec['protocol'], rec['outcome'], rec['upstream']['tokens'], rec['emitted']['tokens']}")
        if run.paced and (rec["target"]["ttft_ms"], rec["target"]["tps"]) != (TTFT_MS, TPS):
            problems.append(f"{what}: target {rec['target']}")
        # `time` is when the call reached the proxy: the fake API saw it a moment later (up to
        # 1.4 s seen under a CPU hog), and a WebSocket's turn after the turn before it reached
        # the fake API (turns of a socket are sequential: one timed from the socket's start,
        # not its message, would be earlier)
        at = dt.datetime.fromisoformat(rec["time"]).timestamp()
        floor = previous if rec["protocol"] == "websocket" else req.time - 5.0
        if not floor - 0.05 <= at <= req.time + 0.05:
            problems.append(f"{what}: the record of a {req.api} call that reached the fake API at "
                            f"{dt.datetime.fromtimestamp(req.time, dt.UTC).isoformat()} says "
                            f"time {rec['time']}")
        previous = req.time
    ids = [rec["id"] for rec in run.records]
    if len(set(ids)) != len(ids):
        problems.append(f"{what}: record ids repeat: {ids}")
    # a WebSocket turn is a call: its socket in `connection`, its place in `turn`
    for rec in run.records:
        if rec["protocol"] == "websocket" and rec["id"] != f"{rec.get('connection')}.{rec.get('turn')}":
            problems.append(f"{what}: a WebSocket turn's record says id {rec['id']}, connection "
                            f"{rec.get('connection')}, turn {rec.get('turn')}")
    return problems


def whatif_waits(records: list[dict[str, Any]], tmp: Path, profiles: str = "cerebras,gpt-5,o3",
                 *, cold: bool = False) -> dict[str, float]:
    """`retimer whatif --json` on the records as one session: each profile's waiting time (s).
    `cold`: with no prompt tokens cached. A record's `cached_tokens` is what a provider's cache
    would hold given everything the proxy saw before (an earlier run of the same task, a Codex
    prewarm): two sessions compared turn by turn are compared cold."""
    if cold:
        records = [{**r, "model": {**r["model"], "cached_tokens": 0}} for r in records]
    return {p["profile"]: p["waiting_s"] for p in whatif_session(records, tmp, profiles)["profiles"]}


def whatif_session(records: list[dict[str, Any]], tmp: Path, profiles: str) -> dict[str, Any]:
    """`retimer whatif --json` on the records as one session: its JSON object (docs/whatif.md)."""
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "whatif.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run([sys.executable, "-m", "retimer", "whatif", str(log), "--json",
                           "--profiles", profiles], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    (session,) = json.loads(done.stdout)["sessions"]
    return session


def predicted_llm_time(run: Run) -> float:
    """Seconds of LLM time the profile gives the run's calls: the union over calls of
    [start, start + TTFT + (tokens - 1) / rate] (calls in parallel overlap), with each call's
    tokens from its record and its start from the fake API's log (the proxy forwards a request at
    once); a call that carried no token (a WebSocket prewarm) is not held, and a call made after
    the answer was on stdout (a session title or summary) is no part of the wait."""
    spans = []
    for t0, rec in _before_answer(run):
        n = rec["emitted"]["tokens"]
        if n:
            spans.append((t0, t0 + rec["target"]["ttft_ms"] / 1000 + (n - 1) / rec["target"]["tps"]))
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _before_answer(run: Run) -> list[tuple[float, dict[str, Any]]]:
    """(start, record) of the run's calls that began before its answer was on stdout."""
    starts = [r.time for r in run.turns] if len(run.turns) == len(run.records) else [
        dt.datetime.fromisoformat(rec["time"]).timestamp() for rec in run.records]
    answer = starts[0] + run.active if starts else 0.0
    return [(t0, rec) for t0, rec in zip(starts, run.records, strict=True) if t0 < answer]


def passthrough_llm_time(run: Run) -> float:
    """The seconds the same calls took at the proxy without pacing (the fake's own latency, which
    the paced TTFT hides)."""
    return sum((r["emitted"]["ttft_ms"] or 0) / 1000 for _, r in _before_answer(run)
               if r["emitted"]["tokens"])


def growth(base: Run, paced: Run) -> tuple[float, float]:
    """(grew, predicted): the paced run's extra time from its first LLM request to its answer
    over the passthrough run's, and the profile's prediction of it from the paced records."""
    return paced.active - base.active, predicted_llm_time(paced) - passthrough_llm_time(base)


def pacing_problems(run: Run) -> list[str]:
    """The paced run's bounds that hold on a loaded machine (tests/support/clients/pacing.py):
    every stream's record no sooner than its profile and not held grossly longer; and the agent,
    as seen from outside, went on only after each paced stream could have reached it whole: the
    request carrying the tool's result came after the tool call's stream, the answer on stdout
    after the answer's stream."""
    if len(run.turns) != len(run.records):
        return []  # check_run names it
    problems: list[str] = []
    answered = run.turns[0].time + run.active if run.turns else 0.0
    for i, (req, rec) in enumerate(zip(run.turns, run.records, strict=True)):
        problems += record_problems(f"{run.what}: a {req.api} call", rec)
        if req.reply is None or not rec["emitted"]["tokens"]:
            continue
        ends = dt.datetime.fromisoformat(rec["time"]).timestamp() + predicted_s(rec) - EARLY_S
        if req.reply.tool is not None:
            after = [r for r in run.turns[i + 1:] if r.has_tool_result]
            if after and after[0].time < ends:
                problems.append(f"{run.what}: the tool's result was sent {ends - after[0].time:.3f}s "
                                f"before the paced tool call could have reached the agent whole")
        elif req.reply.text in (FINAL, WHOLE_EDIT_REPLY) and answered < ends:
            problems.append(f"{run.what}: the answer was on stdout {ends - answered:.3f}s before its "
                            f"paced stream could have reached the agent whole")
    return problems


def check_agent(agent: Agent, mode: str, fake: FakeAPI, script: TaskScript, proxies: Proxies,
                tmp_path: Path) -> None:
    """One paced run of an agent in one mode and every check of it; under bench/clients.py, a
    passthrough run too, and the paced run's growth over it against the prediction, written
    there (a figure: an agent's own pauses vary by seconds on a loaded machine)."""
    paced = run_agent(agent, mode, True, fake, script, proxies, tmp_path / "paced")
    problems = check_run(paced, agent) + pacing_problems(paced)
    if benchmarking():
        base = run_agent(agent, mode, False, fake, script, proxies, tmp_path / "passthrough")
        problems += check_run(base, agent)
        grew, predicted = growth(base, paced)
        write_bench_row(suite="agents", client=agent.name, mode=mode, base_s=base.active,
                        paced_s=paced.active, grew_s=grew, predicted_s=predicted,
                        calls=len(paced.turns))
    assert not problems, "\n".join(problems)
