"""mitmproxy script for the soak (`--set scripts=bench/soak_probe.py`): answers
`GET http://retimer-soak.probe/` itself with what /proc cannot show from outside the proxy: its
asyncio task count and its live Python objects. It sees no other request and changes nothing
else; retimer's own addon is untouched.

Objects are counted after a full garbage collection, so cyclic garbage not yet collected does
not look like growth (retimer freezes its start-up objects with `gc.freeze()`, so the count
and the collection cover only what was created since). `?types=1` adds the most common types.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections import Counter

from mitmproxy import http

PROBE_HOST = "retimer-soak.probe"


class SoakProbe:
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != PROBE_HOST:
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


addons = [SoakProbe()]
