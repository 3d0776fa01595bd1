"""Session cassettes (`--record DIR`, `--replay DIR`): a session's LLM calls recorded once,
then answered from the cassette with the profile's timing and no upstream.

Recording keeps, in the order the calls ended: each paced stream that completed with status
200 (no API error, nothing passed on unparsed), each whole (non-streaming) LLM answer with
status 200, and each turn of an LLM WebSocket (`retimer.proxy.cassette_sockets`), with its
request's shape (`retimer.cassette.shape`: digests, never the prompt) and the upstream's
timing. Replaying matches each LLM call (`retimer.wire.classify.is_llm_call`) and each
WebSocket client message to a recorded one (`retimer.cassette.match`) and serves it from a
replay server on loopback, as the cache serves a hit, so the Retimer addon paces it like any
stream. A call that matches none gets a 400 in the API's error shape (clients do not retry a
400), or, with `retimer_replay_diverged=upstream`, goes to its upstream; a WebSocket turn
that matches none gets an `error` event (its socket is the replay's: it has no upstream to
go to). Each replayed call's record names its match (`cassette`). A gRPC call over HTTP/2
keeps its trailers (its status) and is replayed by an HTTP/2 server of its own
(`retimer.proxy.cassette_h2`: the proxy's TLS to it trusts its own certificate and no other);
one that matches none gets gRPC's error status instead of a 400.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from mitmproxy import connection, ctx, exceptions, http, tls
from mitmproxy.addonmanager import Loader

from retimer.cache.entry import new_entry, storable_headers
from retimer.cassette.format import CassetteCall, UpstreamTiming
from retimer.cassette.match import CassetteMatcher, Match, Verdict, described, diverged_error, diverged_message
from retimer.cassette.shape import call_shape
from retimer.cassette.store import CassetteError, CassetteWriter, read_cassette
from retimer.proxy.cache_addon import ReplayServer
from retimer.proxy.cassette_h2 import H2ReplayServer
from retimer.proxy.cassette_sockets import (
    FinishedTurn,
    ReplayedSocket,
    SocketRecording,
    SocketReplayServer,
)
from retimer.proxy.flows import destination_host, destination_url, is_llm_websocket, request_body
from retimer.proxy.hooks import (
    CASSETTE_KEY,
    CASSETTE_TURNS_KEY,
    RECORD_KEY,
    STREAM_KEY,
    StreamHandle,
)
from retimer.records.redact import redact_url
from retimer.records.schema import StreamRecord
from retimer.wire.classify import is_llm_call
from retimer.wire.hosts import is_llm_host
from retimer.wire.media import envelope_codec
from retimer.wire.protocols.base import RequestShape
from retimer.wire.protocols.websocket import decode_messages

logger = logging.getLogger("retimer")

DIVERGED = ("error", "upstream")
SOCKET = "WEBSOCKET"  # the method of a WebSocket turn's shape
GRPC_FAILED_PRECONDITION = "9"  # gRPC's status for "the system is not in the state required"
DIVERGED_AT_ONCE = 3  # calls that diverged, none replayed, before the replay says it is lost


class Cassettes:
    """Records a session into a cassette, or replays one."""

    def __init__(self) -> None:
        self.writer: CassetteWriter | None = None
        self.calls: list[CassetteCall] = []
        self.matcher: CassetteMatcher | None = None  # the session's (no study participant)
        self.participants: dict[str, CassetteMatcher] = {}  # a study's: each replays it all
        self.replay = ReplayServer()
        self.socket_replay = SocketReplayServer()
        self.h2_replay = H2ReplayServer()  # started when the cassette holds a gRPC-over-HTTP/2 call
        self.counts: Counter[Match] = Counter()
        self.sockets = 0  # sockets recorded so far
        self.recording: dict[str, SocketRecording] = {}  # flow id: a socket being recorded
        self.replaying: dict[str, ReplayedSocket] = {}  # flow id: a socket being replayed
        self.turn_tokens: dict[tuple[str, int], int | None] = {}  # (flow id, turn): tokens

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "retimer_record", str, "",
            "Record the session's LLM calls into a new cassette in this directory.")
        loader.add_option(
            "retimer_replay", str, "",
            "Answer the session's LLM calls from the cassette in this directory, with the "
            "profile's timing and no upstream call.")
        loader.add_option(
            "retimer_replay_diverged", str, "error",
            "What a replayed session's call that matches no recorded call gets: error (a 400 "
            "in the API's error shape) or upstream (it goes to its upstream).",
            choices=DIVERGED)

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if updated & {"retimer_record", "retimer_replay"}:
            if opts.retimer_record and opts.retimer_replay:
                raise exceptions.OptionsError("--record and --replay: one at a time")
            self.writer, self.matcher, self.calls, self.sockets = None, None, [], 0
            self.participants = {}
            try:
                if opts.retimer_record:
                    self.writer = CassetteWriter(opts.retimer_record)
                if opts.retimer_replay:
                    _, self.calls = read_cassette(opts.retimer_replay)
                    self.matcher = CassetteMatcher([c.shape for c in self.calls])
            except CassetteError as e:
                flag = "--record" if opts.retimer_record else "--replay"
                raise exceptions.OptionsError(f"{flag}: {e}") from None
        if self.matcher is not None and opts.connection_strategy != "lazy":
            opts.connection_strategy = "lazy"  # eager would connect upstream before the request

    async def running(self) -> None:
        if self.matcher is not None:
            await self.replay.start()
            await self.socket_replay.start()
            if any(c.trailers is not None for c in self.calls):
                await self.h2_replay.start()

    def done(self) -> None:
        self.replay.stop()
        self.socket_replay.stop()
        self.h2_replay.stop()
        if self.writer is not None:
            logger.warning(f"retimer: cassette {self.writer.dir}: {len(self.writer.calls)} "
                           "calls recorded")
        if self.matcher is not None:
            said = ", ".join(f"{self.counts[m]} {m.value}" for m in Match)
            if self.participants:
                logger.warning(f"retimer: cassette: {said}, for {len(self.participants)} study "
                               "participants")
            else:
                unused = len(self.matcher.unused)
                logger.warning(f"retimer: cassette: {said}; {unused} recorded calls not used "
                               "by this process")

    def matcher_for(self, flow: http.HTTPFlow) -> CassetteMatcher | None:
        """The matcher a flow's calls are matched by: a study participant's own (the Study
        addon names them in the flow's record fields before this addon's `request`), so each
        participant's session replays the whole cassette; otherwise the session's."""
        if self.matcher is None:
            return None
        participant = flow.metadata.get(RECORD_KEY, {}).get("participant")
        if not isinstance(participant, str):
            return self.matcher
        if participant not in self.participants:
            self.participants[participant] = CassetteMatcher(self.matcher.recorded)
        return self.participants[participant]

    # -- mitmproxy's hooks -----------------------------------------------------------------
    def request(self, flow: http.HTTPFlow) -> None:
        matcher = self.matcher_for(flow)
        if matcher is None or flow.response is not None:
            return
        request = flow.request
        if request.headers.get("upgrade", "").lower() == "websocket":
            self._replay_socket(flow, matcher)
            return
        if request.stream or request.headers.get("upgrade"):
            return
        host = destination_host(flow)
        body = request_body(flow)
        headers = {k.lower(): v for k, v in request.headers.items()}
        shape = RequestShape.of_body(request.method, host, request.path, headers, body)
        ctype = headers.get("content-type", "")
        if not (is_llm_call(shape, ctype, is_llm_host(host))
                or self._recorded_rpc(request.method, request.path, ctype)):
            return
        verdict = matcher.match(call_shape(request.method, request.path, body))
        self._count(verdict)
        flow.metadata[CASSETTE_KEY] = described(verdict)
        if verdict.index is not None:
            found = self.calls[verdict.index]
            if found.trailers is not None:
                self.h2_replay.serve(flow, found.entry, found.trailers)
            else:
                self.replay.serve(flow, found.entry)
            return
        logger.warning(f"retimer: cassette: a call to {redact_url(request.path)} diverged: {verdict.reason}")
        if ctx.options.retimer_replay_diverged == "upstream":
            return
        codec = envelope_codec(ctype)
        if codec is not None and codec[0] == "grpc":  # gRPC's own error: a trailers-only answer
            message = diverged_message(verdict, "a call")
            flow.response = http.Response.make(200, b"", {
                "content-type": ctype, "grpc-status": GRPC_FAILED_PRECONDITION,
                "grpc-message": quote(message, safe=" ,;:()'/-_.")})
            return
        flow.response = http.Response.make(400, diverged_error(verdict, "a call"),
                                           {"content-type": "application/json"})

    def error(self, flow: http.HTTPFlow) -> None:
        if self.replay.forget(flow) or self.socket_replay.forget(flow) or self.h2_replay.forget(flow):
            logger.warning(f"retimer: a replayed call was not served: {flow.error}")

    def tls_start_server(self, tls_start: tls.TlsData) -> None:
        """The proxy's TLS to the HTTP/2 replay server trusts that server's own certificate
        (whatever `ssl_insecure` and the upstream CA options say of real upstreams)."""
        server = tls_start.conn
        if isinstance(server, connection.Server) and self.h2_replay.is_me(server.address):
            tls_start.ssl_conn = self.h2_replay.pinned_context(list(server.alpn_offers))

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        if self.writer is not None and is_llm_websocket(flow):
            self.sockets += 1
            self.recording[flow.id] = SocketRecording(self.sockets)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.injected:
            return  # retimer's paced copy of a server message, or an error of ours
        if (recording := self.recording.get(flow.id)) is not None:
            now = time.monotonic()
            if message.from_client:
                self._add_turn(flow, recording, recording.client_message(message.content, now))
            else:
                recording.server_message(message.content, message.is_text, now)
        elif (socket := self.replaying.get(flow.id)) is not None and message.from_client:
            socket.told += 1
            socket.answers.append(self._replay_turn(flow, socket.told, message.content))

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.replaying.pop(flow.id, None)
        if (recording := self.recording.pop(flow.id, None)) is not None:
            self._add_turn(flow, recording, recording.finish())

    # -- the Retimer addon's hooks (retimer.proxy.hooks) -----------------------------------
    def retimer_stream_start(self, flow: http.HTTPFlow, stream: StreamHandle) -> None:
        if self.writer is not None:
            stream.keep_body()

    def retimer_stream_done(self, flow: http.HTTPFlow, stream: StreamHandle, record: StreamRecord) -> None:
        writer = self.writer
        response = flow.response
        if writer is None or response is None or response.status_code != 200:
            return
        trailers = None
        if record.protocol == "non-streaming":  # held whole: the body is the response's
            body = response.get_content(strict=False)
        elif (
            record.outcome != "complete" or stream.fallback is not None
            or stream.adapter.api_error or stream.adapter.anomaly is not None
        ):
            return
        else:
            body = stream.body
        if stream.adapter.name == "grpc" and response.http_version == "HTTP/2.0":
            if not response.trailers:  # its status never came: nothing to replay
                return
            trailers = storable_headers(response.trailers.items(multi=True))
        if body is None:
            return
        request = flow.request
        entry = new_entry(
            response.status_code, response.reason, response.headers.items(multi=True), body,
            url=destination_url(flow), method=request.method,
            protocol=flow.metadata.get(STREAM_KEY, {}).get("protocol"), created=record.time)
        up = record.upstream
        timing = UpstreamTiming(
            up.ttft_ms if up else None, up.duration_ms if up else None, up.tokens if up else None)
        self._add(CassetteCall(call_shape(request.method, request.path, request_body(flow)),
                               entry, timing, trailers=trailers))

    def retimer_record(self, record: StreamRecord) -> None:
        if record.connection in self.recording and record.turn is not None:
            self.turn_tokens[record.connection, record.turn] = (
                record.upstream.tokens if record.upstream else None)

    # -- internals -------------------------------------------------------------------------
    def _recorded_rpc(self, method: str, path: str, content_type: str) -> bool:
        """A streaming RPC (gRPC, Connect) to a method the cassette holds a call of: an RPC's
        body is not JSON, so only the recording tells the model's calls from other RPCs."""
        if envelope_codec(content_type) is None:
            return False
        path = path.split("?", 1)[0]
        return any(c.shape.method == method and c.shape.path == path for c in self.calls)

    def _count(self, verdict: Verdict) -> None:
        """Count a match; say once when a replay diverges from its start: the session is not
        the one recorded, and every call would fail the same way."""
        self.counts[verdict.match] += 1
        diverged = self.counts[Match.DIVERGED]
        if diverged == DIVERGED_AT_ONCE and diverged == sum(self.counts.values()):
            logger.warning(
                f"retimer: cassette: the session's first {diverged} calls all diverged from "
                f"{ctx.options.retimer_replay}: it does not follow the recording (another task, "
                "working directory, model or client version?); record it again")

    def _add(self, call: CassetteCall) -> None:
        assert self.writer is not None
        try:
            self.writer.add(call)
        except CassetteError as e:
            logger.warning(f"retimer: cannot record a call: {e}")

    def _add_turn(self, flow: http.HTTPFlow, recording: SocketRecording,
                  turn: FinishedTurn | None) -> None:
        """A WebSocket turn that is over, into the cassette (with the tokens its record
        counted, when the Retimer addon paced it)."""
        if turn is None or self.writer is None or flow.response is None:
            return
        response = flow.response
        entry = new_entry(
            response.status_code, response.reason, response.headers.items(multi=True), turn.body,
            url=destination_url(flow), method=flow.request.method, protocol="websocket",
            created=datetime.now(UTC).isoformat(timespec="seconds"))
        tokens = self.turn_tokens.pop((flow.id, turn.turn), None)
        timing = UpstreamTiming(turn.timing.ttft_ms, turn.timing.duration_ms, tokens)
        self._add(CassetteCall(call_shape(SOCKET, flow.request.path, turn.asked), entry, timing,
                               recording.socket, turn.turn))

    def _replay_socket(self, flow: http.HTTPFlow, matcher: CassetteMatcher) -> None:
        """A WebSocket handshake: answered by the socket replay server when the cassette
        holds turns on its path; otherwise a call that diverged."""
        if not is_llm_websocket(flow):
            return
        path = flow.request.path.split("?", 1)[0]
        recorded = [c for c in self.calls if c.socket is not None and c.shape.path == path]
        if not recorded:
            verdict = Verdict(Match.DIVERGED, None, "the cassette holds no WebSocket on this path")
            self._count(verdict)
            flow.metadata[CASSETTE_KEY] = described(verdict)
            logger.warning(f"retimer: cassette: a WebSocket to {path} diverged: {verdict.reason}")
            if ctx.options.retimer_replay_diverged != "upstream":
                flow.response = http.Response.make(400, diverged_error(verdict, "a WebSocket"),
                                                   {"content-type": "application/json"})
            return
        first: list[tuple[bytes, bool]] = []
        turns: dict[int, dict[str, Any]] = {}
        if any(c.turn == 0 for c in recorded):
            verdict = matcher.match(call_shape(SOCKET, path, b""))
            self._count(verdict)
            turns[0] = described(verdict)
            if verdict.index is not None:
                first = decode_messages(self.calls[verdict.index].entry.body)
        flow.metadata[CASSETTE_TURNS_KEY] = turns
        self.replaying[flow.id] = self.socket_replay.serve(flow, first)

    def _replay_turn(self, flow: http.HTTPFlow, turn: int, asked: bytes) -> list[tuple[bytes, bool]]:
        """What the replay server answers a client message with: its recorded turn's
        messages, or an `error` event when it matches none."""
        matcher = self.matcher_for(flow)
        assert matcher is not None
        verdict = matcher.match(call_shape(SOCKET, flow.request.path, asked))
        self._count(verdict)
        flow.metadata.setdefault(CASSETTE_TURNS_KEY, {})[turn] = described(verdict)
        if verdict.index is not None:
            return decode_messages(self.calls[verdict.index].entry.body)
        logger.warning(f"retimer: cassette: a WebSocket turn on {redact_url(flow.request.path)} diverged: "
                       f"{verdict.reason}")
        return [(diverged_error(verdict, "a WebSocket turn", event=True), True)]
