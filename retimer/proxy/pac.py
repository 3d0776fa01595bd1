"""A proxy auto-config (PAC) file that sends only LLM hosts through retimer, the rest DIRECT.

A browser pointed at this file keeps every other site off the proxy entirely (no tunnel, no
added hop), which is closer to how it normally runs than a global proxy setting.
`build_pac` is pure text building; `PacServer` is the small mitmproxy addon that serves it
(mitmproxy is imported only when it runs, so this module loads without it).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from retimer.wire.hosts import LLM_HOST_PATTERNS, LLM_HOSTS, MIXED_HOSTS, allow_hosts

if TYPE_CHECKING:
    from mitmproxy import http

CONTENT_TYPE = "application/x-ns-proxy-autoconfig"
PATH = "/proxy.pac"
SPKI_HEADER = "x-retimer-ca-spki"

# scheme and port of the URL a PAC function gets (the host comes separately)
_URL_PARTS_JS = (
    r"    var m = /^([a-z][a-z0-9+.-]*):\/\/(?:[^\/@]*@)?(\[[^\]]*\]|[^:\/?#]*)(?::(\d+))?/i"
    ".exec(url);"
)

# Python-only regex syntax that a JavaScript RegExp would read differently or reject.
_NOT_JS = re.compile(r"\(\?P|\(\?#|\(\?[aiLmsux-]+[):]|\\[AZzG]|\(\?<[=!]|[*+?}][+]|\\[pP]\{")


def js_regex(pattern: str) -> str | None:
    """The pattern as a JavaScript `new RegExp(...)` expression, or None if not expressible."""
    flags = ""
    if pattern.startswith("(?i)"):  # a leading case-insensitive flag is JavaScript's "i"
        pattern, flags = pattern[4:], "i"
    if _NOT_JS.search(pattern):
        return None
    try:
        re.compile(pattern)
    except re.error:
        return None
    return f"new RegExp({json.dumps(pattern)}, {json.dumps(flags)})"


def build_pac(
    proxy: str,
    patterns: Sequence[str] = (),
    hosts: Iterable[str] = (*LLM_HOSTS, *MIXED_HOSTS),
    host_regexes: Sequence[str] = LLM_HOST_PATTERNS,
) -> str:
    """PAC JavaScript: `hosts` (and subdomains), hosts matching `host_regexes` in full, and the
    --intercept `patterns` go via `proxy` ("host:port"); everything else DIRECT.

    `patterns` are matched against "host:port" as mitmproxy's allow_hosts does; those that use
    Python-only syntax are left out and named in a comment so the gap is visible.
    """
    regexes: list[str] = []
    skipped: list[str] = []
    for p in [*(rf"^(?:{h}):\d+$" for h in host_regexes), *patterns]:
        expr = js_regex(p)
        if expr is None:
            skipped.append(p)
        else:
            regexes.append(expr)
    lines = [
        "// retimer: LLM hosts through the proxy, everything else DIRECT.",
        *(f"// --intercept {json.dumps(p)} is not expressible in JavaScript: left out" for p in skipped),
        f"var RETIMER = {json.dumps('PROXY ' + proxy)};",
        f"var HOSTS = {json.dumps(list(hosts))};",
        f"var PATTERNS = [{', '.join(regexes)}];",
        "function FindProxyForURL(url, host) {",
        "  host = host.toLowerCase();",
        "  if (host.charAt(host.length - 1) === '.') host = host.substring(0, host.length - 1);",
        "  for (var i = 0; i < HOSTS.length; i++) {",
        "    if (host === HOSTS[i] || dnsDomainIs(host, '.' + HOSTS[i])) return RETIMER;",
        "  }",
        "  if (PATTERNS.length) {  // matched against host:port, as mitmproxy's allow_hosts",
        _URL_PARTS_JS,
        "    var scheme = m ? m[1].toLowerCase() : '';",
        "    var port = m && m[3] ? m[3] : (scheme === 'http' || scheme === 'ws' ? '80' : '443');",
        "    for (var j = 0; j < PATTERNS.length; j++) {",
        "      if (PATTERNS[j].test(host + ':' + port)) return RETIMER;",
        "    }",
        "  }",
        "  return 'DIRECT';",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def addressed_to_proxy(host: str, port: int, sockname: tuple[str, int] | tuple[str, int, int, int]) -> bool:
    """Whether host:port names the proxy itself, given the local address the client reached."""
    local_ip, local_port = str(sockname[0]), int(sockname[1])
    if port != local_port:
        return False
    host = host.lower().strip("[]")
    return host == local_ip or (host == "localhost" and _is_loopback(local_ip))


class PacServer:
    """Answers `GET http://<proxy>/proxy.pac` itself, in regular (forward proxy) mode.

    Such a request arrives as an ordinary HTTP flow whose host:port is the proxy's own
    address: absolute-form from a client using the proxy, origin-form (Host header) from a
    browser fetching its auto-config URL directly. Left alone, mitmproxy would refuse it as a
    request to itself.
    """

    def request(self, flow: http.HTTPFlow) -> None:
        from mitmproxy import ctx, http
        from mitmproxy.proxy.mode_specs import RegularMode

        req = flow.request
        if flow.response is not None or req.method != "GET" or req.path.split("?")[0] != PATH:
            return
        sockname = flow.client_conn.sockname
        if not isinstance(flow.client_conn.proxy_mode, RegularMode) or not sockname:
            return
        if not addressed_to_proxy(req.host, req.port, sockname):
            return
        ip = str(sockname[0])
        proxy = f"[{ip}]:{sockname[1]}" if ":" in ip else f"{ip}:{sockname[1]}"
        default = set(allow_hosts([]))  # the built-in LLM hosts: build_pac has them already
        extra = [p for p in ctx.options.allow_hosts if p not in default]
        headers = {"content-type": CONTENT_TYPE, "cache-control": "no-cache"}
        spki = _ca_spki(ctx.options.confdir)
        if spki:
            headers[SPKI_HEADER] = spki  # lets `retimer run` check it shares this proxy's CA
        flow.response = http.Response.make(200, build_pac(proxy, extra), headers)


def _ca_spki(confdir: str) -> str:
    """The SPKI hash of the CA in confdir ("" if unreadable); the CA cert is public anyway."""
    from pathlib import Path

    from retimer.proxy.certs import CA_FILE, spki_hash

    try:
        return spki_hash(Path(confdir).expanduser() / CA_FILE)
    except (OSError, ValueError):
        return ""
