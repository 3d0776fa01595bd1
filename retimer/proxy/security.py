"""Who may use the proxy: this machine only, unless remote access is asked for with a password.

An open retimer on the network is an open proxy that also holds a CA the user's browser trusts
and sees their API keys in flight. So `retimer` listens on 127.0.0.1; any other address (from
--listen-host, `--set listen_host=` or a mode spec such as `regular@0.0.0.0:8080`) needs
--allow-remote AND proxy authentication (mitmproxy's `proxyauth`, but not its accept-all "any").
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

from mitmproxy.proxy.mode_specs import ProxyMode

if TYPE_CHECKING:
    from mitmproxy.options import Options

__all__ = ["exposure_error", "exposure_warning", "is_loopback", "listen_hosts", "proxy_auth_error"]


def is_loopback(host: str) -> bool:
    """True when `host` is only reachable from this machine ("" means every interface)."""
    host = host.strip().strip("[]")
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False  # unknown: treat as exposed
    addresses = {str(info[4][0]) for info in infos}  # a str for IPv4 and IPv6 (typeshed: or an int)
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def listen_hosts(opts: Options) -> list[str]:
    """Every address the proxy will listen on, for the configured modes."""
    hosts: list[str] = []
    for spec in opts.mode:
        mode = ProxyMode.parse(spec)
        if mode.listen_port(opts.listen_port) is None:
            continue  # modes that bind no port (local redirect)
        hosts.append(mode.listen_host(opts.listen_host))
    return hosts


def _has_auth(proxyauth: str | None) -> bool:
    return bool(proxyauth) and proxyauth != "any"


def _exposed(opts: Options) -> str | None:
    for host in listen_hosts(opts):
        if not is_loopback(host):
            return host or "every interface (0.0.0.0)"
    return None


def exposure_error(opts: Options, allow_remote: bool) -> str | None:
    """One line saying why this configuration may not start, or None when it may."""
    host = _exposed(opts)
    if host is None:
        return None
    if not allow_remote:
        return (f"--listen-host {host} would let other machines use this proxy; "
                "add --allow-remote and --proxy-auth USER:PASS to allow it")
    if not _has_auth(opts.proxyauth):
        return (f"--allow-remote needs --proxy-auth USER:PASS: without it anyone who can "
                f"reach {host} can use this proxy")
    return None


def exposure_warning(opts: Options) -> str | None:
    """For mitmdump/mitmweb, which retimer does not start: say when the proxy is exposed."""
    host = _exposed(opts)
    if host is None:
        return None
    if _has_auth(opts.proxyauth):
        return f"listening on {host}: other machines can reach this proxy (proxy auth is on)"
    return (f"listening on {host} without proxy authentication: anyone who can reach it can "
            "use this proxy (set listen_host=127.0.0.1 or proxyauth)")


def proxy_auth_error(value: str) -> str | None:
    """--proxy-auth takes USER:PASS, both non-empty, in the form mitmproxy's single-user check
    reads: one colon, and no user name it would take for an htpasswd file or an LDAP URL."""
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        return "--proxy-auth: expected USER:PASS"
    if ":" in password:
        return "--proxy-auth: the password may not contain ':'"
    if user.startswith(("@", "ldap")):
        return "--proxy-auth: a user name may not start with '@' or 'ldap'"
    return None
