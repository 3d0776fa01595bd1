"""`retimer run`, `retimer env` and `retimer ca` with real programs: the openai SDK, Node, curl.

The fake LLM speaks HTTPS with its own CA under the name llm.test (tests/support/hostmap.py connects it
to loopback inside the proxy, so NO_PROXY's loopback entries do not bypass retimer). A second
TLS server, other.test, has a CA that nothing trusts: a client reaching it through retimer must
see that server's own certificate and reject it, which shows it was tunnelled, not intercepted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retimer.cli.launch.env import LOOPBACK
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.run_cmd import CLIENTS, HOSTMAP, PACED, TEXT, Run
from tests.support.stream_bodies import load_fixture, make_ollama_stream
from tests.support.upstream import FakeLLM

pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=3, tls=True)

# scripts/test sets RETIMER_TEST_NODE to a Node >= 22.21 (fetching one if the system's is older)
NODE = os.environ.get("RETIMER_TEST_NODE") or shutil.which("node") or "node"


@pytest.fixture
def other() -> Iterator[FakeLLM]:
    """A TLS server whose CA is in no trust store: a non-LLM host."""
    with FakeLLM(tls=True) as f:
        yield f


def _cert_sha256(pem: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.read_text())).hexdigest()


def _check_paced_record(records: list[dict]) -> None:
    (record,) = records
    assert record["protocol"] == "openai-chat"
    assert record["url"].startswith("https://llm.test:")
    assert record["outcome"] == "complete"
    assert (record["target"]["ttft_ms"], record["target"]["tps"]) == (300.0, 200.0)
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2  # held back to the target: it was paced
    assert record["upstream"]["ttft_ms"] < 300.0
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 40
    tokens = record["emitted"]["tokens"]
    assert record["emitted"]["duration_ms"] >= 0.8 * (tokens - 1) / 200 * 1000  # ~200 tok/s


def _sse_pieces(body: str) -> list[str]:
    pieces = []
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            choices = json.loads(line[6:])["choices"]
            if choices and choices[0]["delta"].get("content"):
                pieces.append(choices[0]["delta"]["content"])
    return pieces


def test_python_openai_sdk_is_retimed_and_other_hosts_keep_their_certificate(
    tmp_path: Path, fake: FakeLLM, other: FakeLLM
) -> None:
    run = Run(tmp_path, fake)
    llm, other_url = fake.url_for("llm.test"), other.url_for("other.test")
    result = run(sys.executable, str(CLIENTS / "openai_client.py"), llm, other_url, "3")
    assert result.returncode == 3, result.stderr  # the command's exit code is retimer's
    out = json.loads(result.stdout)
    assert "".join(out["pieces"]) == TEXT
    (served,) = fake.wait_done(1)
    assert len(out["pieces"]) > served.response_body.count(b"data: ")  # events were split
    _check_paced_record(run.records())
    # llm.test was intercepted: the client saw a certificate minted by retimer, and trusted it
    assert out["llm_cert"] != _cert_sha256(fake.cert_path)
    # other.test was tunnelled: the client saw the real server's certificate and, as its CA is
    # not in the bundle (system roots + retimer's CA), rejected it
    assert out["other_cert"] == _cert_sha256(other.cert_path)
    assert out["other_verified"] == "verify-error: unable to get local issuer certificate"
    assert "CERTIFICATE_VERIFY_FAILED" in out["other_httpx"]
    assert other.requests == []  # no request ever reached it: every handshake was refused
    assert "sk-run-secret" not in run.log.read_text() + result.stderr


def test_curl_is_retimed_and_other_hosts_fail_verification(
    tmp_path: Path, fake: FakeLLM, other: FakeLLM
) -> None:
    run = Run(tmp_path, fake)
    llm, other_url = fake.url_for("llm.test"), other.url_for("other.test")
    data = json.dumps({"model": "gpt-test", "stream": True, "messages": []})
    script = (
        f"curl -sS -N --fail -H 'content-type: application/json' -d {shlex.quote(data)} "
        f"{llm}/v1/chat/completions > llm.out\n"
        f"curl -sS {other_url}/v1/models > other.out 2> other.err\n"
        "echo $? > other.rc\n"
        "exit 5\n"
    )
    result = run("sh", "-c", script)
    assert result.returncode == 5, result.stderr
    assert "".join(_sse_pieces((tmp_path / "llm.out").read_text())) == TEXT
    _check_paced_record(run.records())
    assert (tmp_path / "other.rc").read_text().strip() == "60"  # curl: peer certificate failed
    assert "SSL certificate problem: unable to get local issuer certificate" in (
        tmp_path / "other.err").read_text()


def _node_version(node: str) -> tuple[int, int]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = re.match(r"v(\d+)\.(\d+)", out.strip()).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def _env_proxy_supported(node: str) -> bool:
    """Node's fetch honours NODE_USE_ENV_PROXY from 24.0 and 22.21 on."""
    major, minor = _node_version(node)
    return major >= 24 or (major == 22 and minor >= 21)


@pytest.mark.parametrize("mode", ["https", "fetch"])
def test_node_is_retimed(tmp_path: Path, fake: FakeLLM, other: FakeLLM, mode: str) -> None:
    if mode == "fetch":
        assert _env_proxy_supported(NODE), (
            f"{NODE} is Node {'.'.join(map(str, _node_version(NODE)))}: its fetch ignores "
            "NODE_USE_ENV_PROXY (needs 22.21+ or 24+); run the tests with scripts/test, which "
            "provides one, or set RETIMER_TEST_NODE")
    run = Run(tmp_path, fake)
    llm, other_url = fake.url_for("llm.test"), other.url_for("other.test")
    result = run(NODE, str(CLIENTS / "node_client.mjs"), mode, llm, other_url, "4")
    assert result.returncode == 4, result.stderr
    out = json.loads(result.stdout)
    assert "".join(out["pieces"]) == TEXT
    _check_paced_record(run.records())
    # tunnelled: Node saw the real server's certificate (an intercepted host whose upstream
    # failed would have answered 502 instead of failing the handshake)
    assert out["otherError"] in ("UNABLE_TO_VERIFY_LEAF_SIGNATURE", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY")


def test_a_users_own_ca_variables_are_merged_not_replaced(
    tmp_path: Path, fake: FakeLLM, other: FakeLLM
) -> None:
    """A company CA in NODE_EXTRA_CA_CERTS or SSL_CERT_FILE stays trusted under `retimer run`,
    next to retimer's: the company's hosts (tunnelled) and the LLM host (intercepted) both
    verify; a variable naming a missing file is one warning line."""
    run = Run(tmp_path, fake)
    corp = tmp_path / "corp-ca.pem"
    corp.write_bytes(Path(str(other.ca_path)).read_bytes())
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(corp), "SSL_CERT_FILE": str(corp)}
    # the company's host: tunnelled on loopback, its certificate names localhost
    llm, other_url = fake.url_for("llm.test"), other.url_for("localhost")
    python = run(sys.executable, str(CLIENTS / "openai_client.py"), llm, other_url, "0", env=env)
    assert python.returncode == 0, python.stderr
    out = json.loads(python.stdout)
    assert "".join(out["pieces"]) == TEXT and out["other_httpx"] == "ok"
    node = run(NODE, str(CLIENTS / "node_client.mjs"), "https", llm, other_url, "0", env=env)
    assert node.returncode == 0, node.stderr
    assert json.loads(node.stdout)["otherError"] == "none"
    assert corp.read_bytes() == Path(str(other.ca_path)).read_bytes()  # theirs is never written
    missing = run(NODE, str(CLIENTS / "node_client.mjs"), "https", llm, other_url, "0",
                  env={**os.environ, "NODE_EXTRA_CA_CERTS": str(tmp_path / "gone.pem")})
    assert json.loads(missing.stdout)["otherError"] != "none"
    warned = [x for x in missing.stderr.splitlines() if "gone.pem" in x]
    assert warned == [f"retimer: warning: NODE_EXTRA_CA_CERTS={tmp_path / 'gone.pem'} cannot be "
                      "read (No such file or directory); the program gets retimer's CA without it"]
    printed = run_cli("env", "--set", f"confdir={run.confdir}", env={**os.environ,
                                                                   "NODE_EXTRA_CA_CERTS": str(corp)})
    line = next(x for x in printed.stdout.splitlines() if x.startswith("export NODE_EXTRA_CA_CERTS="))
    merged = Path(line.split("=", 1)[1])
    assert merged.parent == run.confdir / "merged"
    assert merged.read_text().startswith(corp.read_text().rstrip("\n"))
    assert merged.read_text().endswith((run.confdir / "mitmproxy-ca-cert.pem").read_text())


@pytest.fixture
def echo_ws() -> Iterator[str]:
    """A plain WebSocket echo server on loopback: what an IDE bridge or MCP socket looks like."""
    import threading

    from websockets.sync.server import ServerConnection, serve

    def echo(conn: ServerConnection) -> None:
        for message in conn:
            conn.send(message)

    with serve(echo, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/bridge"
        server.shutdown()


@pytest.mark.parametrize("local", [True, False], ids=["default", "no-local"])
def test_run_retimes_a_loopback_model_server_and_nothing_else(
        tmp_path: Path, echo_ws: str, local: bool) -> None:
    """A local Ollama (the real `ollama` SDK, plain HTTP on 127.0.0.1) is re-timed through
    `retimer run` by default; an MCP-style event stream and a WebSocket on loopback in the
    same command pass unchanged and unrecorded. `--no-local` reaches loopback directly."""
    with FakeLLM(bursts=1) as server:
        server.ollama_body = make_ollama_stream(TEXT)
        base = f"http://127.0.0.1:{server.port}"
        run = Run(tmp_path, server)
        if not local:
            run.options.insert(0, "--no-local")
        done = run(sys.executable, str(CLIENTS / "local_client.py"), base, f"{base}/mcp", echo_ws)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        served = {s.path: s for s in server.requests}
    assert "".join(out["pieces"]) == TEXT
    assert out["mcp"] == load_fixture("openai-chat/gpt4o-text-include-usage.sse").decode()
    assert out["echoes"] == [f"ping {i}: ordinary words that are not an LLM's" for i in range(5)]
    assert set(served) == {"/api/chat", "/mcp"}
    records = run.records()
    if not local:
        assert records == []
        assert "local model servers" not in done.stderr
        return
    assert "LLM hosts and local model servers re-timed" in done.stderr
    (record,) = records  # the MCP stream and the WebSocket left no record: untouched
    assert record["protocol"] == "ollama" and record["outcome"] == "complete"
    assert record["url"] == f"{base}/api/chat"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 20
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2  # held back to the profile's TTFT
    assert out["ollama_s"] >= 0.3


STREAM_CHAT = """
import json, sys, httpx
with httpx.stream("POST", sys.argv[1] + "/v1/chat/completions", timeout=30, json={
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
    body = r.read().decode()
print("".join(c["delta"].get("content") or "" for line in body.splitlines()
              if line.startswith("data: {") for c in json.loads(line[6:])["choices"]))
"""


def test_a_local_https_model_server_is_named_and_can_be_retimed(tmp_path: Path, fake: FakeLLM) -> None:
    """HTTPS on loopback is tunnelled untouched (its certificate is its own), with one warning
    naming --intercept; with it (and the server's CA), the same server is re-timed."""
    where = f"127.0.0.1:{fake.port}"
    env = {**os.environ, "SSL_CERT_FILE": str(fake.ca_path)}  # the client trusts its server
    run = Run(tmp_path, fake)
    plain = run(sys.executable, "-c", STREAM_CHAT, fake.url, env=env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == TEXT.strip() and run.records() == []
    warned = [x.split("] ", 1)[-1] for x in plain.stderr.splitlines() if "(loopback)" in x]
    assert warned == [f"retimer: HTTPS to {where} (loopback) passes through untimed; to re-time a "
                      f"local model server there, add --intercept '{where}' and --set "
                      "ssl_verify_upstream_trusted_ca=ITS-CA.pem"]
    run.options += ["--intercept", where]  # Run gives the server's CA to retimer already
    paced = run(sys.executable, "-c", STREAM_CHAT, fake.url, env=env)
    assert paced.returncode == 0, paced.stderr
    assert paced.stdout.strip() == TEXT.strip() and "(loopback)" not in paced.stderr
    (record,) = run.records()
    assert record["url"].startswith(f"https://{where}/") and record["emitted"]["ttft_ms"] >= 298


def test_exit_codes_and_signals(tmp_path: Path, fake: FakeLLM) -> None:
    run = Run(tmp_path, fake)
    killed = run(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert killed.returncode == 128 + signal.SIGTERM, killed.stderr
    # SIGINT sent to retimer (not from a terminal) reaches the command; the proxy then stops
    script = "import time; print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen(run.argv(sys.executable, "-c", script), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 128 + signal.SIGINT  # Python re-raises an unhandled Ctrl-C
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", run.port), timeout=1).close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_signal_as_the_command_starts_ends_the_command(tmp_path: Path, fake: FakeLLM) -> None:
    """A SIGTERM that reaches retimer the moment its command starts (the command sends it
    itself, first thing) ends the command, and retimer exits 143: the forwarders are in place
    before the spawn. Installed after it, the signal killed retimer alone and the command ran
    on (a race a loaded machine loses): repeated to make it show (both moments of the race are
    also driven deterministically in-process, below)."""
    run = Run(tmp_path, fake)
    for i in range(2):
        pidfile, err = tmp_path / f"child{i}.pid", tmp_path / f"stderr{i}"
        script = f"echo $$ > {shlex.quote(str(pidfile))}; kill -TERM $PPID; exec sleep 30"
        with err.open("w") as errors:
            proc = subprocess.Popen(run.argv("sh", "-c", script), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=errors, cwd=tmp_path)
        try:
            code = proc.wait(60)
        finally:
            proc.kill()
            proc.wait()
        child = int(pidfile.read_text())
        orphan = _alive(child)
        if orphan:
            os.kill(child, signal.SIGKILL)
        assert (i, code, orphan) == (i, 128 + signal.SIGTERM, False), err.read_text()


@pytest.mark.parametrize("moment", ["before", "after"])
def test_run_child_forwards_a_signal_that_comes_while_it_spawns(
        monkeypatch: pytest.MonkeyPatch, moment: str) -> None:
    """run_child in this process, with a SIGTERM sent to it just before the command is spawned
    (kept, then delivered once it exists) or just after (before run_child goes on): either ends
    the command at once (143), and none falls through to the process's own handler."""
    from retimer.cli.launch import run as launch

    spawn = asyncio.create_subprocess_exec

    async def signalled_spawn(*args: str, **kwargs: Any) -> asyncio.subprocess.Process:
        if moment == "before":
            os.kill(os.getpid(), signal.SIGTERM)
        proc = await spawn(*args, **kwargs)
        if moment == "after":
            os.kill(os.getpid(), signal.SIGTERM)
        return proc

    stray: list[int] = []
    monkeypatch.setattr(launch.asyncio, "create_subprocess_exec", signalled_spawn)
    previous = signal.signal(signal.SIGTERM, lambda sig, _frame: stray.append(sig))
    try:
        start = time.monotonic()
        code = asyncio.run(launch.run_child(["sleep", "5"], dict(os.environ)))
        took = time.monotonic() - start
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (code, stray) == (128 + signal.SIGTERM, [])
    assert took < 4  # the signal ended it, not the end of its sleep


def test_reuses_a_running_retimer(tmp_path: Path, fake: FakeLLM) -> None:
    args = ("--intercept", r"^llm\.test:", "--set", f"scripts={HOSTMAP}", *PACED)
    with RetimerProxy(tmp_path / "p", *args, upstream_ca=fake.ca_path) as proxy:
        options = ["--listen-port", str(proxy.port), "--set", f"confdir={proxy.confdir}"]
        probe = "import os; print(os.environ['HTTPS_PROXY'])"
        result = run_cli("run", *options, "--", sys.executable, "-c", probe)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == proxy.url
        assert "using the retimer already on" in result.stderr
        # the same port with another CA: refused with one line, as the CA would not match
        wrong = run_cli("run", "--listen-port", str(proxy.port), "--set",
                        f"confdir={tmp_path / 'elsewhere'}", "--", "true")
        assert wrong.returncode == 2
        assert "uses another CA" in wrong.stderr and len(wrong.stderr.splitlines()) == 1


AUTH = "alice:p@ss/w rd%"  # characters that must be percent-encoded in a proxy URL


def test_run_with_proxy_auth_gives_the_command_the_credentials(tmp_path: Path, fake: FakeLLM) -> None:
    """`retimer run --proxy-auth`: the proxy demands credentials and the command gets them in
    its proxy variables (curl and httpx both authenticate with them); the terminal never
    shows the password."""
    run = Run(tmp_path, fake)
    run.options += ["--proxy-auth", AUTH]
    llm = fake.url_for("llm.test")
    data = json.dumps({"model": "gpt-test", "stream": True, "messages": []})
    script = (
        f"curl -sS -N --fail -H 'content-type: application/json' -d {shlex.quote(data)} "
        f"{llm}/v1/chat/completions > llm.out\n"
        # the same proxy without the credentials: refused with 407
        f"env -u HTTPS_PROXY -u https_proxy curl -sS -o /dev/null -w '%{{http_code}}' "
        f"--proxy http://127.0.0.1:{run.port} {llm}/v1/models > noauth.out 2>&1\n"
        f"{shlex.quote(sys.executable)} -c 'import os; print(os.environ[\"HTTPS_PROXY\"])' > env.out\n"
    )
    result = run("sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert "".join(_sse_pieces((tmp_path / "llm.out").read_text())) == TEXT
    _check_paced_record(run.records())
    assert "407" in (tmp_path / "noauth.out").read_text()
    assert (tmp_path / "env.out").read_text().strip() == (
        f"http://alice:p%40ss%2Fw%20rd%25@127.0.0.1:{run.port}")
    assert "p@ss" not in result.stderr and "p%40ss" not in result.stderr
    assert "p@ss" not in run.log.read_text() and "p%40ss" not in run.log.read_text()


def test_run_reuses_a_retimer_that_wants_credentials(tmp_path: Path, fake: FakeLLM) -> None:
    args = ("--intercept", r"^llm\.test:", "--set", f"scripts={HOSTMAP}", "--proxy-auth", AUTH, *PACED)
    with RetimerProxy(tmp_path / "p", *args, upstream_ca=fake.ca_path) as proxy:
        options = ["--listen-port", str(proxy.port), "--set", f"confdir={proxy.confdir}"]
        sdk = ("import sys, openai\n"
               "c = openai.OpenAI(base_url=sys.argv[1] + '/v1', api_key='sk-x')\n"
               "s = c.chat.completions.create(model='m', messages=[], stream=True)\n"
               "print(''.join(x.choices[0].delta.content or '' for x in s if x.choices), end='')")
        result = run_cli("run", *options, "--proxy-auth", AUTH, "--", sys.executable, "-c", sdk,
                         fake.url_for("llm.test"))
        assert result.returncode == 0, result.stderr
        assert "using the retimer already on" in result.stderr
        assert result.stdout == TEXT
        _check_paced_record(proxy.records())
        # without the credentials the probe gets 401 and cannot tell it is retimer: one line
        blind = run_cli("run", *options, "--", "true")
        assert blind.returncode == 2 and "not retimer" in blind.stderr
        for auth, needle in [("alice", "expected USER:PASS"), ("alice:a:b", "may not contain ':'"),
                             ("ldapbob:pw", "may not start with")]:
            wrong = run_cli("run", *options, "--proxy-auth", auth, "--", "true")
            assert wrong.returncode == 2 and needle in wrong.stderr, wrong.stderr
            assert len(wrong.stderr.splitlines()) == 1
    env = run_cli("env", "--listen-port", "18124", "--proxy-auth", AUTH,
                  "--set", f"confdir={tmp_path / 'c'}")
    assert "export HTTPS_PROXY=http://alice:p%40ss%2Fw%20rd%25@127.0.0.1:18124\n" in env.stdout


def test_run_errors_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:  # something that is not retimer holds the port
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        cases = [
            (["run"], "missing COMMAND", 2),
            (["run", "--profile", "groq"], "missing COMMAND", 2),
            (["run", "--", "no-such-command-xyz"], "command not found", 127),
            (["run", "--listen-port", port, "--", "true"], "not retimer", 2),
            (["run", "--tps", "fast", "--", "true"], "--tps", 2),
        ]
        for argv, needle, code in cases:
            result = run_cli(*argv)
            assert result.returncode == code, (argv, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("retimer: error:"), result.stderr
            assert needle in lines[0]


def test_env_output_parses_in_bash(tmp_path: Path) -> None:
    confdir = tmp_path / "conf dir's $HOME"  # quoting must survive spaces, quotes and $
    result = run_cli("env", "--listen-port", "18123", "--set", f"confdir={confdir}")
    assert result.returncode == 0, result.stderr
    assert all(x.startswith("export ") for x in result.stdout.splitlines())
    names = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
             "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
             "NODE_USE_ENV_PROXY"]
    dump = "; ".join(f'printf "%s\\n" "${n}"' for n in names)
    shown = subprocess.run(["bash", "-c", f"{result.stdout}\n{dump}"], capture_output=True,
                           text=True, check=True, env={"PATH": os.environ["PATH"]})
    values = dict(zip(names, shown.stdout.splitlines(), strict=True))
    bundle, ca = confdir / "retimer-ca-bundle.pem", confdir / "mitmproxy-ca-cert.pem"
    assert values["HTTPS_PROXY"] == values["http_proxy"] == "http://127.0.0.1:18123"
    # loopback goes through retimer (local model servers), all but retimer's own address
    assert values["NO_PROXY"] == values["no_proxy"] == "127.0.0.1:18123,localhost:18123"
    assert values["SSL_CERT_FILE"] == values["REQUESTS_CA_BUNDLE"] == values["CURL_CA_BUNDLE"]
    assert values["SSL_CERT_FILE"] == str(bundle)
    assert values["NODE_EXTRA_CA_CERTS"] == str(ca)
    assert values["NODE_USE_ENV_PROXY"] == "1"
    assert ca.read_text() in bundle.read_text()  # the bundle holds the CA ...
    assert bundle.read_text().count("BEGIN CERTIFICATE") > 10  # ... and the system roots
    assert "nothing listens on 127.0.0.1:18123" in result.stderr
    direct = run_cli("env", "--no-local", "--set", f"confdir={confdir}")
    assert f"export NO_PROXY={LOOPBACK}" in direct.stdout.replace("'", "")
    fish = run_cli("env", "--shell", "fish", "--set", f"confdir={confdir}")
    assert fish.stdout.splitlines()[0] == "set -gx HTTPS_PROXY 'http://127.0.0.1:8080'"


def _openssl_spki(cert: Path) -> str:
    """The SPKI hash computed by openssl, independently of retimer's code."""
    cmd = (f"openssl x509 -in {shlex.quote(str(cert))} -pubkey -noout | "
           "openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64")
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout.strip()


def test_ca_is_created_private_and_printed(tmp_path: Path) -> None:
    confdir = tmp_path / "newca"
    first = run_cli("ca", "--set", f"confdir={confdir}")
    assert first.returncode == 0, first.stderr
    fields = dict(line.split(None, 1) for line in first.stdout.splitlines() if "  " in line)
    cert = confdir / "mitmproxy-ca-cert.pem"
    assert fields["cert"] == str(cert)
    assert fields["spki"] == _openssl_spki(cert)
    assert "created a new CA" in first.stdout
    assert confdir.stat().st_mode & 0o777 == 0o700
    assert (confdir / "mitmproxy-ca.pem").stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE KEY" in (confdir / "mitmproxy-ca.pem").read_bytes()
    again = run_cli("ca", "--set", f"confdir={confdir}", "--spki")
    assert again.stdout.strip() == fields["spki"]  # the same CA: not created twice
    assert run_cli("ca", "--set", f"confdir={confdir}", "--path").stdout.strip() == str(cert)


def test_launch_env_units() -> None:
    from retimer.cli.launch.env import child_env, launch_env, proxy_url, shell_lines
    from retimer.cli.launch.run import split_command

    assert proxy_url("0.0.0.0", 8080) == "http://127.0.0.1:8080"
    assert proxy_url("::", 9) == "http://[::1]:9"
    assert proxy_url("::1", 9) == "http://[::1]:9"
    assert proxy_url("127.0.0.1", 9, "al ice:p@ss:w/rd%") == "http://al%20ice:p%40ss%3Aw%2Frd%25@127.0.0.1:9"
    env = launch_env("http://127.0.0.1:1", "/b.pem", "/ca.pem")
    assert env["https_proxy"] == env["HTTP_PROXY"] == "http://127.0.0.1:1"
    assert env["CURL_CA_BUNDLE"] == "/b.pem" and env["NODE_EXTRA_CA_CERTS"] == "/ca.pem"
    merged = child_env({"HTTPS_PROXY": "http://corp:3128", "HOME": "/h"}, env)
    assert merged["HTTPS_PROXY"] == "http://127.0.0.1:1" and merged["HOME"] == "/h"
    assert shell_lines({"A": "it's"}, "fish") == ["set -gx A 'it\\'s'"]
    assert shell_lines({"A": "it's"}, "powershell") == ["$env:A = 'it''s'"]
    assert split_command(["--profile", "groq", "--", "a", "--b"]) == (["--profile", "groq"], ["a", "--b"])
    assert split_command(["-q", "--tps=5", "--seed", "3", "python", "-c", "x"]) == (
        ["-q", "--tps=5", "--seed", "3"], ["python", "-c", "x"])
    assert split_command(["--profile", "groq"]) == (["--profile", "groq"], [])
    # options without a value, whatever the parser has, never swallow the command's name
    assert split_command(["--allow-remote", "--no-local", "ollama", "run"]) == (
        ["--allow-remote", "--no-local"], ["ollama", "run"])
    assert env["NO_PROXY"] == "127.0.0.1:1,localhost:1"
    assert launch_env("http://[::1]:7", "/b", "/c")["no_proxy"] == "[::1]:7"
    assert launch_env("http://127.0.0.1:1", "/b", "/c", local=False)["NO_PROXY"] == LOOPBACK


def test_run_records_a_session_and_replays_it_with_no_upstream_call(
    tmp_path: Path, fake: FakeLLM, other: FakeLLM
) -> None:
    """`retimer run --record DIR -- COMMAND`, then `retimer run --replay DIR -- COMMAND`: the
    second run's call is answered from the cassette, the same text, at the replay's profile."""
    cassette = tmp_path / "cassette"
    llm, other_url = fake.url_for("llm.test"), other.url_for("other.test")
    command = (sys.executable, str(CLIENTS / "openai_client.py"), llm, other_url, "0")
    (tmp_path / "rec").mkdir()
    (tmp_path / "play").mkdir()
    record = Run(tmp_path / "rec", fake)
    record.options += ["--record", str(cassette)]
    first = record(*command)
    assert first.returncode == 0, first.stderr
    fake.wait_done(1)
    asked = len(fake.requests)
    replay = Run(tmp_path / "play", fake)
    replay.options += ["--replay", str(cassette), "--tps", "15000", "--ttft", "50ms"]
    again = replay(*command)
    assert again.returncode == 0, again.stderr
    assert "".join(json.loads(again.stdout)["pieces"]) == "".join(json.loads(first.stdout)["pieces"]) == TEXT
    assert len(fake.requests) == asked  # the upstream was asked nothing
    (played,) = replay.records()
    assert played["cassette"]["match"] == "replayed" and played["target"]["tps"] == 15000.0
    assert played["emitted"]["tokens"] == record.records()[0]["emitted"]["tokens"]
