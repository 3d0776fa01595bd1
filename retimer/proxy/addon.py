"""The mitmproxy addon: options, one decision per flow, and records.

The same addon runs inside `retimer` and in `mitmdump -s addons/retimer.py` or mitmweb. What a
flow is comes from the core (`retimer.wire.classify`), once per flow: a stream an adapter reads
is handed to the pacing bridge with its pacer, a whole LLM answer is held until the profile would
have finished it (`retimer.timing.whole`), other streams are streamed through untouched so live
features keep working, and everything else is left to mitmproxy.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import weakref
from dataclasses import replace
from typing import Any

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader
from mitmproxy.addons.proxyserver import Proxyserver

from retimer.profile.model import Profile, ProfileError
from retimer.profile.settings import ProfileSettings
from retimer.profile.streams import new_stream
from retimer.proxy.bridge import PacingBridge
from retimer.proxy.bridge.websocket import WebSocketPacing
from retimer.proxy.flows import (
    destination_host,
    is_llm_websocket,
    prompt_of,
    prompt_scope,
    reframe,
    request_body,
    request_start,
    stream_record,
    to_llm_api,
)
from retimer.proxy.gcpolicy import IDLE_AFTER_S, FullPasses
from retimer.proxy.hooks import (
    ARRIVED_KEY,
    CACHE_KEY,
    PROFILE_KEY,
    PROMPT_KEY,
    RECORD_KEY,
    STREAM_KEY,
    HookCaller,
    RecordHook,
    StreamDoneHook,
    StreamHandle,
    StreamStartHook,
)
from retimer.proxy.patches.arrival import TICK_S, kernel_tick_s, waited_s
from retimer.records.parse import other_fields
from retimer.records.schema import StreamRecord
from retimer.records.writer import RecordLog
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import Turn
from retimer.timing.strategy import Strategy, parse_strategy
from retimer.timing.whole import plan_whole_answer
from retimer.wire.classify import Treatment, Verdict, classify
from retimer.wire.encoding import Decoder
from retimer.wire.prompt import PromptCache, PromptInfo, TurnPrompts
from retimer.wire.protocols.base import Adapter, RequestShape
from retimer.wire.protocols.websocket import WebSocketMessageAdapter, turn_request
from retimer.wire.whole import timing_line

logger = logging.getLogger("retimer")


class Retimer:
    """Re-times LLM streams with the configured profile.

    Other addons follow its streams through the hooks of `retimer.proxy.hooks`: a stream's
    start, its end, and every record. It paces through `bridge`, the process's pacing bridge
    (`retimer.proxy.addons.install()` puts it into mitmproxy, after checking its internals)."""

    def __init__(self, bridge: PacingBridge) -> None:
        self.bridge = bridge
        self.profile: Profile | None = None
        self.seed: int = 0
        self.strategy = Strategy.LIVE
        self.prompt_cache = PromptCache()  # the session's prompt prefixes (providers' caching)
        self.last_request = 0.0  # monotonic time of the latest request (idle GC waits for quiet)
        self.streams = 0
        self.log: RecordLog | None = None
        self.active: dict[str, tuple[http.HTTPFlow, StreamPacer]] = {}
        self.websockets = WebSocketPacing(bridge.websockets, bridge.pool, self._websocket_turn, self._websocket_done)
        # flows whose response is read whole, and what `classify` said of them at their head
        self._verdicts: weakref.WeakKeyDictionary[http.HTTPFlow, Verdict] = weakref.WeakKeyDictionary()
        self.drained: asyncio.Event | None = None  # set when shutdown starts (retimer.proxy.safety)
        self.holding_whole = 0  # non-streaming responses being held right now
        self.hooks = HookCaller()  # retimer's own hooks, to the addons that have them
        self.full_passes = FullPasses()  # full GC passes run only while nothing plays
        self.proxyserver: Proxyserver | None = None  # mitmproxy's, once running: where a request's socket is found
        self.kernel_tick = TICK_S  # how coarsely the kernel times a request's arrival (measured when running)

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "retimer_profile", str, "",
            "Target speed profile: a built-in name or alias (see `retimer profiles`) or a YAML "
            "path. Empty: cerebras, or frontier's shape when retimer_ttft/retimer_tps are set.",
        )
        loader.add_option(
            "retimer_seed", int, -1,
            "Seed for the timing model so a run can be reproduced; -1 draws one at start-up.",
        )
        loader.add_option(
            "retimer_ttft", str, "", "Override the profile's median time to first token, e.g. 400ms."
        )
        loader.add_option(
            "retimer_tps", str, "", "Override the profile's mean decode rate in tokens per second."
        )
        loader.add_option(
            "retimer_jitter", str, "",
            "Scale the profile's jitter; 0 turns it off so timing is exact.",
        )
        loader.add_option(
            "retimer_thinking", str, "",
            "Hidden thinking before the first token: off, low, medium, high or a token count.",
        )
        loader.add_option(
            "retimer_log", str, "", "Append one JSON line per re-timed stream to this file."
        )
        loader.add_option(
            "retimer_speed", str, "",
            "Play the whole profile faster or slower: 2 (or 2x, 200%) is twice as fast.",
        )
        loader.add_option(
            "retimer_strategy", str, "live",
            "When the upstream is slower than the target: live (tokens leave as they can), "
            "smooth (start late enough to play at the profile rate without stalls) or replay "
            "(wait for the whole response, then play it with exact timing).",
        )

    def configure(self, updated: set[str]) -> None:
        if updated & {"retimer_profile", "retimer_ttft", "retimer_tps", "retimer_jitter",
                      "retimer_speed", "retimer_thinking"}:
            opts = ctx.options
            try:
                self.profile = ProfileSettings(
                    opts.retimer_profile, opts.retimer_ttft, opts.retimer_tps, opts.retimer_jitter,
                    opts.retimer_speed, opts.retimer_thinking,
                ).build()
            except ProfileError as e:
                raise exceptions.OptionsError(str(e)) from None
        if "retimer_strategy" in updated:
            try:
                self.strategy = parse_strategy(ctx.options.retimer_strategy)
            except ValueError as e:
                raise exceptions.OptionsError(str(e)) from None
        if "retimer_seed" in updated:
            seed = ctx.options.retimer_seed
            self.seed = seed if seed >= 0 else secrets.randbelow(2**31)
        if "retimer_log" in updated:
            if self.log:
                self.log.close()
                self.log = None
            if ctx.options.retimer_log:
                try:
                    self.log = RecordLog(ctx.options.retimer_log)
                except OSError as e:
                    raise exceptions.OptionsError(
                        f"--log: cannot open {ctx.options.retimer_log}: {e.strerror}"
                    ) from None

    def running(self) -> None:
        # Everything loaded so far lives for the whole run: keep it out of GC passes, and make
        # full passes only while nothing plays (they pause emission for tens of milliseconds).
        self.full_passes.start()
        self.proxyserver = ctx.master.addons.get("proxyserver")
        self.bridge.serve(self.proxyserver)
        self.kernel_tick = kernel_tick_s()

    def done(self) -> None:
        # streams still in flight when the proxy stops get their record too (outcome shutdown)
        self.bridge.shutdown_all("shutdown")
        self.websockets.shutdown("shutdown")
        if self.log:
            self.log.close()

    def in_flight(self) -> int:
        """Streams, WebSockets and whole responses still held or being sent."""
        return len(self.active) + len(self.websockets.sockets) + self.holding_whole

    def is_draining(self) -> bool:
        """Shutting down: `drain` was called (the health check then answers 503)."""
        return self.drained is not None and self.drained.is_set()

    def drain(self) -> None:
        """Shutting down (retimer.proxy.safety): everything held goes out now, the rest as it comes."""
        self.bridge.drain()
        self.websockets.drain()
        if self.drained is None:
            self.drained = asyncio.Event()
        self.drained.set()

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self.last_request = time.monotonic()
        waited = waited_s(self.proxyserver, flow.client_conn, self.kernel_tick)
        if waited:  # the request sat in the socket while the loop was busy: TTFT counts from its arrival
            flow.metadata[ARRIVED_KEY] = time.time() - waited

    async def response(self, flow: http.HTTPFlow) -> None:
        """Hold a whole (non-streaming) LLM response until the profile would have finished it."""
        response = flow.response
        if (
            response is None or response.stream or flow.websocket is not None
            or STREAM_KEY in flow.metadata or response.status_code != 200
            or self.profile is None  # passthrough: held for no time, but recorded
        ):
            return
        verdict = self._verdicts.pop(flow, None)
        if verdict is None:  # an answer an addon made: it had no head of its own to classify
            verdict = self._classify(flow)
        if verdict.treatment is not Treatment.HOLD or verdict.adapter is None:
            return
        line = timing_line(response.get_content(strict=False) or b"")
        if line is None:
            return
        start = time.monotonic() - max(0.0, time.time() - request_start(flow))
        pacer, index = self._pacer(verdict.adapter, start, flow=flow)
        now = time.monotonic()
        answer = plan_whole_answer(pacer, line, start, now)
        if answer is None:
            return
        flow.metadata[STREAM_KEY] = {"index": index, "protocol": "non-streaming"}
        if answer.due > now:
            await self._hold(answer.due - now)
        end = time.monotonic()
        answer.left(end)
        self._finished(flow, pacer, end, "complete")

    async def _hold(self, seconds: float) -> None:
        """Sleep, unless the proxy starts shutting down (`drain`): then the body goes at once."""
        if self.drained is None:
            self.drained = asyncio.Event()
        self.holding_whole += 1
        try:
            await asyncio.wait_for(self.drained.wait(), seconds)
        except TimeoutError:
            pass
        finally:
            self.holding_whole -= 1

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        if response is None or flow.websocket is not None:
            return
        verdict = self._classify(flow)
        treatment = verdict.treatment
        if treatment is Treatment.HOLD or treatment is Treatment.LEAVE:
            self._verdicts[flow] = verdict  # for `response`, once the body is read
            return
        response.stream = True  # a stream is never buffered whole, paced or not
        if treatment is Treatment.STREAM or self.profile is None:
            if verdict.warning and self.profile is not None:
                logger.warning(f"retimer: {verdict.warning}")
            return
        assert verdict.adapter is not None
        # a passthrough body goes as it came, encoding and framing included (the bridge counts it)
        if not self.profile_for(flow).passthrough:
            reframe(response, flow.request.http_version)
        start = time.monotonic() - max(0.0, time.time() - request_start(flow))
        pacer, index = self._pacer(verdict.adapter, start, verdict.decoder, strategy=self.strategy, flow=flow)
        flow.metadata[STREAM_KEY] = {"index": index, "protocol": verdict.adapter.name}
        self.hooks.trigger(ctx.master.addons, StreamStartHook(flow, StreamHandle(pacer)))
        self.bridge.pace(flow, pacer, self._finished)
        self.active[flow.id] = (flow, pacer)

    def _classify(self, flow: http.HTTPFlow) -> Verdict:
        """What `flow` is (`retimer.wire.classify`), from its request as sent and its response's head."""
        request = flow.request
        response = flow.response
        assert response is not None
        host = destination_host(flow)
        headers = {k.lower(): v for k, v in request.headers.items()}
        raw = request.raw_content or b""
        body = request_body(flow)
        # adapters see the bytes as sent; they share the flow's one parse when it is of those bytes
        if body.raw == raw:
            shape = RequestShape.of_body(request.method, host, request.path, headers, body)
        else:
            shape = RequestShape(request.method, host, request.path, headers, raw)
        return classify(shape, response.status_code, response.headers.get("content-type", ""),
                        response.headers.get("content-encoding", ""), to_llm_api(flow))

    def profile_for(self, flow: http.HTTPFlow | None) -> Profile:
        """The flow's profile: a per-flow choice (a study condition) or the configured one.

        Another addon may put a `Profile` in `flow.metadata[PROFILE_KEY]` before the response
        arrives, and a dict of fields for the record in `flow.metadata[hooks.RECORD_KEY]`."""
        assert self.profile is not None
        chosen = flow.metadata.get(PROFILE_KEY) if flow is not None else None
        return chosen if isinstance(chosen, Profile) else self.profile

    def _pacer(
        self, adapter: Adapter, start: float, decoder: Decoder | None = None, *,
        strategy: Strategy = Strategy.LIVE, flow: http.HTTPFlow | None = None,
        prompt: PromptInfo | None = None,
    ) -> tuple[StreamPacer, int]:
        """A pacer with the next stream index's timing draw (seeded by seed and index).

        With `flow`, the request body's prompt (or `prompt`: a WebSocket turn's) drives
        prefill, the prompt cache, context slowdown and the reasoning budget, and its max-tokens
        hint guides the `smooth` strategy."""
        index = self.streams
        self.streams += 1
        stream = new_stream(
            self.profile_for(flow), adapter, start, seed=self.seed, index=index,
            prompt=prompt or (prompt_of(flow) if flow is not None else None), cache=self.prompt_cache,
            now=time.monotonic(), decoder=decoder, strategy=strategy,
        )
        if stream.prompt_seen is not None and flow is not None:
            flow.metadata[PROMPT_KEY] = stream.prompt_seen
        return stream.pacer, index

    # -- WebSocket -------------------------------------------------------------------------
    def websocket_start(self, flow: http.HTTPFlow) -> None:
        if self.profile is None:
            return  # a passthrough profile still paces nothing, but records every turn
        if is_llm_websocket(flow):
            flow.metadata[STREAM_KEY] = {"protocol": WebSocketMessageAdapter.name}
            self.websockets.start(flow)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self.websockets.message(flow)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.websockets.end(flow)

    def _websocket_turn(self, flow: http.HTTPFlow, start: float, asked: bytes, prompts: TurnPrompts,
                        answered: int) -> tuple[StreamPacer, int]:
        """A turn's pacer; its prompt is the client message that opened it (none for turn 0),
        continuing the turn before's when it names it (`TurnPrompts`)."""
        prompt = prompts.estimate(turn_request(asked), prompt_scope(flow), answered)
        return self._pacer(WebSocketMessageAdapter(), start, flow=flow, prompt=prompt)

    def _websocket_done(self, flow: http.HTTPFlow, turn: Turn, end: float, outcome: str) -> None:
        self._write(self._record(flow, turn.pacer, end, outcome, index=turn.index, turn=turn.number))

    def snapshot(self) -> list[dict[str, Any]]:
        """Records of the streams in flight, as they stand now (the live view reads their
        JSON form, as a worker of `--workers N` sends it)."""
        return [self._record(f, p, None, "streaming").to_json()
                for f, p in list(self.active.values())]

    def _finished(self, flow: http.HTTPFlow, pacer: StreamPacer, end: float, outcome: str) -> None:
        self.active.pop(flow.id, None)
        record = self._record(flow, pacer, end, outcome)
        self.hooks.trigger(ctx.master.addons, StreamDoneHook(flow, StreamHandle(pacer), record))  # before it is written
        cache, extra = flow.metadata.get(CACHE_KEY), other_fields(flow.metadata.get(RECORD_KEY, {}))
        if cache != record.cache or extra != record.extra:  # the cache stored it, an addon added
            record = replace(record, cache=cache, extra=extra)
        self._write(record)
        if not self.active and not self.websockets.sockets:
            self._collect_when_idle()
        elif self.full_passes.overdue(end):
            self.full_passes.collect()  # never idle for long: garbage must not grow for ever

    def _collect_when_idle(self) -> None:
        """Run the full GC pass while no stream is in flight (checked again after a short
        quiet spell, so back-to-back requests are not delayed) rather than mid-stream later."""
        try:
            asyncio.get_running_loop().call_later(IDLE_AFTER_S, _collect_if_idle, self)
        except RuntimeError:  # no loop (unit tests call hooks directly)
            pass

    def _write(self, record: StreamRecord) -> None:
        """Into the log, then to every addon with the record hook (the study, the live view)."""
        if self.log:
            self.log.write(record)
        self.hooks.trigger(ctx.master.addons, RecordHook(record))

    def _record(
        self, flow: http.HTTPFlow, pacer: StreamPacer, end: float | None, outcome: str,
        *, index: int | None = None, turn: int | None = None,
    ) -> StreamRecord:
        return stream_record(flow, pacer, self.profile_for(flow), self.seed,
                             end if end is not None else time.monotonic(), outcome, index, turn)


def _collect_if_idle(addon: Retimer) -> None:
    if addon.active or addon.websockets.sockets or addon.bridge.active:
        return
    if time.monotonic() - addon.last_request < IDLE_AFTER_S:
        return
    addon.full_passes.collect()
