"""Session cassettes (`--record DIR`, `--replay DIR`): a session's LLM calls recorded once,
then answered from the cassette with the profile's timing and no upstream.

Recording keeps what the response cache keeps, in the order the calls ended: each paced
stream that completed with status 200 (no API error, nothing passed on unparsed), with its
request's shape (`retimer.cassette.shape`: digests, never the prompt) and the upstream's
timing. Replaying matches each LLM call (`retimer.wire.classify.is_llm_call`) to a recorded
one (`retimer.cassette.match`) and serves it through a replay server on loopback, as the
cache serves a hit, so the Retimer addon paces it like any stream. A call that matches none
gets a 400 in the API's error shape (clients do not retry a 400), or, with
`retimer_replay_diverged=upstream`, goes to its upstream. Each replayed call's record names
its match (`cassette`). Calls on a WebSocket, gRPC over HTTP/2 and non-streaming answers are
not recorded yet.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader

from retimer.cache.entry import new_entry
from retimer.cassette.format import CassetteCall, UpstreamTiming
from retimer.cassette.match import CassetteMatcher, Match
from retimer.cassette.shape import call_shape
from retimer.cassette.store import CassetteError, CassetteWriter, read_cassette
from retimer.proxy.cache_addon import ReplayServer
from retimer.proxy.flows import destination_host, destination_url, request_body
from retimer.proxy.hooks import CASSETTE_KEY, STREAM_KEY, StreamHandle
from retimer.records.schema import StreamRecord
from retimer.wire.classify import is_llm_call
from retimer.wire.hosts import is_llm_host
from retimer.wire.protocols.base import RequestShape

logger = logging.getLogger("retimer")

DIVERGED = ("error", "upstream")
NOTICE_AFTER = 5  # streams seen before a run is called mostly upstream-bound


class Cassettes:
    """Records a session into a cassette, or replays one."""

    def __init__(self) -> None:
        self.writer: CassetteWriter | None = None
        self.calls: list[CassetteCall] = []
        self.matcher: CassetteMatcher | None = None
        self.replay = ReplayServer()
        self.counts: Counter[Match] = Counter()

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
            self.writer, self.matcher, self.calls = None, None, []
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

    def done(self) -> None:
        self.replay.stop()
        if self.writer is not None:
            logger.warning(f"retimer: cassette {self.writer.dir}: {len(self.writer.calls)} "
                           "calls recorded")
        if self.matcher is not None:
            said = ", ".join(f"{self.counts[m]} {m.value}" for m in Match)
            unused = len(self.matcher.unused)
            logger.warning(f"retimer: cassette: {said}; {unused} recorded calls not used")

    # -- mitmproxy's hooks -----------------------------------------------------------------
    def request(self, flow: http.HTTPFlow) -> None:
        matcher = self.matcher
        if matcher is None or flow.response is not None:
            return
        request = flow.request
        if request.stream or request.headers.get("upgrade"):
            return
        host = destination_host(flow)
        body = request_body(flow)
        headers = {k.lower(): v for k, v in request.headers.items()}
        shape = RequestShape.of_body(request.method, host, request.path, headers, body)
        if not is_llm_call(shape, headers.get("content-type", ""), is_llm_host(host)):
            return
        verdict = matcher.match(call_shape(request.method, request.path, body))
        self.counts[verdict.match] += 1
        flow.metadata[CASSETTE_KEY] = {
            "match": verdict.match.value,
            "call": None if verdict.index is None else verdict.index + 1,
            "reason": verdict.reason}
        if verdict.index is not None:
            self.replay.serve(flow, self.calls[verdict.index].entry)
            return
        logger.warning(f"retimer: cassette: a call to {request.path} diverged: {verdict.reason}")
        if ctx.options.retimer_replay_diverged == "upstream":
            return
        message = (f"retimer cassette: this call matches no recorded call ({verdict.reason}); "
                   "record the session again, or replay with --replay-diverged upstream")
        flow.response = http.Response.make(400, json.dumps({"type": "error", "error": {
            "type": "retimer_cassette_diverged", "code": 400, "status": "FAILED_PRECONDITION",
            "message": message}}).encode(), {"content-type": "application/json"})

    def error(self, flow: http.HTTPFlow) -> None:
        if self.replay.forget(flow):
            logger.warning(f"retimer: a replayed call was not served: {flow.error}")

    # -- the Retimer addon's hooks (retimer.proxy.hooks) -----------------------------------
    def retimer_stream_start(self, flow: http.HTTPFlow, stream: StreamHandle) -> None:
        if self.writer is not None:
            stream.keep_body()

    def retimer_stream_done(self, flow: http.HTTPFlow, stream: StreamHandle, record: StreamRecord) -> None:
        writer = self.writer
        response = flow.response
        if (
            writer is None or response is None or response.status_code != 200
            or record.outcome != "complete" or (body := stream.body) is None
            or stream.fallback is not None or stream.adapter.api_error
            or stream.adapter.anomaly is not None
            or stream.adapter.name == "grpc" and response.http_version == "HTTP/2.0"
        ):
            return
        request = flow.request
        entry = new_entry(
            response.status_code, response.reason, response.headers.items(multi=True), body,
            url=destination_url(flow), method=request.method,
            protocol=flow.metadata.get(STREAM_KEY, {}).get("protocol"), created=record.time)
        up = record.upstream
        timing = UpstreamTiming(
            up.ttft_ms if up else None, up.duration_ms if up else None, up.tokens if up else None)
        try:
            writer.add(CassetteCall(call_shape(request.method, request.path, request_body(flow)),
                                    entry, timing))
        except CassetteError as e:
            logger.warning(f"retimer: cannot record a call: {e}")


class UpstreamBoundNotice:
    """Says once, when most of a run's streams so far were upstream-bound (and at least
    NOTICE_AFTER were seen), that a live stream cannot be made faster than its upstream sends
    it, and how to feel that speed anyway. Study streams are left to the study's own warning
    (it names no condition), replayed ones cannot be upstream-bound."""

    def __init__(self) -> None:
        self.seen = 0
        self.bound = 0
        self.said = False

    def retimer_record(self, record: StreamRecord) -> None:
        if self.said or record.study is not None or record.upstream_bound is None:
            return
        self.seen += 1
        self.bound += record.upstream_bound
        if self.seen >= NOTICE_AFTER and self.bound * 2 > self.seen:
            self.said = True
            logger.warning(
                f"retimer: {self.bound} of the {self.seen} streams so far were upstream-bound: "
                "the upstream is slower than the profile, and a live stream cannot be made "
                "faster than it arrives. To feel this speed, record the session once "
                "(--record DIR) and replay it (--replay DIR); see docs/cli.md.")
