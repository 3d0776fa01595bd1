"""gRPC over HTTP/2 in cassettes: a loopback HTTP/2 server (TLS, ALPN h2) that answers a
replayed call with its recorded response, body and trailers.

A gRPC call's status travels in HTTP/2 trailers, and mitmproxy speaks HTTP/2 to an upstream
only over TLS with ALPN, so the HTTP/1.1 replay server the cache and the other calls use
cannot answer one. This server makes its own certificate for 127.0.0.1 at start (a key that
never leaves the process); the proxy's connection to it trusts exactly that certificate
(`pinned_context`, installed by the Cassettes addon's `tls_start_server`), whatever the
user's upstream verification options say. The flow is pointed here as the cache's hits are
(`Redirect`, with https), and put back as the client sent it on the server's reading it, so
the Retimer addon paces the answer like an upstream's and forwards its trailers after it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mitmproxy import http
from OpenSSL import SSL, crypto

from retimer.cache.entry import CacheEntry
from retimer.proxy.loopback import LoopbackReplay, Redirect

__all__ = ["H2ReplayServer"]

logger = logging.getLogger("retimer")

H2_TOKEN_KEY = "retimer_cassette_h2_token"  # flow.metadata: this server's token for the flow


@dataclass(slots=True)
class H2Hit:
    redirect: Redirect
    entry: CacheEntry
    trailers: list[tuple[str, str]]


@dataclass
class _Answer:
    """A response being written on one stream: what of its body is left, then its trailers."""

    body: memoryview
    trailers: list[tuple[str, str]]


@dataclass
class _Connection:
    h2: h2.connection.H2Connection
    requests: dict[int, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    answers: dict[int, _Answer] = field(default_factory=dict)


class H2ReplayServer(LoopbackReplay[H2Hit]):
    """HTTP/2 over TLS on 127.0.0.1 (random port) answering each expected token with its
    recorded response and trailers."""

    token_key = H2_TOKEN_KEY

    def __init__(self) -> None:
        super().__init__()
        self.served = 0
        self._cert_der = b""

    # -- lifecycle ---------------------------------------------------------------------------
    def tls_context(self) -> ssl.SSLContext:
        """A certificate of its own, made at each start; ALPN h2."""
        folder = Path(tempfile.mkdtemp(prefix="retimer-h2-"))  # owner-only (0700)
        try:
            cert, key = _self_signed()
            self._cert_der = cert.public_bytes(serialization.Encoding.DER)
            (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            (folder / "key.pem").write_bytes(key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
            context.set_alpn_protocols(["h2"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # loaded: the key stays in memory only
        return context

    def is_me(self, address: tuple[str, int] | None) -> bool:
        """Whether a server connection's address is this server's."""
        return self.running and address is not None and \
            (address[0], address[1]) == ("127.0.0.1", self.port)

    def pinned_context(self, alpn: list[bytes]) -> SSL.Connection:
        """The proxy's side of a connection to this server: TLS that accepts this server's own
        certificate and no other, offering `alpn`."""
        context = SSL.Context(SSL.TLS_CLIENT_METHOD)
        mine = self._cert_der

        def verify(_c: SSL.Connection, cert: crypto.X509, _errno: int, depth: int, _ok: int) -> bool:
            der = cert.to_cryptography().public_bytes(serialization.Encoding.DER)
            return depth == 0 and der == mine

        context.set_verify(SSL.VERIFY_PEER, verify)
        conn = SSL.Connection(context)
        if alpn:
            conn.set_alpn_protos(alpn)
        conn.set_connect_state()
        return conn

    # -- the flows ---------------------------------------------------------------------------
    def serve(self, flow: http.HTTPFlow, entry: CacheEntry, trailers: list[tuple[str, str]]) -> None:
        """Point `flow` at this server, which answers it with `entry` and `trailers`."""
        redirect = self.point(flow, scheme=b"https")
        self.pending[redirect.token] = H2Hit(redirect, entry, trailers)

    # -- HTTP/2 ------------------------------------------------------------------------------
    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)))
        conn.h2.initiate_connection()
        try:
            writer.write(conn.h2.data_to_send())
            while data := await reader.read(65536):
                for event in conn.h2.receive_data(data):
                    self._event(conn, event)
                self._flush(conn)
                writer.write(conn.h2.data_to_send())
                await writer.drain()
        except (h2.exceptions.ProtocolError, ConnectionError, ssl.SSLError) as e:
            logger.debug(f"retimer: cassette HTTP/2 replay: {e!r}")
            writer.transport.abort()

    def _event(self, conn: _Connection, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived) and event.stream_id is not None:
            conn.requests[event.stream_id] = list(event.headers or [])
        elif isinstance(event, h2.events.DataReceived) and event.stream_id is not None:
            conn.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id is not None:
            self._answer(conn, event.stream_id, conn.requests.pop(event.stream_id, []))
        elif isinstance(event, h2.events.StreamReset) and event.stream_id is not None:
            conn.answers.pop(event.stream_id, None)

    def _answer(self, conn: _Connection, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        hit = self.claim(headers)
        if hit is None:
            conn.h2.send_headers(stream_id, [(":status", "404"), ("content-length", "0")],
                                 end_stream=True)
            return
        entry = hit.entry
        conn.h2.send_headers(stream_id, [(":status", str(entry.status)),
                                         *((k.lower(), v) for k, v in entry.headers)])
        conn.answers[stream_id] = _Answer(memoryview(entry.body), hit.trailers)
        self.served += 1

    def _flush(self, conn: _Connection) -> None:
        """Write what flow control allows of each answer; its trailers once its body is out."""
        for stream_id, answer in list(conn.answers.items()):
            while answer.body:
                size = min(conn.h2.local_flow_control_window(stream_id),
                           conn.h2.max_outbound_frame_size, len(answer.body))
                if size <= 0:
                    break
                conn.h2.send_data(stream_id, answer.body[:size].tobytes())
                answer.body = answer.body[size:]
            if not answer.body:
                if answer.trailers:
                    conn.h2.send_headers(stream_id, [(k.lower(), v) for k, v in answer.trailers],
                                         end_stream=True)
                else:
                    conn.h2.end_stream(stream_id)
                del conn.answers[stream_id]


def _self_signed() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for 127.0.0.1, valid a day either side of now, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "retimer cassette replay")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key
