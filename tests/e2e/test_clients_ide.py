"""The engines of the IDE agents through the real `retimer`, forward and reverse, against
tests/support/clients/fakeapi.py: the task, the checks and the timing rule of tests/support/clients/agent_harness.py.

The VS Code agents ship their agent loops as command-line engines, the same code the extension
runs: Cline (`cline`), Kilo Code (`kilo`), Continue (`cn`), Qwen Code (`qwen`) and GitHub
Copilot's CLI (`copilot`, with its bring-your-own-model settings: no GitHub sign-in). Installed
at pinned versions by scripts/install-clients into .venv/clients/npm. Each is set up as its own
docs say a user sets it up with an OpenAI-compatible or Anthropic key (docs/clients.md):
  forward  the provider's real host (https://api.openai.com/v1, https://api.anthropic.com) in the
           agent's base-URL setting, `retimer run -- AGENT`, the host mapped to the fake inside
           the proxy;
  reverse  the base URL is retimer's plain-HTTP listener, `retimer --upstream` the fake.
Copilot runs twice: over HTTP with the Anthropic Messages API, and over WebSockets with the
Responses API (its `COPILOT_PROVIDER_TRANSPORT=websockets`). For that WebSocket session the
records' upstream figures must be the fake's own timing, and `retimer whatif` must give it a
different wait under each profile, the wait it gives the same session over SSE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.clients.agent_harness import (
    CONTENT,
    NPM_BIN,
    PROMPT,
    RESULTS,
    ROOT,
    Agent,
    Launch,
    Proxies,
    TaskScript,
    check_agent,
    check_run,
    patch_text,
    path_args,
    run_agent,
    summary,
    whatif_waits,
)
from tests.support.clients.cassette_run import check_cassette_replay
from tests.support.clients.fakeapi import FakeAPI

MODEL = "gpt-4o"
CLAUDE = "claude-sonnet-4-5"


def _base(base: str | None, real: str) -> str:
    """The base URL an agent is given: retimer's listener in reverse mode, the real host forward."""
    return f"{base}/v1" if base else real


def _cline(work: Path, home: Path, base: str | None) -> Launch:
    # `cline auth` writes the provider into the data directory; the task runs with it
    data = home / "cline-data"
    env = {**os.environ, "HOME": str(home)}
    subprocess.run([str(NPM_BIN / "cline"), "auth", "-p", "openai-compatible", "-k", "sk-cline-fake",
                    "-m", MODEL, "-b", _base(base, "https://api.openai.com/v1"),
                    "--data-dir", str(data)], env=env, check=True, capture_output=True, timeout=120,
                   stdin=subprocess.DEVNULL)
    # telemetry off: it is exported to otel.cline.bot, retried with back-off when unreachable
    settings = home / "cline-global-settings.json"
    settings.write_text(json.dumps({"telemetryOptOut": True, "autoUpdateEnabled": False}))
    return Launch([str(NPM_BIN / "cline"), "--data-dir", str(data), "-P", "openai-compatible",
                   "-m", MODEL, PROMPT], {"HOME": str(home), "CLINE_GLOBAL_SETTINGS_PATH": str(settings)})


_KILO_OFF = ("AUTOUPDATE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS",
             "SESSION_INGEST", "PRESENCE", "CODEBASE_INDEXING", "CLAUDE_CODE", "EXTERNAL_SKILLS")


def _kilo(work: Path, home: Path, base: str | None) -> Launch:
    # Kilo Code's CLI (an opencode fork): a provider of the user's own in its JSON config
    config = home / "kilo.json"
    config.write_text(json.dumps({"provider": {"retimer-check": {
        "npm": "@ai-sdk/openai-compatible", "name": "OpenAI-compatible",
        "options": {"baseURL": _base(base, "https://api.openai.com/v1"), "apiKey": "sk-kilo-fake"},
        "models": {MODEL: {"name": MODEL, "tool_call": True}}}}}))
    env = {"HOME": str(home), "KILO_CONFIG": str(config), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_STATE_HOME": str(home / ".local/state"),
           **{f"KILO_DISABLE_{k}": "1" for k in _KILO_OFF}}
    # --title: no title-generation call; --pure: no external plugins
    return Launch([str(NPM_BIN / "kilo"), "run", "--auto", "--pure", "--title", "retimer agent check",
                   "-m", f"retimer-check/{MODEL}", PROMPT], env)


def _continue(work: Path, home: Path, base: str | None) -> Launch:
    config = home / "continue.yaml"
    config.write_text(
        "name: retimer check\nversion: 1.0.0\nschema: v1\nmodels:\n"
        f"  - name: {MODEL}\n    provider: openai\n    model: {MODEL}\n"
        f"    apiBase: {_base(base, 'https://api.openai.com/v1')}\n    apiKey: sk-continue-fake\n"
        "    capabilities: [tool_use]\n    roles: [chat, edit, apply]\n")
    return Launch([str(NPM_BIN / "cn"), "--config", str(config), "--auto", "-p", PROMPT],
                  {"HOME": str(home)})


def _qwen(work: Path, home: Path, base: str | None) -> Launch:
    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    # no background memory extraction: it is a second model call after the answer
    settings.write_text(json.dumps({
        "general": {"enableAutoUpdate": False}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}, "memory": {"enableManagedAutoMemory": False}}))
    env = {"HOME": str(home), "OPENAI_BASE_URL": _base(base, "https://api.openai.com/v1"),
           "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
    return Launch([str(NPM_BIN / "qwen"), "--auth-type", "openai", "-m", MODEL, "-p", PROMPT,
                   "--yolo"], env)


def _copilot(kind: str, wire: str, transport: str, model: str,
             real: str) -> Callable[[Path, Path, str | None], Launch]:
    """Copilot CLI with a model of your own: no GitHub sign-in (COPILOT_OFFLINE)."""
    def launch(work: Path, home: Path, base: str | None) -> Launch:
        url = (f"{base}/v1" if kind == "openai" else base) if base else real
        return Launch([str(NPM_BIN / "copilot"), "-p", PROMPT, "--allow-all-tools"], {
            "HOME": str(home), "COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": url,
            "COPILOT_PROVIDER_TYPE": kind, "COPILOT_PROVIDER_WIRE_API": wire,
            "COPILOT_PROVIDER_TRANSPORT": transport, "COPILOT_PROVIDER_API_KEY": "sk-copilot-fake",
            "COPILOT_MODEL": model})
    return launch


AGENTS = {a.name: a for a in (
    Agent("cline", "openai-chat", "apply_patch", lambda p: {"input": patch_text(p)}, _cline,
          NPM_BIN / "cline", written=CONTENT.rstrip("\n")),
    Agent("kilo", "openai-chat", "write", path_args("filePath"), _kilo, NPM_BIN / "kilo"),
    Agent("continue", "openai-chat", "Write", path_args("filepath"), _continue, NPM_BIN / "cn"),
    Agent("qwen-code", "openai-chat", "write_file", path_args("file_path"), _qwen, NPM_BIN / "qwen"),
    Agent("copilot-http", "anthropic-messages", "create", path_args("path", "file_text"),
          _copilot("anthropic", "completions", "http", CLAUDE, "https://api.anthropic.com"),
          NPM_BIN / "copilot"),
    Agent("copilot-ws", "openai-responses-ws", "apply_patch", lambda p: {},
          _copilot("openai", "responses", "websockets", MODEL, "https://api.openai.com/v1"),
          NPM_BIN / "copilot", custom_input=patch_text),
)}


# the same Responses session over HTTP (SSE), for the WebSocket comparison only
COPILOT_SSE = Agent("copilot-sse", "openai-responses", "apply_patch", lambda p: {},
                    _copilot("openai", "responses", "http", MODEL, "https://api.openai.com/v1"),
                    NPM_BIN / "copilot", custom_input=patch_text)


# fake_api.script: the task's model; spread: the cases (each a real agent, 10-60 s) go to any
# worker, each starting its own fake API and proxies, rather than one worker running them all
pytestmark = [pytest.mark.fake_api(script=TaskScript, bursts=2), pytest.mark.spread]


CASES = [pytest.param(a, m, id=f"{a}-{m}") for a in AGENTS for m in ("forward", "reverse")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_ide_agent_through_retimer(name: str, mode: str, fake_api: FakeAPI, agent_proxies: Proxies,
                                   tmp_path: Path) -> None:
    check_agent(AGENTS[name], mode, fake_api, fake_api.script, agent_proxies, tmp_path)


def test_ide_clients_are_installed_at_their_pins() -> None:
    """scripts/install-clients put every engine in place at its pin; missing is a failure."""
    pins = (ROOT / "scripts" / "install-clients").read_text()
    for binary, pin in (("cline", "cline@"), ("kilo", "@kilocode/cli@"), ("cn", "@continuedev/cli@"),
                        ("qwen", "@qwen-code/qwen-code@"), ("copilot", "@github/copilot@")):
        assert (NPM_BIN / binary).exists(), f"{binary} is not installed: run scripts/install-clients"
        out = subprocess.run([str(NPM_BIN / binary), "--version"], capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL,
                             env={**os.environ, "HOME": "/tmp"})
        want = pins.split(pin, 1)[1].split()[0]
        assert want in out.stdout, f"{binary} --version says {out.stdout!r}, pinned {want}"


GAP = 0.2  # the fake's pause between the two halves of each reply in the WebSocket check


@pytest.mark.timeout(600)
def test_copilot_websocket_session_records_the_upstreams_timing(
        fake_api: FakeAPI, agent_proxies: Proxies, tmp_path: Path) -> None:
    """A Copilot CLI session over WebSockets, paced, with the fake writing each reply in two
    halves 200 ms apart: every turn's record gives the fake's own timing as `upstream` (first to
    last token within 20 ms of 200 ms), not retimer's hold of the messages (before: seconds), and
    `retimer whatif` gives the session a different wait under each profile (before: every
    profile's row was the recording's)."""
    agent = AGENTS["copilot-ws"]
    fake_api.burst_gap = GAP
    try:
        run = run_agent(agent, "forward", True, fake_api, fake_api.script, agent_proxies,
                        tmp_path / "run")
    finally:
        fake_api.burst_gap = 0.0
    problems = check_run(run, agent)
    assert not problems, "\n".join(problems)
    turns = [r for r in run.records if r["emitted"]["tokens"]]
    assert len(turns) == 2, summary(run.records)
    for rec in turns:
        assert rec["protocol"] == "websocket"
        # the fake's own gap between the halves, stamped when the bytes came (a loaded machine
        # adds tens of ms); retimer's hold instead gave 770 ms and 2.9 s before the arrival stamps
        assert GAP * 1000 - 5 <= rec["upstream"]["duration_ms"] <= GAP * 1000 + 100, [
            (r["upstream"], r["emitted"]) for r in turns]
        assert rec["emitted"]["duration_ms"] > 1000  # and the agent got it paced
    log = tmp_path / "session.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in run.records))
    done = subprocess.run([sys.executable, "-m", "retimer", "whatif", str(log), "--json",
                           "--profiles", "cerebras,gpt-5"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    (session,) = json.loads(done.stdout)["sessions"]
    assert session["timed"] == len(run.records) and not session["unmodelled"], session
    waits = [p["waiting_s"] for p in session["profiles"]]
    assert waits[0] < waits[1] and session["recorded"]["waiting_s"] not in waits, session


@pytest.mark.timeout(600)
def test_copilot_websocket_and_sse_sessions_get_the_same_whatif(
        fake_api: FakeAPI, agent_proxies: Proxies, tmp_path: Path) -> None:
    """The same task through Copilot's two Responses transports, paced: one record per call,
    and `retimer whatif` gives both sessions the same waits under each profile within 5 %
    (before: the WebSocket's turns ran on until the client's next message, and whatif merged
    them into one call that kept the agent's own time: "upstream alone 3.6 s")."""
    runs = {}
    for agent in (AGENTS["copilot-ws"], COPILOT_SSE):
        run = RESULTS.get((agent.name, "forward", True)) or run_agent(
            agent, "forward", True, fake_api, fake_api.script, agent_proxies, tmp_path / agent.name)
        problems = check_run(run, agent)
        assert not problems, "\n".join(problems)
        runs[agent.name] = run
    ws, sse = runs["copilot-ws"], runs["copilot-sse"]
    assert [r["protocol"] for r in ws.records] == ["websocket"] * len(sse.records), summary(ws.records)
    # cold: the session run second finds the first one's prompts in the proxy's provider cache
    over_ws = whatif_waits(ws.records, tmp_path / "ws", cold=True)
    over_sse = whatif_waits(sse.records, tmp_path / "sse", cold=True)
    assert over_ws == pytest.approx(over_sse, rel=0.05), (over_ws, over_sse)


REPLAYED = [pytest.param(a, m, id=f"{a}-{m}") for a, m in (
    ("cline", "reverse"), ("kilo", "forward"), ("continue", "reverse"), ("qwen-code", "reverse"),
    ("copilot-ws", "reverse"))]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "mode"), REPLAYED)
def test_ide_agent_session_replays_from_a_cassette_without_its_upstream(
        name: str, mode: str, fake_api: FakeAPI, agent_proxies: Proxies, tmp_path: Path) -> None:
    """Recorded once, replayed at 15,000 tok/s with nothing listening upstream: the engine
    does its task again, every call from the cassette (tests/support/clients/cassette_run.py)."""
    check_cassette_replay(AGENTS[name], mode, fake_api, fake_api.script, agent_proxies, tmp_path)
