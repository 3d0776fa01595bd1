"""Run by `retimer run` in tests: an unmodified openai-SDK program plus TLS probes.

argv: LLM_BASE (https://llm.test:PORT) OTHER_BASE (https://other.test:PORT) EXIT_CODE
Prints one JSON object: the streamed pieces, and what a client sees of each host's certificate.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import sys
from urllib.parse import urlsplit

import httpx
import openai


def tunnel(url: str) -> socket.socket:
    """A CONNECT tunnel to url's host through the proxy named by HTTPS_PROXY."""
    proxy, target = urlsplit(os.environ["HTTPS_PROXY"]), urlsplit(url)
    sock = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
    sock.sendall(f"CONNECT {target.netloc} HTTP/1.1\r\nHost: {target.netloc}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        byte = sock.recv(1)  # one byte at a time: the TLS handshake must stay unread
        if not byte:
            raise ConnectionError(f"proxy closed the tunnel: {head!r}")
        head += byte
    if head.split()[1] != b"200":
        raise ConnectionError(head.decode(errors="replace"))
    return sock


def peer_cert(url: str, verify: bool) -> str:
    """sha256 of the certificate the client is shown, or the verification error."""
    ctx = ssl.create_default_context()  # SSL_CERT_FILE: the bundle retimer run set
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with ctx.wrap_socket(tunnel(url), server_hostname=urlsplit(url).hostname) as tls:
            return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()
    except ssl.SSLCertVerificationError as e:
        return f"verify-error: {e.verify_message}"


def main() -> None:
    llm, other, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = openai.OpenAI(base_url=llm + "/v1", api_key="sk-run-secret")  # proxy and CA from env
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    try:
        httpx.get(other + "/v1/models")
        other_httpx = "ok"
    except httpx.ConnectError as e:
        other_httpx = str(e)
    print(json.dumps({
        "pieces": pieces,
        "other_httpx": other_httpx,
        "other_verified": peer_cert(other, verify=True),
        "other_cert": peer_cert(other, verify=False),
        "llm_cert": peer_cert(llm, verify=False),
    }))
    sys.exit(code)


if __name__ == "__main__":
    main()
