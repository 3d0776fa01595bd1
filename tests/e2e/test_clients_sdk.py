"""Real SDK clients through the real `retimer`, forward and reverse, against tests/support/clients/fakeapi.py.

Each case runs a client script from tests/support/clients/sdk/ with an exact profile (`--ttft 400ms
--tps 40 --jitter 0`), in one of two modes:
  forward  `retimer run -- CLIENT`: the SDK uses its REAL default host (api.openai.com, ...);
           tests/support/clients/upstream_map.py points that host at the fake API inside the proxy, whose
           CA retimer trusts (ssl_verify_upstream_trusted_ca). Ollama is a loopback server.
  reverse  `retimer --upstream https://127.0.0.1:<fake TLS port>` (plain http:// for Ollama), the
           SDK's base URL set to retimer's plain-HTTP address; retimer trusts the fake's CA the
           same way (ssl_verify_upstream_trusted_ca).
For every run: the client got exactly the text / tool call the fake API sent; every LLM call has a
record with the expected protocol, complete, whose upstream and emitted token counts equal the
tokens the fake API sent (counted with retimer's own tokenizer over the deltas it sent); and each
call, timed by the client around it, took at least what the profile gives its stream (TTFT +
(tokens - 1) / rate, from the record's own target and tokens) and was not held for seconds longer
(tests/support/clients/pacing.py: bounds a loaded machine keeps). The WebSocket clients run with
`--profile passthrough` too: their turns are recorded there as well. How close the paced run's
growth over a passthrough run comes to the prediction is bench/clients.py's figure.
The fake API writes each answer in two bursts, so any cadence can only come from the proxy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from retimer.wire.tokenizer import count_tokens
from tests.support.clients.agent_script import AgentScript, ApiRequest, Reply
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

SDK = SUPPORT / "clients" / "sdk"
CLIENTS_NPM = Path(os.environ.get("RETIMER_CLIENTS_NPM") or TESTS.parent / ".venv" / "clients" / "npm")
UPSTREAM_MAP = SUPPORT / "clients" / "upstream_map.py"
WARMUP = "warm up"  # tests/support/clients/sdk/common.py
PACED = ("--ttft", "400ms", "--tps", "40", "--jitter", "0")
PASSTHROUGH = ("--profile", "passthrough")

# the protocol (adapter) retimer must name in the record of each kind of fake API call
PROTOCOL = {"openai-chat": "openai-chat", "openai-responses": "openai-responses",
            "openai-responses-ws": "websocket", "openai-realtime": "websocket",
            "anthropic-messages": "anthropic-messages", "gemini": "gemini-sse",
            "ollama-chat": "ollama", "ollama-generate": "ollama"}
# client id -> (argv after the interpreter, interpreter: "python" | "node", fake API kinds expected)
# (every client first makes an untimed warm-up call: see tests/support/clients/sdk/common.py)
CLIENTS: dict[str, tuple[list[str], str, list[str]]] = {
    "openai-chat": (["openai_sdk.py", "chat"], "python", ["openai-chat"] * 3),
    "openai-responses": (["openai_sdk.py", "responses"], "python", ["openai-responses"] * 3),
    "openai-responses-ws": (["openai_sdk.py", "responses-ws"], "python", ["openai-responses-ws"] * 2),
    "openai-realtime": (["openai_sdk.py", "realtime"], "python", ["openai-realtime"] * 2),
    "anthropic": (["anthropic_sdk.py"], "python", ["anthropic-messages"] * 3),
    "google-genai": (["genai_sdk.py"], "python", ["gemini"] * 3),
    "ollama": (["ollama_sdk.py"], "python", ["ollama-chat"] * 2 + ["ollama-generate"]),
    "litellm": (["litellm_sdk.py"], "python", ["openai-chat"] * 3 + ["anthropic-messages"] * 3),
    "vercel-ai-responses": (["vercel_ai.mjs", "responses"], "node", ["openai-responses"] * 3),
    "vercel-ai-chat": (["vercel_ai.mjs", "chat"], "node", ["openai-chat"] * 3),
}
WS_CLIENTS = {"openai-responses-ws", "openai-realtime"}
KEYS = {"OPENAI_API_KEY": "sk-test-fake", "ANTHROPIC_API_KEY": "sk-ant-test-fake",
        "GEMINI_API_KEY": "test-fake", "GOOGLE_API_KEY": "test-fake"}
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
               "NO_PROXY", "no_proxy", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
               "GOOGLE_GEMINI_BASE_URL", "OLLAMA_HOST", "SSL_CERT_FILE", "NODE_USE_ENV_PROXY")


def _node() -> str:
    """A Node >= 22.21 (fetch honours NODE_USE_ENV_PROXY): RETIMER_TEST_NODE (scripts/test sets
    it), else scripts/test-node's copy in .venv/node, else `node` from PATH."""
    for cand in (os.environ.get("RETIMER_TEST_NODE"), str(TESTS.parent / ".venv/node/bin/node"),
                 shutil.which("node")):
        if cand and Path(cand).exists():
            out = subprocess.run([cand, "--version"], capture_output=True, text=True).stdout
            major, minor = map(int, re.match(r"v(\d+)\.(\d+)", out).groups())  # type: ignore[union-attr]
            if major >= 24 or (major == 22 and minor >= 21):
                return cand
    raise AssertionError("no Node >= 22.21 for the Vercel AI SDK client: run scripts/test-node "
                         "(or the suite via scripts/test) or set RETIMER_TEST_NODE")


ANSWER = ("It is 18 degrees and sunny in Paris today, with a light breeze from the west and "
          "clear skies expected until the evening, when a few clouds may roll in.")


class Proxies:
    """The retimer proxies of the module, shared by the cases (each costs seconds to start on a
    loaded machine, so all six start at once): forward (upstream_map.py, real hosts) and reverse
    (`--upstream` the fake's TLS port, or its plain port for Ollama), paced and passthrough."""

    KINDS = ("forward", "reverse", "reverse-http")

    def __init__(self, tmp: Path, fake: FakeAPI) -> None:
        self.running: dict[tuple[str, tuple[str, ...]], RetimerProxy] = {}
        for kind in self.KINDS:
            for profile in (PACED, PASSTHROUGH):
                name = f"{kind}-{'paced' if profile == PACED else 'passthrough'}"
                args = ["--quiet", *profile]
                if kind == "forward":
                    args += ["--set", f"scripts={UPSTREAM_MAP}"]
                else:
                    args += ["--upstream", fake.http_url if kind == "reverse-http" else fake.url]
                self.running[kind, profile] = RetimerProxy(tmp / name, *args, upstream_ca=fake.ca_path)
        with pytest.MonkeyPatch.context() as mp:  # read by upstream_map.py in the proxy
            mp.setenv("FAKEAPI_PORT", str(fake.port))
            mp.setenv("FAKEAPI_HTTP_PORT", str(fake.http_port))
            with ThreadPoolExecutor(len(self.running)) as pool:
                started = [pool.submit(p.start, 60) for p in self.running.values()]
            try:
                for f in started:
                    f.result()
            except BaseException:
                self.stop()
                raise

    def get(self, kind: str, profile: tuple[str, ...]) -> RetimerProxy:
        return self.running[kind, profile]

    def stop(self) -> None:
        for proxy in self.running.values():
            proxy.stop()


class Script(AgentScript):
    """The agent loop's answers; a brief one to a client's warm-up call."""

    def __call__(self, req: ApiRequest) -> Reply:
        if WARMUP in json.dumps(req.body):
            return Reply("OK")
        return super().__call__(req)


pytestmark = pytest.mark.fake_api(
    script=lambda: Script(text=ANSWER, tool="get_weather", arguments={"city": "Paris"}), bursts=2)


@pytest.fixture(scope="module")
def sdk_proxies(tmp_path_factory: pytest.TempPathFactory, fake_api: FakeAPI) -> Iterator[Proxies]:
    """The module's six proxies (forward, reverse, reverse-http; paced and passthrough)."""
    p = Proxies(tmp_path_factory.mktemp("retimer"), fake_api)
    try:
        yield p
    finally:
        p.stop()


def _client_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    return {**env, **KEYS, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1",
            "RETIMER_CLIENTS_NPM": str(CLIENTS_NPM), **extra}


def _argv(client: str) -> list[str]:
    args, interp, _ = CLIENTS[client]
    if interp == "node":
        assert (CLIENTS_NPM / "node_modules" / "ai").is_dir(), (
            f"the Vercel AI SDK is not in {CLIENTS_NPM}: run scripts/install-clients")
        return [_node(), str(SDK / args[0]), *args[1:]]
    return [sys.executable, str(SDK / args[0]), *args[1:]]


def _log_lines(proxy: RetimerProxy) -> list[str]:
    if not proxy.log_path.exists():
        return []
    return [x for x in proxy.log_path.read_text().split("\n")[:-1] if x.strip()]


def _run(client: str, mode: str, profile: tuple[str, ...], fake: FakeAPI, proxies: Proxies,
         tmp: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[ApiRequest]]:
    """One client run through retimer; returns (the client's JSON line, its records, LLM requests).

    forward: `retimer run -- CLIENT` (it finds the module's forward retimer on its port with the
    same CA and uses it, as `retimer run` does with any running retimer); reverse: the client's
    base URL is the reverse retimer's address."""
    fake.clear()
    tmp.mkdir(parents=True)
    ollama = client == "ollama"
    kind = "forward" if mode == "forward" else "reverse-http" if ollama else "reverse"
    proxy = proxies.get(kind, profile)
    seen = len(_log_lines(proxy))
    if mode == "forward":
        env = _client_env({"OLLAMA_HOST": fake.http_url} if ollama else {})  # a loopback server
        cmd = [sys.executable, "-m", "retimer", "run", "--listen-port", str(proxy.port),
               "--set", f"confdir={proxy.confdir}", "--", *_argv(client)]
    else:
        env = _client_env({"OLLAMA_HOST": proxy.url} if ollama else {"SDK_BASE": proxy.url})
        cmd = _argv(client)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env,
                          stdin=subprocess.DEVNULL, cwd=tmp)
    assert proc.returncode == 0, (f"{client} {mode} {profile}: exit {proc.returncode}\n"
                                  f"{proc.stderr[-5000:]}\n--- retimer ---\n{proxy.stderr()[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    llm = fake.llm_requests()
    deadline = time.monotonic() + 5  # a record is written as its stream ends at the proxy
    while True:
        records = [json.loads(x) for x in _log_lines(proxy)[seen:]]
        if sum(1 for r in records if r["emitted"]["tokens"]) >= len(llm) or time.monotonic() > deadline:
            return out, records, llm


def _expected_tokens(req: ApiRequest) -> int:
    assert req.reply is not None
    return sum(count_tokens(d) for d in token_deltas(req.api, req.reply))


def _check_run(client: str, mode: str, out: dict, records: list[dict], llm: list[ApiRequest],
               paced: bool) -> list[tuple[dict, dict]]:
    """The per-run checks; returns the timed (not warm-up) calls' (record, client call) pairs."""
    what = f"{client} ({mode}, {'paced' if paced else 'passthrough'})"
    kinds = CLIENTS[client][2]
    assert [r.api for r in llm] == kinds, f"{what}: the fake API saw {[r.api for r in llm]}"
    # the client got exactly what the fake API sent (what it gets without retimer)
    sent = [{"text": r.reply.text, "tool": {"name": r.reply.tool, "arguments": r.reply.arguments}
             if r.reply.tool else None} for r in llm if r.reply is not None]
    got = [{"text": c["text"], "tool": c["tool"]} for c in out["calls"]]
    assert got == sent, f"{what}: the client's result differs from what was sent"
    assert any(c["tool"] for c in sent) or client in (
        "openai-responses-ws", "openai-realtime", "ollama"), f"{what}: no tool call exercised"
    if not paced and client in WS_CLIENTS:
        return []  # checked last, in the test (see _check_passthrough_ws_records)
    # one record per LLM call, in order; a WebSocket client may have more records, for turns
    # without tokens (a generate=false prewarm, session.update), which must carry none
    summary = [(r["protocol"], r["url"], r["upstream"]["tokens"], r["emitted"]["tokens"]) for r in records]
    matched = records
    if client in WS_CLIENTS:
        matched = [r for r in records if r["upstream"]["tokens"] or r["emitted"]["tokens"]]
    assert len(matched) == len(llm), f"{what}: {len(llm)} LLM calls, records {summary}"
    for req, rec in zip(llm, matched, strict=True):
        expect = _expected_tokens(req)
        assert rec["protocol"] == PROTOCOL[req.api], f"{what}: {req.api} call recorded as {summary}"
        assert req.path in rec["url"], (req.path, rec["url"])
        assert rec["outcome"] == "complete", f"{what}: {rec['outcome']}"
        assert (rec["upstream"]["tokens"], rec["emitted"]["tokens"]) == (expect, expect), (
            f"{what}: {req.api} sent {expect} tokens ({token_deltas(req.api, req.reply)!r}); "
            f"record says upstream {rec['upstream']['tokens']}, emitted {rec['emitted']['tokens']}")
        if paced:
            target = rec["target"]
            assert (target["ttft_ms"], target["tps"]) == (400.0, 40.0), f"{what}: target {target}"
    return [(rec, call) for rec, call in zip(matched, out["calls"], strict=True) if not call.get("warmup")]


def _predicted(paced: list[tuple[dict, dict]], passthrough: list[tuple[dict, dict]]) -> float:
    """What pacing adds to the timed calls, from the records' own fields: each paced call waits
    its TTFT (a call without tokens too: the model still has to produce it), then one gap per
    further token; less the time the same calls took at the proxy without pacing (the fake
    API's own latency, which the paced TTFT hides)."""
    grow = sum(rec["target"]["ttft_ms"] / 1000 + max(rec["emitted"]["tokens"] - 1, 0) / rec["target"]["tps"]
               for rec, _ in paced)
    return grow - sum((rec["emitted"]["duration_ms"] or 0.0) / 1000 for rec, _ in passthrough)


def _wall(out: dict) -> float:
    """The client's time in its LLM calls, and in a WebSocket prewarm (which has no tokens, so
    pacing must add nothing to it)."""
    return out["wall"] + out.get("prewarm", {}).get("wall", 0.0)


def _check_passthrough_ws_records(client: str, records: list[dict], llm: list[ApiRequest]) -> None:
    """Under --profile passthrough (a study's control condition) every WebSocket LLM turn must
    still have its record, as HTTP streams do."""
    with_tokens = [r for r in records if r["upstream"]["tokens"]]
    assert len(with_tokens) == len(llm), (
        f"{client} (passthrough): {len(llm)} WebSocket LLM turns, {len(records)} records: retimer "
        "records no WebSocket turn under a passthrough profile (HTTP streams are recorded)")
    for req, rec in zip(llm, with_tokens, strict=True):
        assert rec["upstream"]["tokens"] == rec["emitted"]["tokens"] == _expected_tokens(req)


CASES = [pytest.param(c, m, id=f"{c}-{m}") for c in CLIENTS for m in ("forward", "reverse")]


def _pacing_problems(client: str, mode: str, timed: list[tuple[dict, dict]]) -> list[str]:
    """Each timed call's stream against its profile (the record), and the client's own time
    around the call: it cannot have had the whole answer sooner than the profile lets it out."""
    problems = []
    for rec, call in timed:
        what = f"{client} ({mode}): a {rec['protocol']} call"
        problems += record_problems(what, rec)
        if rec["emitted"]["tokens"] and call["wall"] < predicted_s(rec) - EARLY_S:
            problems.append(f"{what} took {call['wall']:.3f}s at the client, sooner than the "
                            f"profile's {predicted_s(rec):.3f}s for {rec['emitted']['tokens']} tokens")
    return problems


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("client", "mode"), CASES)
def test_sdk_through_retimer(client: str, mode: str, fake_api: FakeAPI, sdk_proxies: Proxies,
                             tmp_path: Path) -> None:
    out1, rec1, llm1 = _run(client, mode, PACED, fake_api, sdk_proxies, tmp_path / "paced")
    timed1 = _check_run(client, mode, out1, rec1, llm1, paced=True)
    problems = _pacing_problems(client, mode, timed1)
    assert not problems, "\n".join(problems)
    if client not in WS_CLIENTS and not benchmarking():
        return
    out0, rec0, llm0 = _run(client, mode, PASSTHROUGH, fake_api, sdk_proxies, tmp_path / "passthrough")
    timed0 = _check_run(client, mode, out0, rec0, llm0, paced=False)
    if client in WS_CLIENTS:
        _check_passthrough_ws_records(client, rec0, llm0)
    if benchmarking():
        write_bench_row(suite="sdk", client=client, mode=mode, base_s=_wall(out0),
                        paced_s=_wall(out1), grew_s=_wall(out1) - _wall(out0),
                        predicted_s=_predicted(timed1, timed0), calls=len(timed1))


def test_fakeapi_shapes_without_retimer(fake_api: FakeAPI) -> None:
    """The fake API's other shapes (non-streaming answers, tool calls on every API, the Gemini
    JSON array, WebSocket tool calls, model lists) parse in the real SDKs, directly (no proxy),
    and its log holds what clients sent without their keys."""
    import anthropic
    import httpx
    import ollama
    import openai
    from google import genai
    from google.genai import types

    fake_api.clear()
    base, tool = fake_api.http_url, {"type": "object", "properties": {"city": {"type": "string"}}}
    oa = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-secret-key", max_retries=0)
    chat = oa.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                      tools=[{"type": "function", "function": {"name": "get_weather", "parameters": tool}}])
    (call,) = chat.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert chat.choices[0].finish_reason == "tool_calls"
    resp = oa.responses.create(model="gpt-5", input="hi", tools=[{"type": "function", "name": "get_weather", "parameters": tool}])
    assert [(o.type, o.name) for o in resp.output] == [("function_call", "get_weather")]
    assert oa.responses.create(model="gpt-5", input="hi").output_text == ANSWER
    with oa.responses.connect() as conn:  # WebSocket mode: a function call's events
        conn.send({"type": "response.create", "model": "gpt-5", "input": "hi",
                   "tools": [{"type": "function", "name": "get_weather", "parameters": tool}]})
        args = ""
        for ev in conn:
            args += ev.delta if ev.type == "response.function_call_arguments.delta" else ""
            if ev.type == "response.completed":
                assert ev.response.output[0].type == "function_call"
                break
    assert json.loads(args) == {"city": "Paris"}
    assert "gpt-4o-mini" in [m.id for m in oa.models.list()]

    an = anthropic.Anthropic(base_url=base, api_key="sk-ant-secret", max_retries=0)
    msg = an.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=[{"role": "user", "content": "hi"}],
                             tools=[{"name": "get_weather", "input_schema": tool}])
    assert (msg.stop_reason, msg.content[-1].type, msg.content[-1].input) == ("tool_use", "tool_use", {"city": "Paris"})
    assert "claude-sonnet-4-5" in [m.id for m in an.models.list()]

    gm = genai.Client(api_key="secret-goog", http_options=types.HttpOptions(base_url=base))
    cfg = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", parameters_json_schema=tool)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    g = gm.models.generate_content(model="gemini-2.5-flash", contents="hi", config=cfg)
    assert (g.function_calls[0].name, g.function_calls[0].args) == ("get_weather", {"city": "Paris"})
    assert gm.models.generate_content(model="gemini-2.5-flash", contents="hi").text == ANSWER
    array = httpx.post(f"{base}/v1beta/models/gemini-2.5-flash:streamGenerateContent", json={
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).json()  # the streamed JSON array
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in array) == ANSWER

    ol = ollama.Client(host=base)
    o = ol.chat(model="llama3.2", messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "function", "function": {"name": "get_weather", "parameters": tool}}])
    assert (o.message.tool_calls[0].function.name, o.message.tool_calls[0].function.arguments) == (
        "get_weather", {"city": "Paris"})
    assert ol.generate(model="llama3.2", prompt="hi").response == ANSWER
    assert "llama3.2:latest" in [m.model for m in ol.list().models]

    log = fake_api.requests
    assert {r.api for r in log} >= {"openai-chat", "openai-responses", "openai-responses-ws", "anthropic-messages",
                                    "gemini", "ollama-chat", "ollama-generate", "models"}
    assert log[0].body["messages"] == [{"role": "user", "content": "hi"}] and log[0].tools == ["get_weather"]
    dump = json.dumps([r.to_json() for r in log])
    assert not any(k in dump for k in ("sk-secret-key", "sk-ant-secret", "secret-goog"))
