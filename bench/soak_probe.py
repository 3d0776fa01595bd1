"""mitmproxy script for the soak (`--set scripts=bench/soak_probe.py`): answers
`GET http://retimer-soak.probe/` itself with what /proc cannot show from outside the proxy: its
asyncio task count and its live Python objects. It sees no other request and changes nothing;
retimer's own addon is untouched.
"""

from __future__ import annotations

import asyncio
import gc
import json

from mitmproxy import http

PROBE_HOST = "retimer-soak.probe"


class SoakProbe:
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != PROBE_HOST:
            return
        body = {"tasks": len(asyncio.all_tasks()), "objects": len(gc.get_objects())}
        flow.response = http.Response.make(200, json.dumps(body),
                                           {"content-type": "application/json"})


addons = [SoakProbe()]
