"""What retimer reads from a mitmproxy flow: where it goes, its prompt, and the record of its stream
(and how a re-timed response is framed).

A record (retimer.records.schema.StreamRecord) holds the URL (secret-looking query values
redacted), the protocol, the profile and timing figures: never request headers, cookies,
bodies or authorization values.
"""

from __future__ import annotations

import time
import weakref
from datetime import UTC, datetime
from typing import Any

from mitmproxy import http
from mitmproxy.proxy.mode_specs import ReverseMode

from retimer.profile.model import Profile
from retimer.proxy.hooks import (
    ARRIVED_KEY,
    CACHE_KEY,
    CASSETTE_KEY,
    CASSETTE_TURNS_KEY,
    PROMPT_KEY,
    RECORD_KEY,
    STREAM_KEY,
    WORKER_KEY,
)
from retimer.records.parse import demo_tags, other_fields, study_tags
from retimer.records.redact import redact_url
from retimer.records.schema import Model, Side, StreamRecord, Target
from retimer.timing.pacer import StreamPacer
from retimer.wire.hosts import is_llm_host
from retimer.wire.prompt import PromptInfo, estimate_prompt
from retimer.wire.protocols.websocket import is_llm_websocket_path
from retimer.wire.request import RequestBody

_bodies: weakref.WeakKeyDictionary[http.HTTPFlow, RequestBody] = weakref.WeakKeyDictionary()


def request_body(flow: http.HTTPFlow) -> RequestBody:
    """The request's decoded body, wrapped once per flow, so the study, the cache key, the
    adapter lookup and the prompt estimate share one JSON parse of it (a new one only when an
    addon changed the body in between)."""
    raw = flow.request.get_content(strict=False) or b""
    body = _bodies.get(flow)
    if body is None or body.raw != raw:
        body = RequestBody(raw, flow.request.headers.get("content-type", ""))
        _bodies[flow] = body
    return body


def destination_host(flow: http.HTTPFlow) -> str:
    """The host the flow goes to. In reverse mode that is the --upstream host, whatever Host
    header the client sent (kept as is with keep_host_header); elsewhere the Host header wins,
    as transparent mode only knows the IP address."""
    if isinstance(flow.client_conn.proxy_mode, ReverseMode):
        return flow.request.host
    return flow.request.pretty_host


def to_llm_api(flow: http.HTTPFlow) -> bool:
    """Whether the flow goes to an LLM API: a known LLM host, or reverse mode's upstream, which
    is one by definition (a local model server on loopback too)."""
    return isinstance(flow.client_conn.proxy_mode, ReverseMode) or is_llm_host(destination_host(flow))


def is_llm_websocket(flow: http.HTTPFlow) -> bool:
    """Whether the flow's WebSocket is an LLM API's: to an LLM API, or on a path only LLM
    APIs use (`retimer.wire.protocols.websocket.is_llm_websocket_path`)."""
    return to_llm_api(flow) or is_llm_websocket_path(flow.request.path)


def destination_url(flow: http.HTTPFlow) -> str:
    if isinstance(flow.client_conn.proxy_mode, ReverseMode):
        return flow.request.url
    return flow.request.pretty_url


def request_start(flow: http.HTTPFlow) -> float:
    """When the request began (epoch seconds): when mitmproxy read its first bytes, or, when
    the kernel says they arrived earlier (retimer.proxy.patches.arrival: they waited for a
    busy event loop), then. TTFT and the record's time count from here."""
    arrived = flow.metadata.get(ARRIVED_KEY)
    started = flow.request.timestamp_start
    return min(started, arrived) if isinstance(arrived, float) else started


def _started(flow: http.HTTPFlow, pacer: StreamPacer) -> float:
    """When the stream began (epoch seconds): its request, or for a WebSocket turn the client
    message that opened it (every turn of a socket shares the handshake's request)."""
    if flow.websocket is None:
        return request_start(flow)
    return time.time() - (time.monotonic() - pacer.stats.start)


def _passthrough_model(flow: http.HTTPFlow) -> dict[str, Any]:
    """What a passthrough stream's record says of its request: the prompt's estimated size and
    the tokens a usual provider's prompt cache would hold (so `retimer whatif` can time a
    session recorded at the upstream's own speed)."""
    known = flow.metadata.get(PROMPT_KEY)
    if not isinstance(known, tuple):
        return {}
    return {"prompt_tokens": known[0], "cached_tokens": known[1]}


def _cassette_match(flow: http.HTTPFlow, turn: int | None) -> Any:
    """A replayed call's match: the flow's, or a WebSocket turn's own."""
    if turn is None:
        return flow.metadata.get(CASSETTE_KEY)
    return flow.metadata.get(CASSETTE_TURNS_KEY, {}).get(turn)


def stream_record(
    flow: http.HTTPFlow, pacer: StreamPacer, profile: Profile, seed: int, end: float,
    outcome: str, index: int | None = None, turn: int | None = None,
) -> StreamRecord:
    """The record of one finished (or, for the live view, running) stream. A WebSocket `turn`
    is a call of its own: its id is the connection's (the flow's) with the turn's number."""
    meta = flow.metadata.get(STREAM_KEY, {})
    timing = pacer.stats.record(end)
    emitted_ms = timing["emitted"]["duration_ms"] or 0.0
    wait_ms = pacer.scheduler.bound_s * 1000
    model = pacer.timing.summary() if hasattr(pacer.timing, "summary") else _passthrough_model(flow)
    tags = flow.metadata.get(RECORD_KEY, {})
    return StreamRecord(
        id=flow.id if turn is None else f"{flow.id}.{turn}",
        connection=None if turn is None else flow.id,
        turn=turn,
        time=datetime.fromtimestamp(_started(flow, pacer), UTC).isoformat(),
        url=redact_url(destination_url(flow)),
        protocol=meta.get("protocol"),
        profile=profile.name,
        effective_profile=profile.effective_name,  # name plus overrides: what ran
        seed=seed,
        stream=index if index is not None else meta.get("index"),
        status=flow.response.status_code if flow.response else None,
        outcome=outcome,
        target=Target(None if pacer.passthrough else round(pacer.timing.ttft * 1000, 3),
                      None if profile.passthrough else profile.tps),
        # what shaped this stream's draw: speed, prompt/prefill, cache, hidden reasoning, stalls
        model=Model(speed=profile.speed, thinking=profile.thinking,
                    drawn="ttft_draw_ms" in model, **model),
        upstream=Side(**timing["upstream"]),
        emitted=Side(**timing["emitted"]),
        lateness_ms=timing["lateness_ms"],
        token_counter=timing["token_counter"],
        trace=timing["trace"],
        upstream_bound=(not profile.passthrough)
        and (pacer.scheduler.ttft_bound or wait_ms > max(5.0, 0.02 * emitted_ms)),
        upstream_wait_ms=round(wait_ms, 3),
        strategy=str(pacer.strategy),
        smooth_delay_ms=round(pacer.smooth.delay_s * 1000, 3) if pacer.smooth else None,
        fallback=pacer.fallback,
        keepalives=pacer.keepalives,
        released_early=pacer.released_early,
        study=study_tags(tags),
        worker=tags.get(WORKER_KEY),
        demo=demo_tags(tags),
        extra=other_fields(tags),
        cache=flow.metadata.get(CACHE_KEY),  # hit | miss | stored (cache_addon)
        cassette=_cassette_match(flow, turn),  # a replayed call's match (cassette_addon)
    )


def prompt_scope(flow: http.HTTPFlow) -> str:
    """What separates prompt caches: the host and the path's model part."""
    return destination_host(flow) + flow.request.path.split("?", 1)[0].split(":", 1)[0]


def prompt_of(flow: http.HTTPFlow) -> PromptInfo:
    """The request's prompt estimate."""
    return estimate_prompt(request_body(flow), scope=prompt_scope(flow))


def reframe(response: http.Response, request_version: str) -> None:
    """A re-timed body is sent decoded, and split events change its length: frame it by
    chunks (an HTTP/1.1 client), by frames (h2), or, where HTTP/1.0 is spoken, by closing."""
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]
    if "content-length" in response.headers:
        del response.headers["content-length"]
        if request_version == "HTTP/1.1" and response.http_version != "HTTP/1.0":
            response.headers["transfer-encoding"] = "chunked"
