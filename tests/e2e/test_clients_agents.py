"""Real coding agents through the real `retimer`, forward and reverse, against tests/support/clients/fakeapi.py.

The agents are the shipped CLIs, installed at pinned versions by scripts/install-clients into
.venv/clients (a missing one fails its test: run scripts/install-clients): Claude Code, Codex (its
default Responses-over-WebSocket transport and its SSE transport), Gemini CLI (a named model, and
`auto`, whose router call is not streamed: it must be held and recorded too), opencode,
Simon Willison's `llm` and aider. Each one gets the same task from the fake model: one tool call
that writes FILE with CONTENT (its own file-writing tool: Write, apply_patch, write_file, write, a
`llm` function), then a text answer, FINAL; aider, which edits through text, gets FINAL and the
file's content in its "whole" edit format in one answer. Modes:
  forward  `retimer run -- AGENT ...`: the agent uses its REAL default host (api.anthropic.com,
           api.openai.com, generativelanguage.googleapis.com); tests/support/clients/upstream_map.py
           points that host at the fake API inside the proxy, whose CA retimer trusts.
  reverse  `retimer --upstream https://127.0.0.1:<fake TLS port>` and the agent's own base-URL
           setting (ANTHROPIC_BASE_URL, Codex's openai_base_url / provider base_url,
           GOOGLE_GEMINI_BASE_URL, opencode's provider baseURL, OPENAI_BASE_URL, aider's
           --openai-api-base) pointed at
           retimer's plain-HTTP listener.
Each (agent, mode) runs with an exact profile (`--ttft 500ms --tps 30 --jitter 0`) and must: exit
0, write FILE with CONTENT, print FINAL, call the tool once and answer once; every LLM call has a
complete record with the agent's protocol and the token count the fake API sent; and the pacing
holds as a loaded machine keeps it (agent_harness.pacing_problems: no stream sooner than the
profile, the agent went on only after each paced stream could have reached it, none held for
seconds too long). Codex's WebSocket and SSE transports, given the same task, make the same calls
with the same tokens, so the profile gives them the same time. How close each agent's wait comes
to the prediction, against a passthrough run, is bench/clients.py's figure (BENCHMARKS.md).

Nothing here reaches the network: the agents' telemetry, update checks and model-list refreshes
are switched off with their own settings, and what is left fails fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.clients.agent_harness import (
    CLIENTS_DIR,
    FILE,
    NPM_BIN,
    PROMPT,
    RESULTS,
    ROOT,
    Agent,
    Launch,
    Proxies,
    Run,
    TaskScript,
    check_agent,
    check_run,
    growth,
    pacing_problems,
    patch_text,
    path_args,
    predicted_llm_time,
    run_agent,
    summary,
    whatif_waits,
)
from tests.support.clients.cassette_run import check_cassette_replay
from tests.support.clients.fakeapi import FakeAPI
from tests.support.clients.pacing import benchmarking, write_bench_row

PY_BIN = CLIENTS_DIR / "py" / "bin"
AIDER_BIN = CLIENTS_DIR / "aider" / "bin"
SAME_TIME = 0.10  # Codex WebSocket vs SSE: the calls start at times of their own
LLM_FUNCTIONS = '''
def write_file(file_path: str, content: str) -> str:
    "Write content to the file at file_path, replacing it."
    with open(file_path, "w") as f:
        f.write(content)
    return f"wrote {len(content)} characters to {file_path}"
'''




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


def _gemini_auto(work: Path, home: Path, base: str | None) -> Launch:
    # its default: a router model asked first, without streaming, how complex the request is
    launch = _gemini(work, home, base)
    launch.argv[launch.argv.index("gemini-2.5-flash")] = "auto"
    return launch


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


def _aider(work: Path, home: Path, base: str | None) -> Launch:
    # aider edits through text, not tools: with the "whole" edit format the answer names the file
    # and gives its new content in a fenced block (WHOLE_EDIT_REPLY in tests/support/clients/agent_harness.py). Its own fetch of litellm's model
    # list fails at once without a network; LITELLM_LOCAL_MODEL_COST_MAP keeps litellm's offline
    args = ["--model", "openai/gpt-4o-mini", "--edit-format", "whole", "--no-git", "--yes-always",
            "--no-check-update", "--analytics-disable", "--no-show-model-warnings", "--no-pretty",
            "--no-fancy-input", "--map-tokens", "0", "--no-detect-urls", "--no-show-release-notes"]
    if base:
        args += ["--openai-api-base", f"{base}/v1"]
    return Launch([str(AIDER_BIN / "aider"), *args, "--message", PROMPT, FILE],
                  {"HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})



AGENTS = {a.name: a for a in (
    Agent("claude-code", "anthropic-messages", "Write", path_args("file_path"), _claude,
          NPM_BIN / "claude"),
    Agent("codex-ws", "openai-responses-ws", "apply_patch", lambda p: {}, _codex_ws, NPM_BIN / "codex",
          custom_input=patch_text),
    Agent("codex-sse", "openai-responses", "apply_patch", lambda p: {}, _codex_sse, NPM_BIN / "codex",
          custom_input=patch_text),
    Agent("gemini-cli", "gemini", "write_file", path_args("file_path"), _gemini, NPM_BIN / "gemini"),
    Agent("gemini-cli-auto", "gemini", "write_file", path_args("file_path"), _gemini_auto,
          NPM_BIN / "gemini"),
    Agent("opencode", "anthropic-messages", "write", path_args("filePath"), _opencode,
          NPM_BIN / "opencode"),
    Agent("llm", "openai-chat", "write_file", path_args("file_path"), _llm, PY_BIN / "llm"),
    Agent("aider", "openai-chat", None, lambda p: {}, _aider, AIDER_BIN / "aider",
          done=f"Applied edit to {FILE}"),
)}


# fake_api.script: the task's model; spread: the cases (each a real agent, 10-60 s) go to any
# worker, each starting its own fake API and proxies, rather than one worker running them all
pytestmark = [pytest.mark.fake_api(script=TaskScript, bursts=2), pytest.mark.spread]


CASES = [pytest.param(a, m, id=f"{a}-{m}") for a in AGENTS for m in ("forward", "reverse")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_agent_through_retimer(name: str, mode: str, fake_api: FakeAPI, agent_proxies: Proxies,
                               tmp_path: Path) -> None:
    check_agent(AGENTS[name], mode, fake_api, fake_api.script, agent_proxies, tmp_path)


@pytest.mark.timeout(600)
def test_codex_websocket_and_sse_take_the_same_time(fake_api: FakeAPI, agent_proxies: Proxies,
                                                    tmp_path: Path) -> None:
    """The same task over Codex's two transports, paced: the same calls, each with the same
    tokens and target, so the profile gives both the same time (it did not while WebSocket pacing
    counted Responses' closing events as tokens); under bench/clients.py, how much each grew over
    passthrough, side by side."""
    runs = {}
    for name in ("codex-ws", "codex-sse"):
        for paced in (True, False) if benchmarking() else (True,):
            run = RESULTS.get((name, "forward", paced))
            if run is None:
                run = run_agent(AGENTS[name], "forward", paced, fake_api, fake_api.script,
                                agent_proxies, tmp_path / f"{name}-{paced}")
            check_run(run, AGENTS[name])  # the task was done (record problems: the test above)
            runs[name, paced] = run

    def streams(run: Run) -> list[tuple[int, float, float]]:
        return [(r["emitted"]["tokens"], r["target"]["ttft_ms"], r["target"]["tps"])
                for r in run.records if r["emitted"]["tokens"]]

    ws, sse = runs["codex-ws", True], runs["codex-sse", True]
    assert streams(ws) == streams(sse) and streams(sse), (
        f"Codex, paced: WebSocket records {summary(ws.records)}, SSE records {summary(sse.records)}")
    assert predicted_llm_time(ws) == pytest.approx(predicted_llm_time(sse), rel=SAME_TIME), (
        summary(ws.records), summary(sse.records))
    assert not pacing_problems(ws) + pacing_problems(sse)
    # `retimer whatif` times the WebSocket session turn by turn, as the same session over SSE
    # (before: its turns ran into each other, and their prompts were unknown)
    # cold: the session run second finds the first one's prompts in the proxy's provider
    # cache, and the prewarm warms it for the WebSocket's first turn (real, but not the
    # transports' timing, which is what is compared)
    over_ws = whatif_waits(ws.records, tmp_path / "ws", cold=True)
    over_sse = whatif_waits(sse.records, tmp_path / "sse", cold=True)
    # the WebSocket session's prewarm (no token: not timed by a profile) keeps its recorded
    # wait under every profile, as it should; the SSE session has none. Under load it took
    # 80 ms, 5.6 % of the cerebras total: the comparison is of the rest.
    prewarm = sum(r["emitted"]["duration_ms"] for r in ws.records
                  if not r["emitted"]["tokens"]) / 1000
    assert prewarm < 0.5
    assert {p: round(w - prewarm, 3) for p, w in over_ws.items()} == pytest.approx(
        over_sse, rel=0.05), (over_ws, over_sse, prewarm)
    if benchmarking():
        for name in ("codex-ws", "codex-sse"):
            grew, predicted = growth(runs[name, False], runs[name, True])
            write_bench_row(suite="codex-transports", client=name, mode="forward", grew_s=grew,
                            predicted_s=predicted)


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


REPLAYED = [pytest.param(a, m, id=f"{a}-{m}") for a, m in (
    ("claude-code", "reverse"), ("claude-code", "forward"), ("codex-ws", "reverse"),
    ("codex-sse", "forward"), ("gemini-cli", "reverse"), ("gemini-cli-auto", "forward"),
    ("opencode", "reverse"))]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "mode"), REPLAYED)
def test_agent_session_replays_from_a_cassette_without_its_upstream(
        name: str, mode: str, fake_api: FakeAPI, agent_proxies: Proxies, tmp_path: Path) -> None:
    """Recorded once, replayed at 15,000 tok/s with nothing listening upstream: the agent
    does its task again, every call from the cassette (tests/support/clients/cassette_run.py)."""
    check_cassette_replay(AGENTS[name], mode, fake_api, fake_api.script, agent_proxies, tmp_path)
