"""Real coding agents through the real `retimer`, forward and reverse, against tests/clients/fakeapi.py.

The agents are the shipped CLIs, installed at pinned versions by scripts/install-clients into
.venv/clients (a missing one fails its test: run scripts/install-clients): Claude Code, Codex (its
default Responses-over-WebSocket transport and its SSE transport), Gemini CLI, opencode,
Simon Willison's `llm` and aider. Each one gets the same task from the fake model: one tool call
that writes FILE with CONTENT (its own file-writing tool: Write, apply_patch, write_file, write, a
`llm` function), then a text answer, FINAL; aider, which edits through text, gets FINAL and the
file's content in its "whole" edit format in one answer. Modes:
  forward  `retimer run -- AGENT ...`: the agent uses its REAL default host (api.anthropic.com,
           api.openai.com, generativelanguage.googleapis.com); tests/clients/upstream_map.py
           points that host at the fake API inside the proxy, whose CA retimer trusts.
  reverse  `retimer --upstream https://127.0.0.1:<fake TLS port>` and the agent's own base-URL
           setting (ANTHROPIC_BASE_URL, Codex's openai_base_url / provider base_url,
           GOOGLE_GEMINI_BASE_URL, opencode's provider baseURL, OPENAI_BASE_URL, aider's
           --openai-api-base) pointed at
           retimer's plain-HTTP listener.
Each (agent, mode) runs twice: with `--profile passthrough` and with an exact profile
(`--ttft 500ms --tps 30 --jitter 0`). Both runs must: exit 0, write FILE with CONTENT, print
FINAL, call the tool once and answer once (the same result with and without pacing); every LLM
call has a complete record with the agent's protocol and the token count the fake API sent. The
paced run's wall time, counted from the agent's first LLM request to the moment FINAL is on its
stdout (the seconds an agent spends loading before it asks anything, or tidying up after it has
answered, vary by more than a second on a loaded machine), grows over the passthrough run's by
what the profile predicts from the records (the
union over calls of [arrival, arrival + TTFT + (tokens - 1) / rate]) within 15 %. Codex's
WebSocket and SSE transports, given the same task, must take the same time within 10 %.

Nothing here reaches the network: the agents' telemetry, update checks and model-list refreshes
are switched off with their own settings, and what is left fails fast.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from retimer.wire.tokenizer import count_tokens
from tests.clients.agent_script import ApiRequest, Reply
from tests.clients.api_bodies import token_deltas
from tests.clients.fakeapi import FakeAPI
from tests.proxy import RetimerProxy

TESTS = Path(__file__).parent
ROOT = TESTS.parent
CLIENTS_DIR = Path(os.environ.get("RETIMER_CLIENTS_DIR", ROOT / ".venv" / "clients"))
NPM_BIN = CLIENTS_DIR / "npm" / "node_modules" / ".bin"
PY_BIN = CLIENTS_DIR / "py" / "bin"
AIDER_BIN = CLIENTS_DIR / "aider" / "bin"
UPSTREAM_MAP = TESTS / "clients" / "upstream_map.py"

TTFT_MS, TPS = 500.0, 30.0
PACED = ("--profile", "gpt-5", "--ttft", f"{TTFT_MS:.0f}ms", "--tps", f"{TPS:.0f}", "--jitter", "0")
PASSTHROUGH = ("--profile", "passthrough")
TOLERANCE = 0.15
SAME_TIME = 0.10  # Codex WebSocket vs SSE

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
LLM_FUNCTIONS = '''
def write_file(file_path: str, content: str) -> str:
    "Write content to the file at file_path, replacing it."
    with open(file_path, "w") as f:
        f.write(content)
    return f"wrote {len(content)} characters to {file_path}"
'''


# --------------------------------------------------------------------------------------------
# the agents
# --------------------------------------------------------------------------------------------
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


def _claude(work: Path, home: Path, base: str | None) -> Launch:
    env = {"HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
           "IS_SANDBOX": "1"}  # IS_SANDBOX: --dangerously-skip-permissions is refused as root otherwise
    if base:
        env["ANTHROPIC_BASE_URL"] = base
    return Launch([str(NPM_BIN / "claude"), "-p", PROMPT, "--dangerously-skip-permissions",
                   "--output-format", "text"], env)


def _codex_common(home: Path) -> tuple[list[str], dict[str, str]]:
    # gpt-5.5: a model of the bundled catalog with the classic tool set (exec_command, apply_patch
    # as a freeform tool, ...); the default models use "code mode" (a JavaScript `exec` tool whose
    # tools are listed in an `additional_tools` input item).
    # api_key_model_discovery off: no model-list refresh from chatgpt.com, which would wait for
    # its time-out on every turn here
    args = ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
            "-m", "gpt-5.5", "--disable", "api_key_model_discovery", "--disable", "plugins",
            "-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false"]
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    return args, {"CODEX_HOME": str(home / ".codex"), "HOME": str(home)}


def _codex_ws(work: Path, home: Path, base: str | None) -> Launch:
    args, env = _codex_common(home)
    if base:  # Codex ignores OPENAI_BASE_URL
        args += ["-c", f'openai_base_url="{base}/v1"']
    return Launch([str(NPM_BIN / "codex"), *args, PROMPT], env)


def _codex_sse(work: Path, home: Path, base: str | None) -> Launch:
    # the built-in openai provider only lets base_url and auth change; a provider of our own
    # with supports_websockets=false speaks Responses over SSE (POST /v1/responses)
    args, env = _codex_common(home)
    url = f"{base}/v1" if base else "https://api.openai.com/v1"
    provider = (f'{{name="openai-sse", base_url="{url}", wire_api="responses", '
                f'env_key="OPENAI_API_KEY", supports_websockets=false}}')
    args += ["-c", "model_provider=openai-sse", "-c", f"model_providers.openai-sse={provider}"]
    return Launch([str(NPM_BIN / "codex"), *args, PROMPT], env)


def _gemini(work: Path, home: Path, base: str | None) -> Launch:
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        # the API-key method by name: with GOOGLE_GEMINI_BASE_URL set, Gemini CLI would pick its
        # "gateway" method, which its own non-interactive check then rejects ("Invalid auth
        # method selected."); the API-key method reads GOOGLE_GEMINI_BASE_URL too
        "security": {"auth": {"selectedType": "gemini-api-key"}}}))
    env = {"HOME": str(home), "GEMINI_CLI_TRUST_WORKSPACE": "true",
           "GEMINI_CLI_NO_RELAUNCH": "true"}  # no second Node process with a bigger heap
    if base:
        env["GOOGLE_GEMINI_BASE_URL"] = base
    # a named model: "auto" first asks a router model for a JSON verdict on every turn
    return Launch([str(NPM_BIN / "gemini"), "-m", "gemini-2.5-flash", "-p", PROMPT, "--yolo"], env)


def _opencode(work: Path, home: Path, base: str | None) -> Launch:
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_STATE_HOME": str(home / ".local/state"), "OPENCODE_DISABLE_AUTOUPDATE": "1",
           "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_SHARE": "1",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}
    if base:
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(
            {"provider": {"anthropic": {"options": {"baseURL": f"{base}/v1"}}}})
    # --title: no title-generation call to the small model
    return Launch([str(NPM_BIN / "opencode"), "run", "--auto", "-m", "anthropic/claude-sonnet-4-5",
                   "--title", "retimer agent check", PROMPT], env)


def _llm(work: Path, home: Path, base: str | None) -> Launch:
    tools = work / "tools.py"
    tools.write_text(LLM_FUNCTIONS)
    env = {"LLM_USER_PATH": str(home / "llm")}
    if base:
        env["OPENAI_BASE_URL"] = f"{base}/v1"
    return Launch([str(PY_BIN / "llm"), "prompt", "-m", "gpt-4o-mini", "--functions", str(tools),
                   PROMPT], env)


def _codex_patch(path: Path) -> str:
    # apply_patch, Codex's own file tool: a freeform (custom) tool whose input is the patch text.
    # The path is relative to the working directory, so every Codex run is sent the same tokens
    lines = "".join(f"+{line}\n" for line in CONTENT.splitlines())
    return f"*** Begin Patch\n*** Add File: {path.name}\n{lines}*** End Patch\n"


def _aider(work: Path, home: Path, base: str | None) -> Launch:
    # aider edits through text, not tools: with the "whole" edit format the answer names the file
    # and gives its new content in a fenced block (AIDER_REPLY). Its own fetch of litellm's model
    # list fails at once without a network; LITELLM_LOCAL_MODEL_COST_MAP keeps litellm's offline
    args = ["--model", "openai/gpt-4o-mini", "--edit-format", "whole", "--no-git", "--yes-always",
            "--no-check-update", "--analytics-disable", "--no-show-model-warnings", "--no-pretty",
            "--no-fancy-input", "--map-tokens", "0", "--no-detect-urls", "--no-show-release-notes"]
    if base:
        args += ["--openai-api-base", f"{base}/v1"]
    return Launch([str(AIDER_BIN / "aider"), *args, "--message", PROMPT, FILE],
                  {"HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


def _path_args(key: str) -> Callable[[Path], dict[str, Any]]:
    return lambda p: {key: str(p), "content": CONTENT}


AGENTS = {a.name: a for a in (
    Agent("claude-code", "anthropic-messages", "Write", _path_args("file_path"), _claude,
          NPM_BIN / "claude"),
    Agent("codex-ws", "openai-responses-ws", "apply_patch", lambda p: {}, _codex_ws, NPM_BIN / "codex",
          custom_input=_codex_patch),
    Agent("codex-sse", "openai-responses", "apply_patch", lambda p: {}, _codex_sse, NPM_BIN / "codex",
          custom_input=_codex_patch),
    Agent("gemini-cli", "gemini", "write_file", _path_args("file_path"), _gemini, NPM_BIN / "gemini"),
    Agent("opencode", "anthropic-messages", "write", _path_args("filePath"), _opencode,
          NPM_BIN / "opencode"),
    Agent("llm", "openai-chat", "write_file", _path_args("file_path"), _llm, PY_BIN / "llm"),
    Agent("aider", "openai-chat", None, lambda p: {}, _aider, AIDER_BIN / "aider",
          done=f"Applied edit to {FILE}"),
)}
AIDER_REPLY = f"{FINAL}\n\n{FILE}\n```\n{CONTENT}```\n"


def _expected_answers(agent: Agent) -> list[tuple[str | None, str]]:
    """(tool, text) of each answer the task takes: the tool call, then FINAL; aider: one answer."""
    if agent.tool is None:
        return [(None, AIDER_REPLY)]
    return [(agent.tool, ""), (None, FINAL)]


class TaskScript:
    """The fake model: the agent's file-writing tool (once), then FINAL; SIDE when no tool is
    offered (a title or summary call). `target` is set per run: where FILE must go."""

    def __init__(self) -> None:
        self.agent: Agent | None = None
        self.target: Path | None = None

    def __call__(self, req: ApiRequest) -> Reply:
        agent = self.agent
        if agent is not None and agent.tool is None:  # aider: the edit is in the text
            return Reply(AIDER_REPLY)
        if agent is None or agent.tool not in req.tools:
            return Reply(SIDE)
        if req.has_tool_result:
            return Reply(FINAL)
        assert self.target is not None
        if agent.custom_input is not None:
            return Reply("", agent.tool, custom_input=agent.custom_input(self.target))
        return Reply("", agent.tool, agent.arguments(self.target))


# --------------------------------------------------------------------------------------------
# fixtures: one fake API and the proxies (forward/reverse x passthrough/paced) for the module
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
            args = ["--quiet", *profile]
            if mode == "forward":
                args += ["--set", f"scripts={UPSTREAM_MAP}"]
            else:
                args += ["--upstream", self.fake.url]
            proxy = RetimerProxy(self.tmp / name, *args, upstream_ca=self.fake.ca_path)
            proxy.confdir = self.confdir  # one CA for all: `retimer run` checks it to reuse a proxy
            proxy.args = [f"confdir={self.confdir}" if a.startswith("confdir=") else a
                          for a in proxy.args]
            with pytest.MonkeyPatch.context() as mp:  # read by upstream_map.py in the proxy
                mp.setenv("FAKEAPI_PORT", str(self.fake.port))
                mp.setenv("FAKEAPI_HTTP_PORT", str(self.fake.http_port))
                self.running[mode, profile] = proxy.start()
        return self.running[mode, profile]

    def stop(self) -> None:
        for proxy in self.running.values():
            proxy.stop()


@pytest.fixture(scope="module")
def script() -> TaskScript:
    return TaskScript()


@pytest.fixture(scope="module")
def fake(script: TaskScript) -> Iterator[FakeAPI]:
    with FakeAPI(script, bursts=2) as api:
        yield api


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory, fake: FakeAPI) -> Iterator[Proxies]:
    p = Proxies(tmp_path_factory.mktemp("retimer"), fake)
    try:
        yield p
    finally:
        p.stop()


# --------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------
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


def _log_lines(proxy: RetimerProxy) -> list[str]:
    if not proxy.log_path.exists():
        return []
    return [x for x in proxy.log_path.read_text().split("\n")[:-1] if x.strip()]


def _is_turn(req: ApiRequest) -> bool:
    return req.api in PROTOCOL


def _execute(argv: list[str], env: dict[str, str], cwd: Path, done: str,
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


def _run(agent: Agent, mode: str, paced: bool, fake: FakeAPI, script: TaskScript,
         proxies: Proxies, tmp: Path) -> Run:
    assert agent.binary.exists(), (
        f"{agent.name}: {agent.binary} is not installed: run scripts/install-clients")
    profile = PACED if paced else PASSTHROUGH
    proxy = proxies.get(mode, profile)
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
    seen = len(_log_lines(proxy))
    start = time.time()
    try:
        returncode, stdout, stderr, answered = _execute(argv, env, work, agent.done)
    finally:
        script.agent = None
    end = time.time()
    turns = [r for r in fake.requests if _is_turn(r)]
    run = Run(agent.name, mode, paced, returncode, stdout, stderr, work, end - start,
              (answered or end) - turns[0].time if turns else 0.0, fake.llm_requests(), turns, [])
    deadline = time.monotonic() + 5  # a record is written as its stream ends at the proxy
    while True:
        run.records = [json.loads(x) for x in _log_lines(proxy)[seen:]]
        if len(run.records) >= len(run.turns) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    RESULTS[agent.name, mode, paced] = run
    return run


def _expected_tokens(req: ApiRequest) -> int:
    assert req.reply is not None
    return sum(count_tokens(d) for d in token_deltas(req.api, req.reply))


def _summary(records: list[dict]) -> list[tuple]:
    return [(r["protocol"], r["url"], r["upstream"]["tokens"], r["emitted"]["tokens"],
             r["emitted"]["ttft_ms"], r["emitted"]["duration_ms"]) for r in records]


def _check_run(run: Run, agent: Agent) -> list[str]:
    """Asserts what the agent did; returns what is wrong with the records (the timing check still
    runs and reports its figures when a record is missing)."""
    what = run.what
    tail = f"\n--- stdout ---\n{run.stdout[-3000:]}\n--- stderr ---\n{run.stderr[-5000:]}"
    assert run.returncode == 0, f"{what}: exit {run.returncode}{tail}"
    written = run.work / FILE
    assert written.exists(), f"{what}: {FILE} was not written{tail}"
    assert written.read_text() == CONTENT, f"{what}: {FILE} holds {written.read_text()!r}"
    assert FINAL in run.stdout, f"{what}: the final answer is not in the agent's output{tail}"
    # the task: one tool call, then one answer after its result (calls without the tool, such as
    # a title, may come too)
    answered = [(r.reply.tool, r.reply.text) for r in run.llm if r.reply is not None]
    assert [a for a in answered if a != (None, SIDE)] == _expected_answers(agent), (
        f"{what}: the fake model answered {answered}")
    assert all(r.api == agent.api for r in run.turns), (what, [r.api for r in run.turns])
    # every LLM call has a complete record of the agent's protocol with the tokens it was sent
    summary = _summary(run.records)
    if len(run.records) != len(run.turns):
        return [f"{what}: {len(run.turns)} LLM calls ({[r.api for r in run.turns]}), "
                f"{len(run.records)} records {summary}"]
    problems = []
    for req, rec in zip(run.turns, run.records, strict=True):
        expect = _expected_tokens(req) if req.reply is not None else 0
        if rec["protocol"] != PROTOCOL[req.api] or rec["outcome"] != "complete" or (
                rec["upstream"]["tokens"], rec["emitted"]["tokens"]) != (expect, expect):
            problems.append(f"{what}: a {req.api} call that sent {expect} tokens has the record "
                            f"{rec['protocol'], rec['outcome'], rec['upstream']['tokens'], rec['emitted']['tokens']}")
        if run.paced and (rec["target"]["ttft_ms"], rec["target"]["tps"]) != (TTFT_MS, TPS):
            problems.append(f"{what}: target {rec['target']}")
        # `time` is when the call reached the proxy: the fake API saw it a moment later
        late = req.time - dt.datetime.fromisoformat(rec["time"]).timestamp()
        if not -0.05 <= late <= 0.5:
            problems.append(f"{what}: the record of a {req.api} call that reached the fake API at "
                            f"{dt.datetime.fromtimestamp(req.time, dt.UTC).isoformat()} says "
                            f"time {rec['time']}")
    return problems


def _predicted(run: Run) -> float:
    """Seconds of LLM time the profile gives the run's calls: the union over calls of
    [start, start + TTFT + (tokens - 1) / rate] (calls in parallel overlap), with each call's
    tokens from its record and its start from the fake API's log (the proxy forwards a request at
    once); a call that carried no token
    (a WebSocket prewarm) is not held."""
    starts = [r.time for r in run.turns] if len(run.turns) == len(run.records) else [
        dt.datetime.fromisoformat(rec["time"]).timestamp() for rec in run.records]
    spans = []
    for t0, rec in zip(starts, run.records, strict=True):
        n = rec["emitted"]["tokens"]
        if n:
            spans.append((t0, t0 + rec["target"]["ttft_ms"] / 1000 + (n - 1) / rec["target"]["tps"]))
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _passthrough_llm_time(run: Run) -> float:
    """The seconds the same calls took at the proxy without pacing (the fake's own latency, which
    the paced TTFT hides)."""
    return sum((r["emitted"]["ttft_ms"] or 0) / 1000 for r in run.records if r["emitted"]["tokens"])


def _growth(base: Run, paced: Run) -> tuple[float, float, str | None]:
    """(grew, predicted, what is wrong or None): the paced run's extra time from its first LLM
    request to its exit, against the profile's prediction from the paced records."""
    predicted = _predicted(paced) - _passthrough_llm_time(base)
    grew = paced.active - base.active
    if abs(grew - predicted) <= TOLERANCE * predicted:
        return grew, predicted, None
    return grew, predicted, (
        f"{paced.agent} ({paced.mode}): from its first LLM request to its answer the paced run took "
        f"{paced.active:.3f}s (wall {paced.wall:.3f}s), passthrough {base.active:.3f}s (wall "
        f"{base.wall:.3f}s): grew {grew:.3f}s, the profile predicts {predicted:.3f}s; paced "
        f"records {_summary(paced.records)}")


CASES = [pytest.param(a, m, id=f"{a}-{m}") for a in AGENTS for m in ("forward", "reverse")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_agent_through_retimer(name: str, mode: str, fake: FakeAPI, script: TaskScript,
                               proxies: Proxies, tmp_path: Path) -> None:
    agent = AGENTS[name]
    problems: list[str] = []
    timing: list[str] = []
    # an agent's own pauses between calls vary by seconds on a loaded machine: a pair of runs
    # whose growth misses the prediction is run once more, and both must miss to fail
    for attempt in (1, 2):
        where = tmp_path / f"attempt{attempt}"
        base = _run(agent, mode, False, fake, script, proxies, where / "passthrough")
        problems += _check_run(base, agent)
        paced = _run(agent, mode, True, fake, script, proxies, where / "paced")
        problems += _check_run(paced, agent)
        grew, predicted, wrong = _growth(base, paced)
        print(f"\n{name} {mode}: wall {base.wall:.2f}s -> {paced.wall:.2f}s, first LLM request to "
              f"answer {base.active:.2f}s -> {paced.active:.2f}s: grew {grew:.3f}s, predicted "
              f"{predicted:.3f}s ({len(base.records)}/{len(paced.records)} records for "
              f"{len(paced.turns)} calls; calls at "
              f"+{[round(r.time - paced.turns[0].time, 3) for r in paced.turns]}s)")
        if wrong is None or problems:
            break
        timing.append(f"attempt {attempt}: {wrong}")
    else:
        problems += timing
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(600)
def test_codex_websocket_and_sse_take_the_same_time(fake: FakeAPI, script: TaskScript,
                                                    proxies: Proxies, tmp_path: Path) -> None:
    """The same task over Codex's two transports, paced: the same calls and tokens, so the same
    time. (Fails while WebSocket pacing counts Responses' closing events as tokens.)"""
    runs = {}
    for name in ("codex-ws", "codex-sse"):
        for paced in (False, True):
            run = RESULTS.get((name, "forward", paced))
            if run is None:
                run = _run(AGENTS[name], "forward", paced, fake, script, proxies,
                           tmp_path / f"{name}-{paced}")
            _check_run(run, AGENTS[name])  # the task was done (record problems: the test above)
            runs[name, paced] = run
    grew = {n: runs[n, True].active - runs[n, False].active for n in ("codex-ws", "codex-sse")}
    ws, sse = grew["codex-ws"], grew["codex-sse"]
    print(f"\nCodex paced over passthrough: WebSocket grew {ws:.3f}s, SSE {sse:.3f}s")
    assert abs(ws - sse) <= SAME_TIME * sse, (
        f"Codex, paced, grew {ws:.3f}s over WebSocket and {sse:.3f}s over SSE (predicted "
        f"{_predicted(runs['codex-ws', True]):.3f}s and {_predicted(runs['codex-sse', True]):.3f}s); "
        f"WebSocket records {_summary(runs['codex-ws', True].records)}, SSE records "
        f"{_summary(runs['codex-sse', True].records)}")


def test_clients_are_installed_at_their_pins() -> None:
    """scripts/install-clients put every agent in place; a missing one is a failure, not a skip."""
    missing = [a.name for a in AGENTS.values() if not a.binary.exists()]
    assert not missing, f"not installed: {missing}: run scripts/install-clients"
    pins = (ROOT / "scripts" / "install-clients").read_text()
    versions = {
        "claude": "@anthropic-ai/claude-code@", "codex": "@openai/codex@",
        "gemini": "@google/gemini-cli@", "opencode": "opencode-ai@"}
    for binary, pin in versions.items():
        out = subprocess.run([str(NPM_BIN / binary), "--version"], capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, "HOME": "/tmp"})
        want = pins.split(pin, 1)[1].split()[0]
        assert want in out.stdout, f"{binary} --version says {out.stdout!r}, pinned {want}"
    for binary, pin in ((PY_BIN / "llm", "llm=="), (AIDER_BIN / "aider", "aider-chat==")):
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
        want = pins.split(pin, 1)[1].split()[0].strip('"')
        assert want in out.stdout, f"{binary.name} --version says {out.stdout!r}, pinned {want}"
    assert shutil.which("node"), "Gemini CLI needs Node >= 20 on PATH"
