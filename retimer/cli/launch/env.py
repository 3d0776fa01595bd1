"""The environment that points a program at retimer: proxy variables and the CA, per runtime.

Pure (no I/O) so `retimer run` and `retimer env` print and apply exactly the same thing, and
tests can check it without starting anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

LOOPBACK = "localhost,127.0.0.1,::1"  # --no-local: loopback is reached directly
SHELLS = ("sh", "fish", "powershell")


def proxy_url(host: str, port: int, auth: str = "") -> str:
    """The URL clients put in HTTPS_PROXY; a wildcard listen address is reached via loopback.

    `auth` is --proxy-auth's USER:PASS: it goes in the URL's userinfo (percent-encoded, so a
    password with `@`, `:` or `/` survives), which is how curl, Python, Go and Node read
    proxy credentials from the environment.
    """
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    userinfo = ""
    if auth:
        user, _, password = auth.partition(":")
        userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    return f"http://{userinfo}{host}:{port}"


def no_proxy(proxy: str, local: bool = True) -> str:
    """NO_PROXY for a child: retimer's own address only, or (`local` off) all of loopback.

    By default loopback goes through retimer too, so a local model server (Ollama, llama.cpp,
    LM Studio, vLLM, TGI on any port) is re-timed; retimer touches only requests shaped like an
    LLM API call, so the command's other loopback traffic (dev servers, IDE bridges, MCP
    servers) passes through unpaced. Entries with a port are read by Python, Go and Node;
    runtimes that ignore them send retimer's own address to retimer, which answers it itself.
    """
    if not local:
        return LOOPBACK
    where = urlsplit(proxy)
    port = where.port
    names = {where.hostname or "127.0.0.1"}
    if names & {"127.0.0.1", "localhost"}:
        names |= {"127.0.0.1", "localhost"}
    return ",".join(f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in sorted(names))


TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")


def launch_env(proxy: str, bundle: str, ca: str, *, local: bool = True,
               trust: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables for a child process: every common runtime's proxy and trust settings.

    Runtimes that replace their trust store (Python's ssl, requests, curl) get the bundle of
    system roots plus retimer's CA, so hosts retimer tunnels untouched still validate; Node
    adds NODE_EXTRA_CA_CERTS to its own roots, so it gets the CA alone. `trust` replaces any of
    those four (TRUST_VARIABLES) with a file of the user's own CAs plus retimer's, when the
    user's environment already set it (retimer.proxy.certs.merged_bundle): never dropped.
    Loopback goes through retimer unless `local` is off (see `no_proxy`).
    """
    bypass = no_proxy(proxy, local)
    return {
        "HTTPS_PROXY": proxy,
        "https_proxy": proxy,
        "HTTP_PROXY": proxy,
        "http_proxy": proxy,
        "NO_PROXY": bypass,
        "no_proxy": bypass,
        "SSL_CERT_FILE": bundle,
        "REQUESTS_CA_BUNDLE": bundle,
        "CURL_CA_BUNDLE": bundle,
        "NODE_EXTRA_CA_CERTS": ca,
        "NODE_USE_ENV_PROXY": "1",
        **{k: v for k, v in (trust or {}).items() if k in TRUST_VARIABLES},
    }


def child_env(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """`base` (the parent's environment) with `extra` applied; ours win over inherited values."""
    return {**base, **extra}


def shell_lines(env: Mapping[str, str], shell: str = "sh") -> list[str]:
    """Lines that set `env` in a shell: sh/bash/zsh `export`, fish `set -gx`, PowerShell `$env:`."""
    if shell == "sh":
        return [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    if shell == "fish":
        return [f"set -gx {k} {_fish_quote(v)}" for k, v in env.items()]
    if shell == "powershell":
        return [f"$env:{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in env.items()]
    raise ValueError(f"unknown shell {shell!r} (expected one of {', '.join(SHELLS)})")


def _fish_quote(value: str) -> str:
    """fish single quotes: only backslash and the quote itself are special inside."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
