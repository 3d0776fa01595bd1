"""The bridge's direct timers (retimer.proxy.bridge_timers), in the real proxy with real
clients: after a stream's first wakeup names its connection handler, its wakeups are loop timers
delivered through mitmproxy's layers (HTTP/1, and h2 inside an HTTP proxy's CONNECT tunnel, where
two HTTP layers route them), the bytes arrive intact and in time order, and nothing is kept."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.inproc_proxy import InProcessProxy
from tests.stream_bodies import make_openai_stream
from tests.upstream import FakeLLM

WORDS = " ".join(f"w{i}" for i in range(120))
PACED = ("--profile", "human-reading", "--ttft", "50ms", "--tps", "400", "--jitter", "0")
TLS_PROXY = ("--intercept", r"^127\.0\.0\.1:", "--set", "connection_strategy=lazy")


class H2Only(ssl.SSLContext):
    def set_alpn_protocols(self, protocols: Any) -> None:
        super().set_alpn_protocols(["h2"])


def sse_text(raw: bytes) -> str:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices") or []:
                out.append((choice.get("delta") or {}).get("content") or "")
    return "".join(out)


@pytest.mark.parametrize("client", ["http1", "h2-in-connect"])
def test_paced_wakeups_are_loop_timers_after_the_first(tmp_path: Path, client: str) -> None:
    h2 = client == "h2-in-connect"
    body = make_openai_stream(WORDS, words_per_chunk=4)
    with FakeLLM(body, bursts=1, tls=h2) as fake:
        extra = (*TLS_PROXY, "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}") if h2 else ()
        with InProcessProxy(tmp_path, *PACED, *extra) as proxy:
            timers = proxy.addon.bridge.timers
            before = proxy.call(lambda: (timers.direct, timers.via_mitmproxy))
            if h2:
                ctx = H2Only(ssl.PROTOCOL_TLS_CLIENT)
                ctx.load_verify_locations(proxy.confdir / "mitmproxy-ca-cert.pem")
                http = httpx.Client(proxy=proxy.url, verify=ctx, http2=True)
            else:
                http = httpx.Client(proxy=proxy.url)
            with http, http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                assert r.http_version == ("HTTP/2" if h2 else "HTTP/1.1")
                got = b"".join(r.iter_raw())
            (record,) = proxy.records(1, timeout=5)
            direct, via = proxy.call(lambda: (timers.direct, timers.via_mitmproxy))
    assert sse_text(got) == WORDS  # every token, in order, through the layers
    assert record["outcome"] == "complete"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 100
    # one token per network event: >100 wakeups, all but the first few from loop timers
    assert direct - before[0] > 100
    assert via - before[1] <= 2
