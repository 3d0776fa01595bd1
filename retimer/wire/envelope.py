"""The 5-byte length-prefixed envelope of gRPC, gRPC-Web and Connect streams, sans-io in the
style of h11.

One message on the wire:

    [u8 flags][u32 length, big-endian][length bytes of message]

Flag bits: 0x01 the message is compressed (with the stream's `grpc-encoding` or
`connect-content-encoding`); 0x02 Connect's end-of-stream message (a JSON object with the
error and trailers); 0x80 gRPC-Web's trailers (HTTP/1 header lines in the body). gRPC's own
status travels in HTTP/2 trailers, outside the body.

Envelopes keep their exact bytes, so one nobody rewrites goes out byte-identical. A length
over `MAX_MESSAGE` (gRPC's and Connect's common ceilings are 4 MiB to receive by default; this
allows far more) ends the framing: from that byte on, everything is handed back uninterpreted
(`passthrough()`), as the client would have got it without the proxy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from retimer.wire.errors import AdapterError

__all__ = ["COMPRESSED", "END_STREAM", "Envelope", "EnvelopeError", "EnvelopeFramer",
           "HEADER_LEN", "MAX_MESSAGE", "TRAILERS", "encode_envelope"]

HEADER_LEN = 5
COMPRESSED = 0x01
END_STREAM = 0x02  # Connect: the end-of-stream message
TRAILERS = 0x80  # gRPC-Web: the trailers, as a message
MAX_MESSAGE = 256 * 1024 * 1024
_HEADER = struct.Struct(">BI")


class EnvelopeError(AdapterError):
    """Bytes that cannot be an envelope (an impossible length)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    raw: bytes  # the exact bytes, header included
    flags: int

    @property
    def message(self) -> bytes:
        return self.raw[HEADER_LEN:]

    @property
    def compressed(self) -> bool:
        return bool(self.flags & COMPRESSED)


def encode_envelope(message: bytes, flags: int = 0) -> bytes:
    if len(message) > MAX_MESSAGE:
        raise EnvelopeError(f"a message of {len(message)} bytes is over {MAX_MESSAGE}")
    return _HEADER.pack(flags, len(message)) + message


class EnvelopeFramer:
    """Feed bytes, get the envelopes they complete; `failure` once the framing is lost."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._failed: str | None = None

    @property
    def failure(self) -> str | None:
        return self._failed

    def feed(self, data: bytes) -> list[Envelope]:
        self._buffer += data
        if self._failed is not None:
            return []
        out: list[Envelope] = []
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= HEADER_LEN:
            flags, length = _HEADER.unpack_from(buf, pos)
            if length > MAX_MESSAGE:
                self._failed = f"an envelope of {length} bytes (over {MAX_MESSAGE}): not this framing"
                break
            end = pos + HEADER_LEN + length
            if end > len(buf):
                break
            out.append(Envelope(bytes(buf[pos:end]), flags))
            pos = end
        del buf[:pos]
        return out

    def passthrough(self) -> bytes:
        """After a failure: the bytes from the bad envelope on, to pass as they came."""
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def rest(self) -> bytes:
        """At the end: an incomplete last envelope (or nothing), to pass as it came."""
        return self.passthrough()
