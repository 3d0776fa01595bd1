"""Two retimer processes (`--listen-port A`, `--listen-port B`, one shared confdir and so one CA)
behind Debian's HAProxy in TCP mode: forward-proxy clients (the openai SDK with HTTPS_PROXY set
to the balancer) and reverse-mode clients (base URL = the balancer) get re-timed, whole streams,
both instances serve, each writes its own log and `retimer report` / `retimer export` read both;
the TCP health check takes a stopped instance out, the HTTP one a stuck or draining one too;
with `--proxy-auth` the client's credentials pass through and the HTTP check sends them; two
instances starting at once on an empty confdir make one CA; a study participant's units are numbered once, in the design's order,
whichever instance serves (`retimer study --study-state`). See docs/deployment.md."""

from __future__ import annotations

import base64
import csv
import io
import json
import multiprocessing
import signal
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from retimer.proxy.study.files import load_study
from tests.support.balancer import HAProxy
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.stream_bodies import make_anthropic_stream, make_openai_stream
from tests.support.study import TEXT as STUDY_TEXT
from tests.support.study import StudyProxy, chat, write_study
from tests.support.upstream import FakeLLM

TEXT = "Two instances behind one balancer; each connection lands on one of them. " * 2
PACED = ("--ttft", "200ms", "--tps", "60", "--jitter", "0", "--profile", "gpt-5")
pytestmark = pytest.mark.fake_llm(openai=TEXT, bursts=3, tls=True)  # the forward-proxy tests' upstream


def _both(proxies: list[RetimerProxy]) -> list[RetimerProxy]:
    """Started at the same time, so on an empty confdir they race to make the CA."""
    with ThreadPoolExecutor(len(proxies)) as pool:
        return list(pool.map(lambda p: p.start(), proxies))


def _records(log: Path) -> list[dict]:
    raw = log.read_bytes() if log.exists() else b""
    return [json.loads(line) for line in raw.decode().split("\n")[:-1]]


def _wait_records(logs: list[Path], n: int, timeout: float = 15.0) -> None:
    """Until the logs hold `n` records between them (a record is written as its stream ends)."""
    deadline = time.monotonic() + timeout
    while sum(len(_records(log)) for log in logs) < n and time.monotonic() < deadline:
        time.sleep(0.05)


def _chat(client: openai.OpenAI, i: int) -> str:
    """One streamed chat completion's text (a new client: a new connection to the balancer)."""
    chunks = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": f"hi {i}"}], stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _retimed(record: dict) -> bool:
    return (record["outcome"] == "complete" and record["target"] == {"ttft_ms": 200.0, "tps": 60.0}
            and record["emitted"]["ttft_ms"] >= 200 - 2  # never early
            and record["emitted"]["tokens"] == record["upstream"]["tokens"] > 20)




def test_forward_proxy_clients_through_haproxy_are_retimed_by_both_instances(
    tmp_path: Path, fake: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "confdir"  # empty: both instances find no CA
    a, b = (RetimerProxy(tmp_path / name, *PACED, "--intercept", r"^127\.0\.0\.1:", "--quiet",
                         upstream_ca=fake.ca_path, confdir=shared) for name in "ab")
    _both([a, b])
    try:
        with HAProxy(tmp_path / "haproxy", {"a": a.port, "b": b.port}) as balancer:
            monkeypatch.setenv("HTTPS_PROXY", balancer.url)  # what a user's shell would set
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)

            def stream(i: int) -> str:
                return _chat(openai.OpenAI(  # the proxy from the environment; trusts the one shared CA
                    base_url=fake.url + "/v1", api_key="sk-balanced-secret",
                    http_client=openai.DefaultHttpxClient(verify=a.client_ssl_context())), i)

            with ThreadPoolExecutor(6) as pool:
                assert list(pool.map(stream, range(12))) == [TEXT] * 12
            _wait_records([a.log_path, b.log_path], 12)
            served_by_a = len(_records(a.log_path))
            # the health check: a stopped instance is taken out, the other serves everything
            b.stop()
            balancer.wait_status({"a": "UP", "b": "DOWN"})
            assert [stream(i) for i in range(12, 16)] == [TEXT] * 4
            _wait_records([a.log_path, b.log_path], 16)
    finally:
        a.stop()
        b.stop()
    from_a, from_b = _records(a.log_path), _records(b.log_path)
    assert from_a and from_b  # both instances served
    assert len(from_a) + len(from_b) == 16 and all(_retimed(r) for r in from_a + from_b)
    assert len({r["id"] for r in from_a + from_b}) == 16
    assert len(from_a) == served_by_a + 4  # the last four all went to a
    assert (shared / "retimer-ca-bundle.pem").read_text().endswith(a.ca_path.read_text())  # one CA
    for proxy in (a, b):
        assert "sk-balanced-secret" not in proxy.log_path.read_text() + proxy.stderr()
        assert "Traceback" not in proxy.stderr()
    # records: one log per instance, read together
    html = tmp_path / "report.html"
    done = run_cli("report", str(a.log_path), str(b.log_path), "-o", str(html))
    assert done.returncode == 0, done.stderr
    assert "16 streams" in done.stderr
    table = tmp_path / "streams.csv"
    done = run_cli("export", str(a.log_path), str(b.log_path), "--csv", str(table))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert sorted(r["stream_id"] for r in rows) == sorted(r["id"] for r in from_a + from_b)


def test_proxy_auth_through_haproxy_credentials_pass_and_the_http_check_sends_them(
    tmp_path: Path, fake: FakeLLM
) -> None:
    """Instances run with `--proxy-auth`: a TCP balancer passes the client's credentials (in its
    CONNECT) on as they came, so a client with them gets re-timed streams from both instances and
    one without them, or with a wrong password, gets 407 from whichever instance it reached.
    The HTTP check must send them too: `/health` without them is 407 like any request."""
    password = "pw-Bal-7731-never-logged"
    auth = f"alice:{password}"
    a, b = (RetimerProxy(tmp_path / name, *PACED, "--intercept", r"^127\.0\.0\.1:", "--quiet",
                         "--proxy-auth", auth, upstream_ca=fake.ca_path, confdir=tmp_path / "confdir")
            for name in "ab")
    _both([a, b])
    try:
        unchecked = httpx.get(f"{a.url}/health", headers={"host": "retimer"}, timeout=10)
        assert unchecked.status_code == 407
        with HAProxy(tmp_path / "haproxy", {"a": a.port, "b": b.port}, http_check=True,
                     check_auth=auth) as balancer:  # started: both seen UP by the check
            host = balancer.url.removeprefix("http://")

            def stream(i: int, credentials: str) -> str:
                client = openai.OpenAI(
                    base_url=fake.url + "/v1", api_key="sk-balanced-secret", max_retries=0,
                    http_client=openai.DefaultHttpxClient(proxy=f"http://{credentials}{host}",
                                                          verify=a.client_ssl_context()))
                return _chat(client, i)

            with ThreadPoolExecutor(4) as pool:
                assert list(pool.map(lambda i: stream(i, auth + "@"), range(8))) == [TEXT] * 8
            for credentials in ("", "alice:wrong@"):
                with pytest.raises(openai.APIConnectionError) as denied:
                    stream(99, credentials)
                assert "407" in repr(denied.value.__cause__)
            _wait_records([a.log_path, b.log_path], 8)
            assert balancer.status() == {"a": "UP", "b": "UP"}
    finally:
        a.stop()
        b.stop()
    from_a, from_b = _records(a.log_path), _records(b.log_path)
    assert from_a and from_b and len(from_a) + len(from_b) == 8  # both served; the denied are no streams
    assert all(_retimed(r) for r in from_a + from_b)
    assert len(fake.requests) == 8 and all("proxy-authorization" not in r.headers for r in fake.requests)
    basic = base64.b64encode(auth.encode()).decode()
    for proxy in (a, b):
        artefacts = proxy.log_path.read_text() + proxy.stdout() + proxy.stderr()
        assert password not in artefacts and basic not in artefacts
        assert "Traceback" not in proxy.stderr()


def _reverse_through_haproxy(tmp_path: Path, n: int, *extra: str, balance: str = "roundrobin"
                             ) -> tuple[list[RetimerProxy], list[dict], list[dict]]:
    """`n` streamed chats (6 at a time, a connection each) through HAProxy to two reverse-mode
    instances sharing a confdir: the instances and each one's records, every stream whole."""
    with FakeLLM(make_openai_stream(TEXT), bursts=3) as plain:
        a, b = (RetimerProxy(tmp_path / name, "--upstream", plain.url, *PACED, "--quiet", *extra,
                             confdir=tmp_path / "confdir") for name in "ab")
        _both([a, b])
        try:
            with HAProxy(tmp_path / "haproxy", {"a": a.port, "b": b.port}, balance=balance) as balancer:
                def stream(i: int) -> str:
                    return _chat(openai.OpenAI(base_url=balancer.url + "/v1", api_key="sk-reverse"), i)

                with ThreadPoolExecutor(6) as pool:
                    assert list(pool.map(stream, range(n))) == [TEXT] * n
                _wait_records([a.log_path, b.log_path], n)
        finally:
            a.stop()
            b.stop()
    return [a, b], _records(a.log_path), _records(b.log_path)


def test_instances_with_workers_behind_haproxy_retime_every_stream(tmp_path: Path) -> None:
    """Two `--workers 2` instances (four processes, one confdir) behind HAProxy in reverse mode,
    as docs/deployment.md sets it up (roundrobin): both instances serve, every stream re-timed,
    each record names its worker, and no (worker, stream) repeats. (Plain instances in reverse
    mode: every other reverse test; HAProxy in TCP mode only forwards connections, whatever its
    balance.)"""
    proxies, from_a, from_b = _reverse_through_haproxy(tmp_path, 16, "--workers", "2")
    assert from_a and from_b and len(from_a) + len(from_b) == 16
    assert all(_retimed(r) for r in from_a + from_b)
    for records in (from_a, from_b):
        assert {r["worker"] for r in records} <= {1, 2}
        assert len({(r["worker"], r["stream"]) for r in records}) == len(records)
    for proxy in proxies:
        assert "Traceback" not in proxy.stderr()


def _make_ca_counting(confdir: str, start: multiprocessing.synchronize.Barrier,
                      out: multiprocessing.Queue) -> None:
    """ensure_ca in a process started with the others; says "made" for each CA it creates,
    then the fingerprint of the CA it would serve with."""
    from mitmproxy.certs import CertStore

    from retimer.proxy.certs import ensure_ca

    create = CertStore.create_store

    def counted(*args: object, **kw: object) -> None:
        out.put("made")
        create(*args, **kw)  # type: ignore[arg-type]

    CertStore.create_store = staticmethod(counted)  # type: ignore[method-assign, assignment]
    start.wait()
    ensure_ca(Path(confdir))
    out.put(CertStore.from_store(Path(confdir), "mitmproxy", 2048).default_ca.fingerprint().hex())


def test_instances_starting_at_once_on_an_empty_confdir_make_one_ca(tmp_path: Path) -> None:
    """mitmproxy checks for its CA file and then writes four files, with no lock: without
    retimer's lock in ensure_ca, processes starting together each made (and served) their own."""
    import mitmproxy.certs  # noqa: F401  (imported once, before the fork: the processes start together)

    n = 4
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(n), context.Queue()
    procs = [context.Process(target=_make_ca_counting, args=(str(tmp_path / "c"), start, out))
             for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * n
    from mitmproxy.certs import Cert

    said = []
    while not out.empty() or len(said) < n:
        said.append(out.get(timeout=5))
    assert said.count("made") == 1  # one process made the CA; the others waited and read it
    on_disk = Cert.from_pem((tmp_path / "c" / "mitmproxy-ca-cert.pem").read_bytes()).fingerprint().hex()
    assert {x for x in said if x != "made"} == {on_disk}  # one CA, the one clients trust


def test_a_study_participant_gets_the_same_units_whichever_instance_serves(tmp_path: Path) -> None:
    study = write_study(tmp_path, ratings=True)
    design, profiles = load_study(str(study))
    state = tmp_path / "P3-state.sqlite"
    n = 12
    with FakeLLM(make_openai_stream(STUDY_TEXT), make_anthropic_stream(STUDY_TEXT), bursts=2) as fake:
        a, b = (StudyProxy(tmp_path / name, study, "P3", "--study-state", str(state), "--quiet")
                for name in "ab")
        for proxy in (a, b):
            proxy.confdir = tmp_path / "confdir"
            proxy.args[proxy.args.index(f"confdir={proxy.tmp / 'confdir'}")] = f"confdir={proxy.confdir}"
        _both([a, b])
        try:
            with HAProxy(tmp_path / "haproxy", {"a": a.port, "b": b.port}) as balancer:
                for i in range(n):  # one connection each: round robin alternates the instances
                    assert chat(balancer.url, fake, f"question {i}").status_code == 200
                _wait_records([a.log_path, b.log_path], n)
        finally:
            a.stop()
            b.stop()
    from_a, from_b = _records(a.log_path), _records(b.log_path)
    assert from_a and from_b  # both instances served the participant
    records = sorted(from_a + from_b, key=lambda r: r["time"])
    assert [r["unit"] for r in records] == list(range(n))  # each position once, in request order
    for r in records:  # the counterbalanced order one instance gives
        assert r["condition"] == design.condition("P3", r["unit"]).name
        assert r["target"]["ttft_ms"] == pytest.approx(profiles[r["condition"]].ttft.p50 * 1000)
    assert a.proc.returncode == 0 and b.proc.returncode == 0
    with sqlite3.connect(state) as db:  # kept: neither instance deleted it under the other
        assert db.execute("SELECT value FROM study_counters WHERE participant = 'P3' AND "
                          "name = 'requests'").fetchone() == (n,)


def test_a_bad_study_state_path_is_one_line(tmp_path: Path) -> None:
    study = write_study(tmp_path)
    done = run_cli("study", str(study), "--participant", "P1",
                   "--study-state", str(tmp_path / "absent" / "state.sqlite"))
    assert done.returncode == 2
    assert done.stderr.strip().startswith("retimer: error: --study-state: cannot open ")
    assert "Traceback" not in done.stderr


def test_workers_of_one_instance_use_and_keep_the_given_study_state(tmp_path: Path) -> None:
    """`--workers 2 --study-state PATH`: the workers count in that file, not one of their own,
    and the parent leaves it in place at exit (other instances may still be using it)."""
    study = write_study(tmp_path)
    state = tmp_path / "P2-state.sqlite"
    with FakeLLM(make_openai_stream(STUDY_TEXT), bursts=2) as fake:
        proxy = StudyProxy(tmp_path / "p", study, "P2", "--workers", "2", "--study-state", str(state))
        proxy.start()
        try:
            deadline = time.monotonic() + 30
            while "retimer listening on" not in proxy.stdout() and time.monotonic() < deadline:
                time.sleep(0.05)
            for i in range(6):
                assert chat(proxy.url, fake, f"question {i}").status_code == 200
            records = proxy.records(6)
        finally:
            proxy.stop()
    assert proxy.proc.returncode == 0
    assert sorted(r["unit"] for r in records) == list(range(6))
    assert not list(proxy.confdir.glob("study-state-*"))  # no file of the run's own
    with sqlite3.connect(state) as db:
        assert db.execute("SELECT value FROM study_counters WHERE participant = 'P2' AND "
                          "name = 'requests'").fetchone() == (6,)


def test_the_health_endpoint_answers_from_the_proxy_and_haproxy_checks_it(tmp_path: Path) -> None:
    """`GET http://retimer/health`: 200 from the proxy's own loop (through the proxy, or sent to
    it directly as a balancer does), no record. HAProxy's HTTP check on it marks a stopped
    (SIGSTOP) instance DOWN, which a TCP check cannot see: the kernel still accepts."""
    a, b = (RetimerProxy(tmp_path / name, "--quiet", confdir=tmp_path / "confdir") for name in "ab")
    _both([a, b])
    try:
        with httpx.Client(proxy=a.url, timeout=10) as through:
            answer = through.get("http://retimer/health")
        assert (answer.status_code, answer.json()) == (200, {"status": "ok"})
        for host in ("retimer", f"127.0.0.1:{a.port}"):  # origin form, as a balancer sends it
            direct = httpx.get(f"{a.url}/health", headers={"host": host}, timeout=10)
            assert (direct.status_code, direct.json()) == (200, {"status": "ok"})
        assert httpx.get(f"{a.url}/elsewhere", headers={"host": "retimer"}, timeout=10).status_code != 200
        with HAProxy(tmp_path / "http", {"a": a.port, "b": b.port}, http_check=True) as http_checked, \
                HAProxy(tmp_path / "tcp", {"a": a.port, "b": b.port}) as tcp_checked:
            assert b.proc is not None
            b.proc.send_signal(signal.SIGSTOP)  # b's loop stops; its port still accepts
            try:
                http_checked.wait_status({"a": "UP", "b": "DOWN"})
                assert tcp_checked.status() == {"a": "UP", "b": "UP"}  # what a TCP check misses
            finally:
                b.proc.send_signal(signal.SIGCONT)
            http_checked.wait_status({"a": "UP", "b": "UP"})
    finally:
        a.stop()
        b.stop()
    assert _records(a.log_path) == [] and _records(b.log_path) == []  # checks are not streams


def test_a_draining_instance_answers_503_and_the_http_check_takes_it_out(tmp_path: Path) -> None:
    """On SIGTERM an instance drains its streams for up to `retimer_shutdown_grace`: meanwhile
    `GET /health` answers 503 `draining`, HAProxy's HTTP check marks it DOWN (the other stays UP),
    and the stream in flight still ends whole, with its record."""
    words = " ".join(f"w{i}" for i in range(40))
    body = make_openai_stream(words, words_per_chunk=1)
    grace = ("--set", "retimer_shutdown_grace=30s")
    with FakeLLM(body, per_event_gap=0.15) as fake:  # about 6 s of upstream
        a, b = (RetimerProxy(tmp_path / n, "--quiet", *PACED, *grace, confdir=tmp_path / "confdir")
                for n in "ab")
        _both([a, b])
        try:
            with HAProxy(tmp_path / "http", {"a": a.port, "b": b.port}, http_check=True) as checked:
                checked.wait_status({"a": "UP", "b": "UP"})
                with ThreadPoolExecutor(1) as pool, httpx.Client(proxy=b.url, timeout=30) as c:
                    with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                        stream = r.iter_raw()
                        first = next(stream)
                        assert b.proc is not None
                        b.proc.send_signal(signal.SIGTERM)
                        rest = pool.submit(lambda: b"".join(stream))
                        time.sleep(0.3)
                        health = httpx.get(f"{b.url}/health", headers={"host": "retimer"}, timeout=5)
                        assert (health.status_code, health.json()) == (503, {"status": "draining"})
                        checked.wait_status({"a": "UP", "b": "DOWN"})
                        assert not rest.done()  # taken out while its stream still plays
                        got = first + rest.result(timeout=30)
                assert b.proc.wait(timeout=30) == 0
        finally:
            a.stop()
            b.stop()
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                   for line in got.decode().splitlines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])
    assert text == words
    (record,) = _records(b.log_path)
    assert record["outcome"] == "complete"
