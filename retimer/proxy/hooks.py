"""What retimer's addons tell each other: mitmproxy hooks, and the flow.metadata keys they share.

The Retimer addon triggers these hooks (with `HookCaller`, as `ctx.master.addons.trigger(...)`
would); any addon (the study, the cache, a `-s` script) takes part by having a method of the
hook's name, e.g. `def retimer_stream_done(self, flow, stream, record)`. They are called in the
order the addons were added (`retimer.proxy.addons`: the study's hooks run before the
cache's), and an addon's exception is logged without stopping the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mitmproxy import exceptions, http
from mitmproxy.addonmanager import AddonManager, safecall
from mitmproxy.hooks import Hook

from retimer.proxy.patches.hooks import HookTable, invoke_addon_sync
from retimer.records.schema import StreamRecord
from retimer.timing.pacer import StreamPacer
from retimer.wire.protocols.base import Adapter

# flow.metadata keys: who sets each, and what it holds
STREAM_KEY = "retimer"  # Retimer: {"index": stream index, "protocol": adapter name}, once paced
PROFILE_KEY = "retimer_profile"  # Study: the Profile chosen for this flow, used instead of the configured one
RECORD_KEY = "retimer_record"  # Study, demo, workers, any addon: fields for this flow's record
CASSETTE_KEY = "retimer_cassette"  # Cassettes: a replayed call's match (also a record field)
CASSETTE_TURNS_KEY = "retimer_cassette_turns"  # Cassettes: {turn: match} of a replayed WebSocket
CACHE_KEY = "retimer_cache"  # ResponseCache: "hit" | "miss" | "stored" (also a record field)
CACHE_ENTRY_KEY = "retimer_cache_key"  # ResponseCache: the request's cache key
CACHE_TOKEN_KEY = "retimer_cache_token"  # ResponseCache: the replay server's token of a hit
STUDY_LINK_KEY = "retimer_study_link"  # Study: (link kind, conversation key) the response may name
ARRIVED_KEY = "retimer_arrived"  # Retimer: when the request reached the kernel (epoch s), if before mitmproxy read it
PAGE_TURN_KEY = "retimer_page_turn"  # StudyPage: this flow is a study page's turn (its id)
PROMPT_KEY = "retimer_prompt_tokens"  # Retimer: a passthrough stream's (prompt tokens, cached tokens)
WORKER_KEY = "worker"  # in RECORD_KEY's fields: the worker (1..N) that served the stream


class StreamHandle:
    """What the other addons see of a stream retimer paces, and the one thing they may ask of
    it: to keep the body it decodes. (Not the pacer: its state is the timing's alone.)"""

    __slots__ = ("__weakref__", "_pacer")

    def __init__(self, pacer: StreamPacer) -> None:
        self._pacer = pacer

    def keep_body(self) -> None:
        """Keep the decoded body, from here on, for `body` (ask in `retimer_stream_start`)."""
        if self._pacer.captured is None:
            self._pacer.captured = bytearray()

    @property
    def body(self) -> bytes | None:
        """The decoded body kept since `keep_body` (None: nobody asked, or a buffer cap let it
        go); whole only when `fallback` is None."""
        kept = self._pacer.captured
        return None if kept is None else bytes(kept)

    @property
    def adapter(self) -> Adapter:
        """The protocol adapter that read the stream: its `name`, `api_error`, `anomaly`."""
        return self._pacer.adapter

    @property
    def fallback(self) -> str | None:
        """Why (part of) the stream went through unparsed or unpaced; None: it did not."""
        return self._pacer.fallback


@dataclass
class StreamStartHook(Hook):
    """A pacer was made for an HTTP stream, before its first byte (a hook may ask it to keep
    the body it decodes: `stream.keep_body()`)."""

    name = "retimer_stream_start"

    flow: http.HTTPFlow
    stream: StreamHandle


@dataclass
class StreamDoneHook(Hook):
    """An HTTP stream, or a held whole response, finished. `record` (read-only) is written
    after every addon had this hook, with `cache` as the flow's CACHE_KEY then says (the cache
    stores the response here) and the fields of the flow's RECORD_KEY dict (an addon adds its
    own fields there)."""

    name = "retimer_stream_done"

    flow: http.HTTPFlow
    stream: StreamHandle
    record: StreamRecord


@dataclass
class RecordHook(Hook):
    """A stream's record was made (and written to the log, if any): an HTTP stream, a whole
    response or a WebSocket turn."""

    name = "retimer_record"

    record: StreamRecord


class HookCaller:
    """Triggers retimer's hooks as `AddonManager.trigger` does (in chain order, `safecall` per
    top-level addon: an error is logged and the others run; `AddonHalt` stops the rest), on
    the addons that have the hook only (`patches.hooks.HookTable`): mitmproxy's own `trigger`
    goes through every addon of the chain (about 40) with a context manager each, three times
    a stream, which a burst of new streams waits on (BENCHMARKS.md, "CPU per event")."""

    def __init__(self) -> None:
        self._table = HookTable()

    def trigger(self, manager: AddonManager, event: Hook) -> None:
        for group in self._table.groups(manager, event.name):
            try:
                with safecall():
                    invoke_addon_sync(group, event)
            except exceptions.AddonHalt:
                return


class RecordListener:
    """An addon that hands every record's JSON form to `listener`: the way in for what is not
    an addon (the live view, which reads workers' records as JSON too)."""

    def __init__(self, listener: Callable[[dict[str, Any]], None], name: str = "retimer_record_listener") -> None:
        self.name = name  # mitmproxy's addon name (one addon per name)
        self.listener = listener

    def retimer_record(self, record: StreamRecord) -> None:
        self.listener(record.to_json())
