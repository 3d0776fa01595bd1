"""mitmproxy script for the soak (`--set scripts=bench/soak_probe.py`): answers
`GET http://retimer-soak.probe/` itself with what /proc cannot show from outside the proxy: its
asyncio task count and its live Python objects. It sees no other request and changes nothing
else; retimer's own addon is untouched. `?active=1` describes the HTTP streams retimer has in
flight (for a stream the client found slow: what the pacer holds and when it is due).

Objects are counted after a full garbage collection, so cyclic garbage not yet collected does
not look like growth (retimer freezes its start-up objects with `gc.freeze()`, so the count
and the collection cover only what was created since). `?types=1` adds the most common types.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections import Counter
from typing import Any

from mitmproxy import ctx, http

PROBE_HOST = "retimer-soak.probe"


class SoakProbe:
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != PROBE_HOST:
            return
        if flow.request.query.get("active"):
            flow.response = http.Response.make(200, json.dumps(active_streams()),
                                               {"content-type": "application/json"})
            return
        collected = gc.collect()
        objects = gc.get_objects()
        body: dict[str, object] = {"tasks": len(asyncio.all_tasks()), "objects": len(objects),
                                   "collected": collected}
        if flow.request.query.get("types"):
            body["types"] = dict(Counter(type(o).__qualname__ for o in objects).most_common(60))
        del objects
        flow.response = http.Response.make(200, json.dumps(body),
                                           {"content-type": "application/json"})


def active_streams() -> list[dict[str, Any]]:
    """Each in-flight HTTP stream: its request's x-fake-* plan and the pacer's state."""
    retimer = ctx.master.addons.get("retimer")
    now = time.monotonic()
    out = []
    bridge = {d.flow.id: d for d in retimer.bridge.drivers()} if retimer else {}
    for flow, pacer in list(retimer.active.values()) if retimer else []:
        paced = bridge.get(flow.id)
        due = pacer.next_due()
        out.append({
            "url": flow.request.pretty_url,
            "age_s": round(time.time() - flow.request.timestamp_start, 3),
            "plan": {k: v for k, v in flow.request.headers.items() if k.lower().startswith("x-")},
            "response_headers": dict(flow.response.headers) if flow.response else None,
            "finished": pacer.ended, "holding": pacer.holding, "done": pacer.done,
            "queue": pacer.pending, "open": pacer.open_pieces, "unparsed": pacer.unparsed_bytes,
            "next_due_in_s": None if due is None else round(due - now, 3),
            "fallback": pacer.fallback, "keepalives": pacer.keepalives,
            "tokens": {"upstream": pacer.stats.upstream.tokens,
                       "emitted": pacer.stats.emitted_side.tokens},
            "bridge": None if paced is None else {
                "held_end": getattr(paced, "held_end", None) is not None,
                "wakeups": len(getattr(paced, "wakeups", ())),
                "since_send_s": round(now - paced.playout.last_send, 3), "finished": paced.finished},
        })
    return out


addons = [SoakProbe()]
