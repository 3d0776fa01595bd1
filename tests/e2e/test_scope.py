"""What retimer touches: only LLM-shaped streams; TLS only for LLM hosts; mitmdump/mitmweb addon."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.paths import ROOT
from tests.support.proxy import RetimerProxy, free_port, post_through_proxy, wait_for_log
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

TEXT = "Only the timing changes; the words never do. " * 4


def test_https_host_not_listed_is_tunnelled_untouched(tmp_path: Path) -> None:
    """A client that trusts only the upstream's own CA still validates: no interception."""
    with FakeLLM(make_openai_stream(TEXT), tls=True) as fake, RetimerProxy(tmp_path) as proxy:
        ctx = ssl.create_default_context(cafile=str(fake.ca_path))
        with httpx.Client(proxy=proxy.url, verify=ctx) as c:
            with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                body = r.read()
            assert c.get(fake.url + "/v1/models").json()["ok"] is True
        (served, _) = fake.wait_done(2)
    assert body == served.response_body  # byte-identical: nothing parsed, nothing re-timed
    assert proxy.records(0, timeout=0.3) == []


def test_intercepted_https_is_served_with_retimers_ca(tmp_path: Path) -> None:
    with FakeLLM(make_openai_stream(TEXT), tls=True) as fake, RetimerProxy(
        tmp_path, "--intercept", r"^127\.0\.0\.1:", "--jitter", "0",
        # lazy: mitmproxy offers the client h2 without asking the (HTTP/1.1-only) upstream first
        "--set", "connection_strategy=lazy", upstream_ca=fake.ca_path,
    ) as proxy:
        with pytest.raises(httpx.ConnectError):  # the upstream's CA no longer validates
            with httpx.Client(proxy=proxy.url, verify=ssl.create_default_context(
                    cafile=str(fake.ca_path))) as c:
                c.get(fake.url + "/v1/models")
        # curl, because httpx does not negotiate h2 inside a proxy tunnel
        result = subprocess.run(
            ["curl", "-sS", "-N", "--http2", "-x", proxy.url, "--cacert", str(proxy.ca_path),
             "-w", "\n%{http_version}", "-d", "{}", fake.url + "/v1/chat/completions"],
            capture_output=True, timeout=60, check=True,
        )
        body, _, version = result.stdout.rpartition(b"\n")
        (record,) = proxy.records(1)
        (served,) = fake.wait_done(1)
    assert version == b"2"
    assert _text(body) == _text(served.response_body) == TEXT
    assert record["protocol"] == "openai-chat"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"]


def _text(body: bytes) -> str:
    from retimer.wire.protocols.openai_chat import OpenAIChatAdapter

    adapter = OpenAIChatAdapter()
    return "".join(e.text for e in [*adapter.feed(body), *adapter.end()])


def test_same_seed_same_timing_draws(tmp_path: Path) -> None:
    draws = []
    with FakeLLM(make_openai_stream(TEXT)) as fake:
        for run in range(2):
            with RetimerProxy(tmp_path / str(run), "--seed", "7", "--profile", "haiku",
                              "--tps", "3000") as proxy:
                with httpx.Client(proxy=proxy.url) as c:
                    for _ in range(3):
                        with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                            r.read()
                draws.append([(r["seed"], r["target"]["ttft_ms"]) for r in proxy.records(3)])
    assert draws[0] == draws[1]
    assert len({ttft for _, ttft in draws[0]}) == 3  # each stream draws its own TTFT


def test_mitmdump_loads_the_addon_file(tmp_path: Path) -> None:
    """`mitmdump -s addons/retimer.py --set retimer_profile=...` re-times like the CLI."""
    addon = ROOT / "addons" / "retimer.py"
    mitmdump = Path(sys.executable).parent / "mitmdump"
    port = free_port()
    log = tmp_path / "records.jsonl"
    proc = subprocess.Popen(
        [str(mitmdump), "-q", "-s", str(addon), "--listen-host", "127.0.0.1", "-p", str(port),
         "--set", f"confdir={tmp_path}", "--set", "retimer_profile=groq",
         "--set", "retimer_jitter=0", "--set", f"retimer_log={log}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    try:
        with FakeLLM(make_openai_stream(TEXT), bursts=2) as fake:
            body = post_through_proxy(port, fake.url + "/v1/chat/completions", lambda: proc.poll() is None)
        records = wait_for_log(log)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"[DONE]" in body
    assert '"profile":"groq-llama-3.3-70b"' in records
    assert b"Traceback" not in err
