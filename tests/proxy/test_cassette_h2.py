"""The cassettes' HTTP/2 replay server (retimer.proxy.cassette_h2) on its own, with a real
HTTP/2 client (httpx): a body larger than HTTP/2's flow-control windows arrives whole, the
flow is put back as the client sent it when the server reads it, a request it does not
expect gets a 404. (gRPC through it, trailers included: tests/e2e/test_rpc_proxy_grpc.py.)"""

from __future__ import annotations

import asyncio
import random

import httpx
from mitmproxy.test import tflow

from retimer.cache.entry import CacheEntry
from retimer.proxy.cassette_h2 import H2ReplayServer
from retimer.proxy.loopback import REPLAY_HEADER

BODY = random.Random(3).randbytes(300_000)  # over the 64 KiB windows, several times


def test_a_large_body_arrives_whole_and_the_flow_is_put_back() -> None:
    async def run() -> tuple[httpx.Response, httpx.Response, tuple[bytes, str, int], bool]:
        server = H2ReplayServer()
        await server.start()
        flow = tflow.tflow()
        flow.request.scheme, flow.request.host, flow.request.port = "https", "llm.example", 443
        entry = CacheEntry(200, [("content-type", "application/grpc")], BODY)
        server.serve(flow, entry, [("grpc-status", "0")])
        token = flow.request.headers[REPLAY_HEADER]
        pointed = flow.request.data.scheme == b"https" and flow.request.port == server.port
        try:
            async with httpx.AsyncClient(http2=True, verify=False, timeout=10) as client:
                url = f"https://127.0.0.1:{server.port}/rt.Chat/Stream"
                hit = await client.post(url, headers={REPLAY_HEADER: token}, content=b"\0" * 5)
                miss = await client.post(url, headers={REPLAY_HEADER: "unknown"}, content=b"")
        finally:
            server.stop()
        data = flow.request.data
        return hit, miss, (data.scheme, data.host, data.port), pointed

    hit, miss, target, pointed = asyncio.run(run())
    assert pointed  # served from here: https to the server's port
    assert hit.http_version == "HTTP/2" and hit.status_code == 200
    assert hit.content == BODY
    assert target == (b"https", "llm.example", 443)  # the request as the client sent it
    assert miss.status_code == 404
