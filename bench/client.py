"""The measuring client: a separate process that timestamps every read of a streamed response.

Run by `bench/harness.py` as `python -m bench.client` from the checkout; it reads one JSON job per line on stdin
and writes one JSON result per line on stdout. Every timestamp is `time.monotonic()`
(CLOCK_MONOTONIC, shared by every process on the machine), so the orchestrator can compare
them with the upstream's write times and the proxy's records.

Jobs:
  {"op": "streams", "proxy": URL|null, "streams": [SPEC...], "concurrent": bool, "raw": bool}
      SPEC = {"url", "body" (str), "headers" {..}, "warmup" URL|null, "delay" s (concurrent)}
      -> {"streams": [{"t_call", "t_sent", "w_sent" (wall clock), "t_head", "status",
                       "reads": [[t, nbytes]...], "events": [[t, tokens]...]}]}
  {"op": "gets", "proxy": URL|null, "url": URL, "n": int}
      -> {"latency_s": [...]}
  {"op": "quit"}
Sequential streams and GETs reuse one keep-alive connection per proxy across jobs.

With "raw" (concurrent only, plain-http upstreams), the streams run on raw sockets
(bench.rawclient) instead of httpx, on uvloop's event loop where it is installed (libuv reads
cost the client a fifth less CPU than asyncio's selector loop, BENCHMARKS.md "Scaling"): the
same results for far less of the client's CPU.

Only the read loop runs while a stream is being timed: SSE parsing and token counting happen
after the response ends, and the garbage collector is off during a stream, so the client's own
pauses do not show up as proxy lateness. Concurrent streams run on one asyncio thread.
"""

from __future__ import annotations

import asyncio
import gc
import json
import ssl
import sys
import time
from typing import Any

import httpx

from bench import rawclient
from retimer.wire.tokenizer import split_tokens

monotonic = time.monotonic
TIMEOUT = httpx.Timeout(120.0)
try:  # the cheapest event loop for the raw client, where it is installed
    from uvloop import run as raw_loop_run
except ImportError:  # pragma: no cover - uvloop is in the test extra
    raw_loop_run = asyncio.run
RAW_LOOP = "uvloop" if raw_loop_run is not asyncio.run else "asyncio"


def event_text(data: bytes) -> str:
    """The token-bearing text of one SSE event (OpenAI Chat or Anthropic Messages), else ""."""
    text = []
    for line in data.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if not payload.startswith(b"{"):
            continue
        obj = json.loads(payload)
        if obj.get("type") == "content_block_delta":  # Anthropic
            delta = obj.get("delta", {})
            text.append(delta.get("text") or delta.get("thinking")
                        or delta.get("partial_json") or "")
        for choice in obj.get("choices") or ():  # OpenAI Chat
            delta = choice.get("delta") or {}
            text.append((delta.get("reasoning_content") or "") + (delta.get("content") or ""))
    return "".join(text)


def adapter_events(chunks: list[tuple[float, bytes]], shape: dict[str, str]
                   ) -> tuple[list[tuple[float, int]], dict[str, str], int]:
    """(arrival, tokens) per token-bearing event of any format, parsed with retimer's adapter
    for the request `shape`; also the text per channel and the most tokens in one event."""
    from retimer.wire.protocols import fallback_adapter, find_adapter
    from retimer.wire.protocols.base import RequestShape

    request = RequestShape(shape["method"], shape["host"], shape["path"], {}, b"{}")
    cls = find_adapter(request, shape["ctype"])
    adapter = cls() if cls is not None else fallback_adapter(shape["ctype"])
    assert adapter is not None, shape
    out: list[tuple[float, int]] = []
    texts: dict[str, str] = {}
    most = 0
    for t, chunk in [*chunks, (chunks[-1][0] if chunks else 0.0, None)]:
        for event in adapter.feed(chunk) if chunk is not None else adapter.end():
            n = 0
            for channel, text in event.texts:
                texts[channel] = texts.get(channel, "") + text
                n += len(split_tokens(text))
            if n:
                out.append((t, n))
                most = max(most, n)
    return out, texts, most


def token_events(chunks: list[tuple[float, bytes]]) -> list[tuple[float, int]]:
    """(arrival time, token count) per token-bearing SSE event; the time is that of the read
    that completed the event. Tokens are counted with retimer's own splitter."""
    out: list[tuple[float, int]] = []
    buf = b""
    for t, chunk in chunks:
        buf += chunk.replace(b"\r\n", b"\n")
        while (end := buf.find(b"\n\n")) >= 0:
            event, buf = buf[:end], buf[end + 2 :]
            text = event_text(event)
            if text:
                out.append((t, len(split_tokens(text))))
    return out


SEND_STARTED = "http11.send_request_headers.started"


def _result(t_call: float, w_call: float, sent: list[float], t_head: float, status: int,
            chunks: list[tuple[float, bytes]], shape: dict[str, str] | None = None
            ) -> dict[str, Any]:
    t_sent = sent[0] if sent else t_call
    if shape is not None:  # any wire format: count with the format's adapter
        events, texts, most = adapter_events(chunks, shape)
        return {"t_call": t_call, "t_sent": t_sent, "t_head": t_head, "status": status,
                "reads": [(t, len(c)) for t, c in chunks], "events": events,
                "texts": texts, "max_event_tokens": most}
    return {
        "t_call": t_call,
        "t_sent": t_sent,
        "w_sent": w_call + (t_sent - t_call),  # the same instant on the wall clock
        "t_head": t_head,
        "status": status,
        "reads": [(t, len(c)) for t, c in chunks],
        "events": token_events(chunks),
    }


def one_stream(client: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    """POST one streaming request; timestamp each raw read (GC off meanwhile).

    Time zero (`t_sent`) is when httpcore starts writing the request headers to the socket
    (its trace hook), so httpx's own request-building time is not counted as proxy delay.
    """
    chunks: list[tuple[float, bytes]] = []
    append = chunks.append
    sent: list[float] = []

    def trace(name: str, info: dict[str, Any]) -> None:
        if name == SEND_STARTED:
            sent.append(monotonic())

    gc.disable()
    try:
        w_call, t_call = time.time(), monotonic()
        with client.stream("POST", spec["url"], content=spec["body"].encode(),
                           headers=spec["headers"], extensions={"trace": trace}) as r:
            t_head = monotonic()
            for chunk in r.iter_raw():
                append((monotonic(), chunk))
    finally:
        gc.enable()
    return _result(t_call, w_call, sent, t_head, r.status_code, chunks, spec.get("shape"))


async def one_stream_async(client: httpx.AsyncClient, spec: dict[str, Any]) -> dict[str, Any]:
    """`one_stream` on the event loop, after the spec's `delay` (seconds)."""
    await asyncio.sleep(spec.get("delay", 0.0))
    chunks: list[tuple[float, bytes]] = []
    append = chunks.append
    sent: list[float] = []

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == SEND_STARTED:
            sent.append(monotonic())

    w_call, t_call = time.time(), monotonic()
    async with client.stream("POST", spec["url"], content=spec["body"].encode(),
                             headers=spec["headers"], extensions={"trace": trace}) as r:
        t_head = monotonic()
        async for chunk in r.aiter_raw():
            append((monotonic(), chunk))
    return _result(t_call, w_call, sent, t_head, r.status_code, chunks)


_clients: dict[str | None, httpx.Client] = {}
_ssl: list[ssl.SSLContext] = []


def shared_ssl() -> ssl.SSLContext:
    """One TLS context for every client: httpx builds (and loads the CA bundle into) a new one
    per client otherwise, ~50 ms each, which for 200 concurrent clients is 10 s of set-up."""
    if not _ssl:
        _ssl.append(ssl.create_default_context())
    return _ssl[0]


def cached_client(proxy: str | None) -> httpx.Client:
    """One keep-alive client per proxy, reused across jobs (no connection set-up per stream)."""
    if proxy not in _clients:
        _clients[proxy] = httpx.Client(proxy=proxy, timeout=TIMEOUT)
    return _clients[proxy]


def run_streams(job: dict[str, Any]) -> dict[str, Any]:
    """Sequential streams on the proxy's keep-alive client, or all at once (`concurrent`)."""
    specs: list[dict[str, Any]] = job["streams"]
    if job.get("concurrent"):
        gc.disable()
        try:
            if job.get("raw"):
                return {"streams": raw_loop_run(_concurrent_raw(job["proxy"], specs))}
            return {"streams": asyncio.run(_concurrent(job["proxy"], specs))}
        finally:
            gc.enable()
    client = cached_client(job["proxy"])
    results = []
    for spec in specs:
        if spec.get("warmup"):
            client.get(spec["warmup"]).raise_for_status()
        results.append(one_stream(client, spec))
        gc.collect()
    return {"streams": results}


async def _concurrent(proxy: str | None, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every stream on its own connection, all in this one thread: an asyncio client, because
    N client threads woken together would outnumber the proxy's one thread for the CPU."""
    clients = [httpx.AsyncClient(proxy=proxy, timeout=TIMEOUT, verify=shared_ssl())
               for _ in specs]
    try:
        await asyncio.gather(*(c.get(s["warmup"]) for c, s in zip(clients, specs, strict=True)
                               if s.get("warmup")))
        return list(await asyncio.gather(*(one_stream_async(c, s)
                                           for c, s in zip(clients, specs, strict=True))))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def _concurrent_raw(proxy: str | None, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`_concurrent` on raw sockets (bench.rawclient): the same results for a fraction of the
    client's CPU, for runs where the client shares the proxy's cores."""
    for spec in specs:
        rawclient.check_spec(spec)
    done = await rawclient.run_concurrent(proxy, specs, TIMEOUT.read or 120.0)
    return [_result(t_call, w_call, [t_sent], t_head, status, chunks)
            for t_call, w_call, t_sent, t_head, status, chunks in done]


def run_gets(job: dict[str, Any]) -> dict[str, Any]:
    """n GETs on the proxy's keep-alive client; round-trip seconds of each."""
    out = []
    client = cached_client(job["proxy"])
    for _ in range(job["n"]):
        t0 = monotonic()
        r = client.get(job["url"])
        out.append(monotonic() - t0)
        r.raise_for_status()
    return {"latency_s": out}


def main() -> None:
    gc.freeze()  # imports are long-lived: keep them out of every later collection
    for line in sys.stdin:
        job = json.loads(line)
        op = job.get("op")
        if op == "quit":
            break
        try:
            result = run_streams(job) if op == "streams" else run_gets(job)
        except Exception as e:  # report, keep serving
            result = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
