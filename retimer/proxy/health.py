"""`GET http://retimer/health`: a health check a load balancer can send to the proxy itself.

A TCP check only shows that the kernel accepts connections on the port (it completes the
handshake from the listen backlog even when the proxy's loop is stuck); this answer comes from
the proxy's event loop, so a balancer's HTTP check (HAProxy `option httpchk`, Envoy
`http_health_check`, a Kubernetes `httpGet` probe) sees an instance that is really serving.
Answered in regular (forward proxy) mode, for the host `retimer` or the proxy's own address,
in absolute form (through the proxy) or origin form (`GET /health`, `Host: retimer`). In reverse
mode every path is the upstream's, so there the TCP check is the check (docs/deployment.md).
While the instance drains (the first SIGTERM or Ctrl-C, up to `retimer_shutdown_grace`) it still
serves the streams in flight and still accepts connections, but answers 503 `draining`, so a
balancer's HTTP check takes it out before it stops.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from retimer.proxy.pac import addressed_to_proxy

if TYPE_CHECKING:
    from mitmproxy import http

PATH = "/health"
HOST = "retimer"


class HealthCheck:
    """mitmproxy addon: answers the health check itself, before any other addon sees it.
    `draining` says whether the proxy is shutting down (then the answer is 503)."""

    def __init__(self, draining: Callable[[], bool] = lambda: False) -> None:
        self.draining = draining

    def request(self, flow: http.HTTPFlow) -> None:
        from mitmproxy import http
        from mitmproxy.proxy.mode_specs import RegularMode

        req = flow.request
        if flow.response is not None or req.method not in ("GET", "HEAD") or req.path.split("?")[0] != PATH:
            return
        sockname = flow.client_conn.sockname
        if not isinstance(flow.client_conn.proxy_mode, RegularMode) or not sockname:
            return
        if req.host.lower() != HOST and not addressed_to_proxy(req.host, req.port, sockname):
            return
        status, code = ("draining", 503) if self.draining() else ("ok", 200)
        body = json.dumps({"status": status}).encode() + b"\n"
        flow.response = http.Response.make(
            code, body, {"content-type": "application/json", "cache-control": "no-store"})
