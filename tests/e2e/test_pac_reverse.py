"""The PAC file (served by the real proxy, evaluated by Node) and reverse mode (`--upstream`)
with the openai and anthropic SDKs pointed at retimer by base URL alone."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from retimer.proxy.pac import CONTENT_TYPE, SPKI_HEADER, build_pac, js_regex
from retimer.wire.hosts import LLM_HOSTS, allow_hosts, is_llm_host
from tests.support.cli_main import refused
from tests.support.paths import SUPPORT
from tests.support.proxy import RetimerProxy
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM, load_fixture

NODE = "/usr/bin/node"
HOSTMAP = SUPPORT / "hostmap.py"
TEXT = "Base URLs are enough: no proxy, no CA. Ünïcödé and 数字 12,345 stay intact. " * 3
PACED = ("--ttft", "300ms", "--tps", "200", "--jitter", "0", "--profile", "o3")
pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=3)  # reverse mode's upstream

# Harness: the helpers a browser's PAC engine provides, then FindProxyForURL for each URL.
HARNESS = r"""
const vm = require('node:vm');
const fs = require('node:fs');
const [pac, urls] = [fs.readFileSync(process.argv[1], 'utf8'), JSON.parse(process.argv[2])];
function dnsDomainIs(host, domain) {
  return host.length >= domain.length && host.substring(host.length - domain.length) === domain;
}
function shExpMatch(str, exp) {
  const re = exp.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp('^' + re + '$').test(str);
}
const sandbox = { dnsDomainIs, shExpMatch };
vm.runInNewContext(pac, sandbox);
const out = {};
for (const url of urls) out[url] = sandbox.FindProxyForURL(url, new URL(url).hostname);
console.log(JSON.stringify(out));
"""


def evaluate_pac(tmp: Path, pac: str, urls: list[str]) -> dict[str, str]:
    (tmp / "proxy.pac").write_text(pac)
    result = subprocess.run([NODE, "-e", HARNESS, str(tmp / "proxy.pac"), json.dumps(urls)],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


URLS = [
    "https://api.openai.com/v1/chat/completions",
    "https://API.Anthropic.com/v1/messages",
    "https://my-resource.openai.azure.com/openai/deployments/x",
    "https://us-central1-aiplatform.googleapis.com/v1/projects",
    "https://chatgpt.com/backend-api/conversation",
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/x/converse-stream",
    "https://bedrock-runtime.us-east-1.amazonaws.com.evil.example/",
    "https://s3.us-east-1.amazonaws.com/bucket",
    "https://example.com/",
    "https://api.openai.com.evil.example/",
    "https://notapi.openai.com/",
    "https://www.google.com/",
    "http://localhost:8000/v1/chat/completions",
    "https://llm.test:8443/v1/chat/completions",
    "https://llm.test/v1",
    "http://llm.test/v1",
    "https://llm.testing.example:8443/",
    "https://models.internal.example:9443/",
]
INTERCEPT = [r"^llm\.test:(8443|443)$", r"(?i)^MODELS\.internal\.example:"]


def expected(url: str, proxy: str) -> str:
    """What retimer itself would do with the URL's host: the reference for the PAC file."""
    parsed = httpx.URL(url)
    host_port = f"{parsed.host}:{parsed.port or (80 if parsed.scheme == 'http' else 443)}"
    hit = is_llm_host(parsed.host) or any(re.search(p, host_port) for p in INTERCEPT)
    return f"PROXY {proxy}" if hit else "DIRECT"


def test_pac_logic_matches_retimers_host_rules(tmp_path: Path) -> None:
    result = evaluate_pac(tmp_path, build_pac("127.0.0.1:8080", INTERCEPT), URLS)
    assert result == {u: expected(u, "127.0.0.1:8080") for u in URLS}
    assert result["https://api.openai.com/v1/chat/completions"] == "PROXY 127.0.0.1:8080"
    assert result["https://example.com/"] == "DIRECT"
    assert result["https://llm.test/v1"] == "PROXY 127.0.0.1:8080"  # default port 443
    assert result["http://llm.test/v1"] == "DIRECT"  # port 80 is not in the pattern
    assert result["https://models.internal.example:9443/"] == "PROXY 127.0.0.1:8080"
    # every built-in LLM host, and a subdomain of it, goes through the proxy
    urls = [f"https://{h}/" for h in LLM_HOSTS] + [f"https://x.{h}/" for h in LLM_HOSTS]
    assert set(evaluate_pac(tmp_path, build_pac("127.0.0.1:8080"), urls).values()) == {
        "PROXY 127.0.0.1:8080"}


def test_python_only_patterns_are_left_out_visibly() -> None:
    assert js_regex(r"(?P<h>x)\.test") is None
    assert js_regex(r"\Ax") is None
    assert js_regex(r"(?i)abc") == 'new RegExp("abc", "i")'
    pac = build_pac("127.0.0.1:1", [r"(?P<h>x)\.test:", r"^ok\.test:"], host_regexes=())
    assert 'left out' in pac and "(?P<h>x)" in pac
    assert 'new RegExp("^ok\\\\.test:", "")' in pac


@pytest.fixture
def pac_proxy(tmp_path: Path) -> Iterator[RetimerProxy]:
    args = [a for p in INTERCEPT for a in ("--intercept", p)]
    with RetimerProxy(tmp_path / "proxy", *args) as proxy:
        yield proxy


def test_proxy_serves_its_pac_file(tmp_path: Path, pac_proxy: RetimerProxy) -> None:
    # a browser fetching the auto-config URL: origin-form, addressed to the proxy itself
    conn = http.client.HTTPConnection("127.0.0.1", pac_proxy.port, timeout=10)
    conn.request("GET", "/proxy.pac")
    resp = conn.getresponse()
    direct = resp.read().decode()
    assert resp.status == 200
    assert resp.getheader("content-type") == CONTENT_TYPE
    assert resp.getheader(SPKI_HEADER)  # lets `retimer run` recognise and check it
    # a client already using the proxy: absolute-form through it
    with httpx.Client(proxy=pac_proxy.url) as c:
        via = c.get(f"http://localhost:{pac_proxy.port}/proxy.pac")
    assert via.headers["content-type"] == CONTENT_TYPE
    assert via.text == direct
    proxy = f"127.0.0.1:{pac_proxy.port}"
    assert evaluate_pac(tmp_path, direct, URLS) == {u: expected(u, proxy) for u in URLS}
    # other paths to the proxy itself are still refused, as mitmproxy does
    with httpx.Client(proxy=pac_proxy.url) as c:
        assert c.get(f"http://127.0.0.1:{pac_proxy.port}/other.pac").status_code == 502


# -- reverse mode ---------------------------------------------------------------------------


def _check_record(record: dict, fake: FakeLLM, protocol: str) -> None:
    assert record["protocol"] == protocol
    assert record["url"].startswith(fake.url + "/")  # the upstream's address, not retimer's
    assert record["outcome"] == "complete"
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"]


def test_reverse_mode_openai_sdk(tmp_path: Path, fake: FakeLLM) -> None:
    with RetimerProxy(tmp_path, "--upstream", fake.url, *PACED) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-reverse-secret")
        stream = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True)
        pieces = [c.choices[0].delta.content for c in stream
                  if c.choices and c.choices[0].delta.content]
        (record,) = proxy.records(1)
        banner = proxy.stdout()
    assert "".join(pieces) == TEXT
    (served,) = fake.wait_done(1)
    assert len(pieces) > served.response_body.count(b"data: ")  # events were split
    assert served.headers["host"] == f"127.0.0.1:{fake.port}"  # rewritten to the upstream
    _check_record(record, fake, "openai-chat")
    assert f"OPENAI_BASE_URL={proxy.url}/v1" in banner
    assert "sk-reverse-secret" not in proxy.log_path.read_text() + banner + proxy.stderr()


def test_reverse_mode_anthropic_sdk(tmp_path: Path, fake: FakeLLM) -> None:
    with RetimerProxy(tmp_path, "--upstream", fake.url + "/", *PACED) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-reverse")
        with client.messages.stream(model="claude-test", max_tokens=100,
                                    messages=[{"role": "user", "content": "hi"}]) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
        (record,) = proxy.records(1)
    assert "".join(pieces) == TEXT
    assert final.content[0].text == TEXT
    _check_record(record, fake, "anthropic-messages")


def test_reverse_mode_https_upstream(tmp_path: Path) -> None:
    """The real use: an HTTPS API behind retimer's plain-HTTP loopback port."""
    with FakeLLM(make_openai_stream(TEXT), bursts=3, tls=True) as fake:
        upstream = f"https://llm.test:{fake.port}"  # a name in the fake's certificate
        with RetimerProxy(tmp_path, "--upstream", upstream, "--set", f"scripts={HOSTMAP}",
                          *PACED, upstream_ca=fake.ca_path) as proxy:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-x")
            stream = client.chat.completions.create(model="gpt-test", messages=[], stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            (record,) = proxy.records(1)
    assert text == TEXT
    assert record["url"] == f"{upstream}/v1/chat/completions"
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2


def test_reverse_mode_llm_host_checks_use_the_upstream_host(tmp_path: Path, fake: FakeLLM) -> None:
    """An event stream of no known API shape is paced only for LLM hosts. With
    keep_host_header the client's Host names retimer itself; the check must still see the
    upstream, api.openai.com (connected to the fake by tests/support/hostmap.py)."""
    upstream = f"http://api.openai.com:{fake.port}"
    args = ("--upstream", upstream, "--set", f"scripts={HOSTMAP}", "--set", "keep_host_header=true")
    with RetimerProxy(tmp_path, *args, *PACED) as proxy:
        headers = {"x-fake-fixture": "openai-chat/gpt4o-text-include-usage.sse"}
        with httpx.Client() as c:
            r = c.get(proxy.url + "/custom/events", headers=headers)
        (record,) = proxy.records(1)
    assert r.status_code == 200
    (served,) = fake.wait_done(1)
    assert served.headers["host"] == f"127.0.0.1:{proxy.port}"  # kept as the client sent it
    assert record["url"] == f"{upstream}/custom/events"
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("ftp://api.openai.com", "http:// or https://"),
        ("api.openai.com", "http:// or https://"),
        ("https://", "no valid host"),
        ("https://api.openai.com/v1", "origin only"),
        ("https://api.openai.com:99999", "not a URL"),
        ("https://user:pw@api.openai.com", "credentials"),
        ("https://bad host.com", "no valid host"),
    ],
)
def test_bad_upstream_gets_one_line(value: str, needle: str, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = refused(["--upstream", value], capsys, monkeypatch)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retimer: error: --upstream:"), err
    assert needle in lines[0]


AGENT_CALLS = [("api.cline.bot", "/api/v1/chat/completions"),
               ("api.kilo.ai", "/api/openrouter/chat/completions"),
               ("api.continue.dev", "/model-proxy/v1/chat/completions"),
               ("portal.qwen.ai", "/v1/chat/completions")]


def test_ide_agents_default_hosts_are_retimed_and_their_other_calls_left_alone(tmp_path: Path) -> None:
    """Cline's, Kilo Code's, Continue's and Qwen Code's own model hosts are intercepted with no
    --intercept: their chat streams are re-timed; a JSON POST of the mixed hosts' other traffic
    (an account call, a sign-in) is neither held nor recorded."""
    with FakeLLM(make_openai_stream(TEXT), bursts=3, tls=True) as fake, \
            RetimerProxy(tmp_path, "--set", f"scripts={HOSTMAP}", "--set", "ssl_insecure=true",
                         *PACED) as proxy, \
            httpx.Client(proxy=proxy.url, verify=str(proxy.ca_path), timeout=30) as client:
        texts = []
        for host, path in AGENT_CALLS:
            r = client.post(f"https://{host}:{fake.port}{path}", json={
                "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
            texts.append("".join(c["delta"].get("content") or "" for line in r.text.splitlines()
                                 if line.startswith("data: {") for c in json.loads(line[6:])["choices"]))
        records = proxy.records(len(AGENT_CALLS))
        other = [client.post(f"https://{host}:{fake.port}/api/v1/oauth2/token", json={"code": "x"})
                 for host in ("chat.qwen.ai", "api.kilo.ai")]
        time.sleep(0.3)
        after = proxy.records(len(AGENT_CALLS))
        jetbrains = client.post(f"https://api.jetbrains.ai:{fake.port}/user/v5/llm/chat/stream/v7",
                                json={"prompt": "ij.chat.request.new-chat-on-start"},
                                headers={"x-fake-fixture": "misc/jetbrains-ai-chat-stream-v7.sse"})
        (aia,) = proxy.records(len(AGENT_CALLS) + 1)[len(AGENT_CALLS):]
    assert jetbrains.content == load_fixture("misc/jetbrains-ai-chat-stream-v7.sse")
    assert (aia["protocol"], aia["outcome"]) == ("generic", "complete")
    assert aia["emitted"]["ttft_ms"] >= 298 and aia["emitted"]["tokens"] > 20
    assert texts == [TEXT] * len(AGENT_CALLS)
    assert [r["url"].split("/")[2].split(":")[0] for r in records] == [h for h, _ in AGENT_CALLS]
    assert all(r["protocol"] == "openai-chat" and r["emitted"]["ttft_ms"] >= 298 for r in records)
    assert [r.status_code for r in other] == [200, 200] and len(after) == len(AGENT_CALLS)
    assert not is_llm_host("api.kilo.ai") and is_llm_host("portal.qwen.ai")
    assert any("api\\.kilo\\.ai" in p for p in allow_hosts([]))
