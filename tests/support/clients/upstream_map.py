"""mitmproxy script for tests: the providers' REAL hosts reach tests/support/clients/fakeapi.py.

Load it in retimer with `--set scripts=tests/support/clients/upstream_map.py` and say where the fake API
listens with the environment of the retimer process:
  FAKEAPI_PORT=N        TLS port: connections to a mapped host on port 443 go to 127.0.0.1:N
  FAKEAPI_HTTP_PORT=M   plain port: connections to a mapped host on port 80 go to 127.0.0.1:M
  FAKEAPI_HOSTS=a,b     the mapped hosts (default: api.openai.com, api.anthropic.com,
                        generativelanguage.googleapis.com)
(or the options `fakeapi_port`, `fakeapi_http_port`, which win when non-zero: `--set
fakeapi_port=N` in mitmdump or retimer, after `--set scripts=...`).

Only the TCP destination changes (in `server_connect`, before mitmproxy opens the connection):
the flow's URL, the TLS SNI and the certificate check stay the real host's, so retimer's host
list, records and upstream verification see exactly what they would see in production. The fake
API's certificate names those hosts; retimer must trust its CA
(`--set ssl_verify_upstream_trusted_ca=<fakeapi ca.pem>`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from mitmproxy import ctx

DEFAULT_HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com")


def _hosts() -> set[str]:
    raw = os.environ.get("FAKEAPI_HOSTS", "")
    return {h.strip().lower() for h in raw.split(",") if h.strip()} or set(DEFAULT_HOSTS)


def load(loader: Any) -> None:
    loader.add_option("fakeapi_port", int, 0, "TLS port of tests/support/clients/fakeapi.py on 127.0.0.1")
    loader.add_option("fakeapi_http_port", int, 0, "plain-HTTP port of tests/support/clients/fakeapi.py")


def _port(name: str, env: str) -> int:
    opt = getattr(ctx.options, name, 0) or 0
    return int(opt) or int(os.environ.get(env, "0") or 0)


def server_connect(data: Any) -> None:
    server = data.server
    if not server.address:
        return
    host, port = server.address
    if str(host).lower() not in _hosts():
        return
    target = (_port("fakeapi_port", "FAKEAPI_PORT") if port != 80
              else _port("fakeapi_http_port", "FAKEAPI_HTTP_PORT"))
    if not target:
        logging.error("upstream_map: no FAKEAPI_PORT set; %s:%s is not mapped", host, port)
        return
    if server.sni is None:  # keep the real name for SNI and the certificate check
        server.sni = host
    server.address = ("127.0.0.1", target)
