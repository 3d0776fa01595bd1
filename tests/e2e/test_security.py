"""Security: loopback by default, remote only with a flag and proxy auth, no secret in any
artefact, the CA key owner-only in retimer's own confdir, upstream TLS verified."""

from __future__ import annotations

import base64
import io
import os
import stat
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from rich.console import Console

from retimer.cli.proxy.liveview import LiveView
from retimer.proxy.certs import ensure_ca
from tests.support.proxy import RetimerProxy, free_port, run_cli
from tests.support.sse_client import read_until_error, sse_text
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

TEXT = "alpha beta gamma delta " * 20
pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=3)


def _listeners(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net shows them) of sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


# -- where it listens ----------------------------------------------------------------------
@pytest.mark.parametrize(("args", "needs"), [
    (["--listen-host", "0.0.0.0"], "--allow-remote"),
    (["--listen-host", "0.0.0.0", "--allow-remote"], "--proxy-auth"),
    (["--listen-host", "0.0.0.0", "--allow-remote", "--set", "proxyauth=any"], "--proxy-auth"),
    (["--set", "listen_host=0.0.0.0"], "--allow-remote"),
    (["--set", "mode=regular@0.0.0.0:{port}"], "--allow-remote"),
    (["--listen-host", "0.0.0.0", "--allow-remote", "--proxy-auth", "alice"], "USER:PASS"),
])
def test_remote_listening_needs_the_flag_and_auth(tmp_path: Path, args: list[str], needs: str):
    port = free_port()
    args = [a.format(port=port) for a in args]
    started = time.monotonic()
    r = run_cli("--listen-port", str(port), "--set", f"confdir={tmp_path}", *args, timeout=30)
    assert r.returncode == 2
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("retimer: error:") and needs in line
    assert "Traceback" not in r.stderr and time.monotonic() - started < 20
    assert _listeners(port) == set()


def test_remote_listening_with_flag_and_auth_demands_credentials(tmp_path: Path, fake: FakeLLM):
    password = "pw-Zq81-never-logged"
    with RetimerProxy(tmp_path, "--listen-host", "0.0.0.0", "--allow-remote",
                      "--proxy-auth", f"alice:{password}") as proxy:
        assert _listeners(proxy.port) == {"00000000"}
        assert "warning" in proxy.stdout() and "0.0.0.0" in proxy.stdout()
        with httpx.Client(proxy=proxy.url) as c:
            denied = c.post(fake.url + "/v1/chat/completions", json={})
        with httpx.Client(proxy=f"http://alice:{password}@127.0.0.1:{proxy.port}") as c:
            allowed = c.post(fake.url + "/v1/chat/completions", json={})
        proxy.records(1)
        artefacts = proxy.stdout() + proxy.stderr() + proxy.log_path.read_text()
    assert denied.status_code == 407
    assert allowed.status_code == 200 and sse_text(allowed.content) == TEXT
    assert len(fake.requests) == 1  # the denied one never reached the upstream
    assert "proxy-authorization" not in fake.requests[0].headers  # consumed, not forwarded
    basic = base64.b64encode(f"alice:{password}".encode()).decode()
    assert password not in artefacts and basic not in artefacts


# -- secrets never reach an artefact --------------------------------------------------------
SECRETS = {
    "bearer": "sk-proj-SECRETbearer7741",
    "x_api_key": "sk-ant-SECRETxapikey3310",
    "api_key_header": "SECRETazurekey5521",
    "goog": "AIzaSECRETgoog9902",
    "cookie": "SECRETcookie6634",
    "query_key": "SECRETquerykey1187",
    "query_token": "SECRETquerytoken4420",
    "body": "SECRETbodyvalue8876",
    "proxy_password": "SECRETproxypw2209",
}


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.mark.parametrize("verbosity", ["info"])  # warn, the default, logs a subset of it
def test_no_secret_reaches_log_records_output_confdir_cache_or_live_view(
    tmp_path: Path, fake: FakeLLM, verbosity: str
):
    s = SECRETS
    cache = tmp_path / "cache"
    proxy_url = None
    headers = {"x-api-key": s["x_api_key"], "api-key": s["api_key_header"],
               "x-goog-api-key": s["goog"], "cookie": f"session={s['cookie']}"}
    query = f"?key={s['query_key']}&access_token={s['query_token']}"
    with RetimerProxy(
        tmp_path, "--profile", "groq", "--tps", "3000", "--cache", str(cache),
        "--proxy-auth", f"user:{s['proxy_password']}",
        "--set", f"termlog_verbosity={verbosity}",
    ) as proxy:
        proxy_url = f"http://user:{s['proxy_password']}@127.0.0.1:{proxy.port}"
        oa = openai.OpenAI(base_url=fake.url + "/v1", api_key=s["bearer"], max_retries=0,
                           default_headers=headers, default_query={"key": s["query_key"]},
                           http_client=httpx.Client(proxy=proxy_url))
        for _ in range(2):  # the second is a cache hit
            stream = oa.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_body={"metadata": {"note": s["body"]}, "user": s["body"]})
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == TEXT
        an = anthropic.Anthropic(base_url=fake.url, api_key=s["x_api_key"], max_retries=0,
                                 default_headers={"cookie": f"session={s['cookie']}"},
                                 http_client=anthropic.DefaultHttpxClient(proxy=proxy_url))
        with an.messages.stream(model="c", max_tokens=9, messages=[
                {"role": "user", "content": s["body"]}]) as st:
            assert "".join(st.text_stream) == TEXT
        all_headers = {**headers, "authorization": f"Bearer {s['bearer']}"}
        with httpx.Client(proxy=proxy_url, headers=all_headers) as c:
            faults = ({"x-fake-abort-after": "2"}, {"x-fake-error-after": "2"})
            for extra in faults:  # the error paths log too
                with c.stream("POST", fake.url + "/v1/chat/completions" + query,
                              json={"secret": s["body"]}, headers=extra) as r:
                    read_until_error(r)
            c.post(fake.url + "/v1/chat/completions" + query, json={"k": s["body"]},
                   headers={"x-fake-fixture": "ollama/sk-phi3-api-chat-tail-excerpt.ndjson"})
            c.get(fake.url + "/v1/models" + query)
        records = proxy.records(5)
        time.sleep(0.3)
    assert len(records) >= 5 and any(r["cache"] == "hit" for r in records)
    assert any("REDACTED" in r["url"] for r in records)
    # the live view: the table and the plain lines, wide enough that nothing is cut
    buf = io.StringIO()
    view = LiveView(out=buf, interactive=True)
    plain = LiveView(out=buf, interactive=False)
    for r in records:
        view(r)
        plain(r)
    Console(file=buf, width=500).print(view.table())
    artefacts = {
        "records": proxy.log_path.read_bytes(),
        "stdout": proxy.stdout().encode(),
        "stderr": proxy.stderr().encode(),
        "confdir": _files(proxy.confdir),
        "cache": _files(cache),
        "live view": buf.getvalue().encode(),
    }
    assert artefacts["cache"] and artefacts["stdout"]  # something was written to search
    for name, secret in s.items():
        for where, blob in artefacts.items():
            assert secret.encode() not in blob, f"{name} secret found in {where}"
    basic = base64.b64encode(f"user:{s['proxy_password']}".encode())
    assert not any(basic in blob for blob in artefacts.values())


# -- the CA key -----------------------------------------------------------------------------
def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _assert_owner_only(confdir: Path) -> None:
    assert _mode(confdir) == 0o700
    keys = [p for p in confdir.iterdir()
            if p.suffix == ".p12" and "cert" not in p.name or b"PRIVATE KEY" in p.read_bytes()]
    assert {p.name for p in keys} >= {"mitmproxy-ca.pem", "mitmproxy-ca.p12"}
    for key in keys:
        assert _mode(key) == 0o600, f"{key.name} is {oct(_mode(key))}"


def test_ca_key_is_created_owner_only_even_with_a_permissive_umask(tmp_path: Path):
    old = os.umask(0)
    try:
        ensure_ca(tmp_path / "fresh", key_size=1024)
    finally:
        os.umask(old)
    _assert_owner_only(tmp_path / "fresh")


def test_loose_existing_confdir_and_key_are_tightened(tmp_path: Path):
    confdir = tmp_path / "old"
    ensure_ca(confdir, key_size=1024)
    confdir.chmod(0o755)
    (confdir / "mitmproxy-ca.pem").chmod(0o644)
    ensure_ca(confdir, key_size=1024)
    _assert_owner_only(confdir)


def test_running_proxy_keeps_its_ca_in_its_own_owner_only_confdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    proxy = RetimerProxy(tmp_path / "run")
    i = proxy.args.index(f"confdir={proxy.confdir}")
    del proxy.args[i - 1 : i + 1]  # the default confdir, under $HOME
    with proxy:  # and by default it listens on 127.0.0.1, nothing else
        assert _listeners(proxy.port) == {"0100007F"}
    _assert_owner_only(home / ".retimer")
    assert not (home / ".mitmproxy").exists()  # not mitmproxy's shared one


# -- upstream TLS is verified -----------------------------------------------------------------
@pytest.mark.parametrize("insecure", [False, True])
def test_untrusted_upstream_certificate_is_a_502_not_a_stream(tmp_path: Path, insecure: bool):
    sets = ("--set", "ssl_insecure=true") if insecure else ()
    with FakeLLM(make_openai_stream(TEXT), tls=True) as fake, RetimerProxy(
        tmp_path, "--intercept", r"^127\.0\.0\.1:", *sets  # the fake's CA is NOT trusted
    ) as proxy:
        with httpx.Client(proxy=proxy.url, verify=proxy.client_ssl_context()) as c:
            r = c.post(fake.url + "/v1/chat/completions", json={})
        if insecure:  # the control: only verification stands in the way
            assert r.status_code == 200 and sse_text(r.content) == TEXT
            return
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-x", max_retries=0,
                               http_client=httpx.Client(proxy=proxy.url,
                                                        verify=proxy.client_ssl_context()))
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="m", messages=[], stream=True)
        time.sleep(0.3)
        records = proxy.records(0, timeout=0)
    assert r.status_code == 502 and "certificate" in r.text.lower()
    assert info.value.status_code == 502
    assert fake.requests == []  # no request ever reached the untrusted upstream
    assert records == []
