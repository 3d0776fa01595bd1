"""The response cache addon (`--set retimer_cache=DIR`): store paced streams, replay hits.

A paced stream that completed with status 200 is stored (its decoded upstream body, captured
by the pacer), unless it carried the API's error (a transient overload must not become the
permanent answer) or passed anything on unparsed. A later identical request
(`retimer.cache.entry.cache_key`) never reaches the upstream: in the `request` hook the flow
is pointed at a small replay server on loopback, which writes the cached response at once,
and the Retimer addon paces it like any upstream stream, with the profile's timing from the
moment the request reached the proxy.

Why a replay server rather than `flow.response = ...`: a response set in the `request` hook
is sent whole, so the pacing bridge never sees it as a stream. Through the replay server the
hit is a real streamed response, paced by the same code as a miss.

The flow keeps its identity: the replay server, on reading the request, puts the original
scheme, host and port back and drops its token header before answering, so the Retimer addon,
records and mitmweb see the request as the client sent it (whatever the addon order), while
`flow.server_conn` truthfully names the replay server. The token (random per hit) ties the
request to its entry; the replay server answers nothing else.

No upstream connection on a hit: mitmproxy's default `connection_strategy=eager` connects to
the server at CONNECT time, before the request is known, so with the cache on the strategy
is set to `lazy` (the upstream is reached when a request needs it; TLS to the client uses
the SNI). In upstream-proxy mode hits are not served (the redirect would go through the
upstream proxy): requests are answered upstream and still stored.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import h11
from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader

from retimer.cache.entry import CacheEntry, cache_key, new_entry
from retimer.cache.store import CacheStore
from retimer.proxy.flows import destination_host, destination_url, request_body
from retimer.proxy.hooks import CACHE_ENTRY_KEY, CACHE_KEY, CACHE_TOKEN_KEY, STREAM_KEY, StreamHandle
from retimer.proxy.loopback import LoopbackReplay, Redirect
from retimer.records.schema import StreamRecord

logger = logging.getLogger("retimer")

@dataclass(slots=True)
class Hit:
    redirect: Redirect
    entry: CacheEntry


class ReplayServer(LoopbackReplay[Hit]):
    """HTTP/1.1 on 127.0.0.1 (random port) answering each expected token with its entry."""

    token_key = CACHE_TOKEN_KEY

    def __init__(self) -> None:
        super().__init__()
        self.served = 0

    def serve(self, flow: http.HTTPFlow, entry: CacheEntry) -> None:
        """Point `flow` at this server, which answers it with `entry`; the request is put
        back as the client sent it when the server reads it (`Redirect.restore`)."""
        redirect = self.point(flow)
        self.pending[redirect.token] = Hit(redirect, entry)

    def _answer(self, hit: Hit | None) -> tuple[h11.Response, bytes]:
        """The response for one request: its entry, or an error that closes the connection."""
        if hit is not None:
            entry = hit.entry
            try:
                head = h11.Response(
                    status_code=entry.status,
                    reason=entry.reason_phrase.encode("latin-1", "replace"),
                    headers=[*entry.headers, ("content-length", str(len(entry.body)))],
                )
                self.served += 1
                return head, entry.body
            except h11.LocalProtocolError as e:
                logger.warning(f"retimer: cannot replay the cache entry for {entry.url}: {e}")
        body = b"retimer cache: nothing to replay here\n"
        head = h11.Response(status_code=404 if hit is None else 502, headers=[
            ("content-type", "text/plain"), ("content-length", str(len(body))),
            ("connection", "close")])
        return head, body

    async def respond(self, request: h11.Request, conn: h11.Connection, writer: asyncio.StreamWriter) -> None:
        head, body = self._answer(self.claim(list(request.headers)))
        data = conn.send(head) or b""
        if body:
            data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        writer.write(data)
        await writer.drain()


class ResponseCache:
    """Stores completed paced streams and answers identical requests from the cache.

    The Retimer addon paces a hit like any stream; its hooks (retimer.proxy.hooks) tell this
    addon when a stream starts (keep its body) and when it ends (store it)."""

    def __init__(self) -> None:
        self.store: CacheStore | None = None
        self.replay = ReplayServer()
        self._warned_upstream = False

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "retimer_cache", str, "",
            "Response cache directory: identical requests are answered from it with the "
            "profile's timing and no upstream call; empty turns the cache off.",
        )
        loader.add_option(
            "retimer_cache_max_mb", int, 0,
            "Size cap of the response cache in MB (least recently used entries go); 0: no cap.",
        )

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if updated & {"retimer_cache", "retimer_cache_max_mb"}:
            cap_mb = opts.retimer_cache_max_mb
            if cap_mb < 0:
                raise exceptions.OptionsError("retimer_cache_max_mb: expected a size >= 0")
            self.store = None
            if opts.retimer_cache:
                try:
                    self.store = CacheStore(opts.retimer_cache, cap_mb * 1_000_000)
                except OSError as e:
                    raise exceptions.OptionsError(
                        f"--cache: cannot use {opts.retimer_cache}: {e.strerror}"
                    ) from None
        watched = {"retimer_cache", "connection_strategy"}
        if self.store is not None and updated & watched and opts.connection_strategy != "lazy":
            # eager connects upstream at CONNECT time, before the request is known
            opts.connection_strategy = "lazy"
            logger.info("retimer: response cache on: connection_strategy set to lazy")

    async def running(self) -> None:
        await self.replay.start()

    def done(self) -> None:
        self.replay.stop()

    # -- mitmproxy's hooks -----------------------------------------------------------------
    def request(self, flow: http.HTTPFlow) -> None:
        if self.store is None or flow.response is not None or CACHE_TOKEN_KEY in flow.metadata:
            return  # (a cassette's replay may have taken it)
        request = flow.request
        if request.stream or request.headers.get("upgrade"):
            return
        key = cache_key(
            request.method, request.scheme, destination_host(flow), request.port, request.path,
            {k.lower(): v for k, v in request.headers.items()},
            request_body(flow),
        )
        flow.metadata[CACHE_ENTRY_KEY] = key
        flow.metadata[CACHE_KEY] = "miss"
        if flow.server_conn.via is not None:
            if not self._warned_upstream:
                self._warned_upstream = True
                logger.warning("retimer: cache hits cannot be served in upstream-proxy mode")
            return
        if not self.replay.running:
            return
        entry = self.store.get(key)
        if entry is None:
            return
        flow.metadata[CACHE_KEY] = "hit"
        self.replay.serve(flow, entry)

    def error(self, flow: http.HTTPFlow) -> None:
        if self.replay.forget(flow):
            logger.warning(f"retimer: a cache hit was not served: {flow.error}")

    # -- the Retimer addon's hooks (retimer.proxy.hooks) -----------------------------------
    def retimer_stream_start(self, flow: http.HTTPFlow, stream: StreamHandle) -> None:
        if self.store is not None and flow.metadata.get(CACHE_KEY) == "miss":
            stream.keep_body()

    def retimer_stream_done(self, flow: http.HTTPFlow, stream: StreamHandle, record: StreamRecord) -> None:
        key = flow.metadata.get(CACHE_ENTRY_KEY)
        response = flow.response
        if (
            self.store is None or flow.metadata.get(CACHE_KEY) != "miss" or key is None
            or response is None or response.status_code != 200
            or record.outcome != "complete"
            or (body := stream.body) is None or stream.fallback is not None
            or stream.adapter.api_error or stream.adapter.anomaly is not None
            or stream.adapter.name == "grpc" and response.http_version == "HTTP/2.0"
        ):
            return  # (gRPC over HTTP/2 ends in trailers, which an entry does not keep)
        entry = new_entry(
            response.status_code, response.reason, response.headers.items(multi=True),
            body, url=destination_url(flow), method=flow.request.method,
            protocol=flow.metadata.get(STREAM_KEY, {}).get("protocol"),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        try:
            self.store.put(key, entry)
        except OSError as e:
            logger.warning(f"retimer: cannot store a response in the cache: {e.strerror or e}")
            return
        flow.metadata[CACHE_KEY] = "stored"  # the record says so (the Retimer addon reads it)
