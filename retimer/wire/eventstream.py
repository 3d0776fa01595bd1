"""AWS event stream framing (`application/vnd.amazon.eventstream`), sans-io in the style of h11.

One message on the wire, all integers big-endian:

    [u32 total_len][u32 headers_len][u32 prelude_crc][headers][payload][u32 message_crc]

`prelude_crc` is the CRC32 (zlib) of the first 8 bytes, `message_crc` the CRC32 of everything
before it. A header is [u8 name_len][name][u8 type][value]; value types 0-9: bool true/false
(no value), int8, int16, int32, int64, byte array and string ([u16 len][bytes]), timestamp
(int64 ms since the epoch) and UUID (16 bytes).

Frames keep their exact bytes, so a frame nobody rewrites goes out byte-identical. Anything
that does not check out (a CRC mismatch, impossible lengths, an unreadable header, a
duplicate header name, which botocore rejects too) ends the framing for good: frame
boundaries are lost from there, so `failure` says why and every byte from the start of the
bad frame on is handed back uninterpreted by `passthrough()` (and `end()`), to be sent as it
came. The size limits are botocore's, so no frame a real client reads is refused here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from retimer.wire.errors import AdapterError

__all__ = [
    "EventStreamFramer",
    "Frame",
    "FramingError",
    "Header",
    "HeaderType",
    "HeaderValue",
    "encode_frame",
    "encode_headers",
    "parse_headers",
]

PRELUDE_LEN = 12
MIN_FRAME_LEN = PRELUDE_LEN + 4
MAX_HEADERS_LEN = 128 * 1024  # botocore's limits
MAX_PAYLOAD_LEN = 24 * 1024 * 1024

_U32X2 = struct.Struct(">II")
_U32X3 = struct.Struct(">III")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_INTS: dict[int, struct.Struct] = {
    2: struct.Struct(">b"),
    3: struct.Struct(">h"),
    4: struct.Struct(">i"),
    5: struct.Struct(">q"),
    8: struct.Struct(">q"),
}


class HeaderType(IntEnum):
    """Header value types of the AWS event stream encoding."""

    BOOL_TRUE = 0
    BOOL_FALSE = 1
    BYTE = 2
    SHORT = 3
    INTEGER = 4
    LONG = 5
    BYTE_ARRAY = 6
    STRING = 7
    TIMESTAMP = 8  # int64 milliseconds since the epoch
    UUID = 9  # 16 raw bytes


HeaderValue = bool | int | bytes | str


class FramingError(AdapterError):
    """Bytes that are not a valid event stream message (or a message too big to encode)."""


@dataclass(slots=True, frozen=True)
class Header:
    """One typed header: bool for types 0-1, int for 2-5 and 8, bytes for 6 and 9, str for 7."""

    name: str
    type: HeaderType
    value: HeaderValue


@dataclass(slots=True, frozen=True)
class Frame:
    """One complete, CRC-checked message as it arrived."""

    raw: bytes
    headers: tuple[Header, ...]
    payload: bytes

    def header(self, name: str) -> HeaderValue | None:
        """The value of the header called `name`, or None."""
        for h in self.headers:
            if h.name == name:
                return h.value
        return None

    @property
    def header_bytes(self) -> bytes:
        """The encoded header block exactly as it arrived."""
        (headers_len,) = _U32.unpack_from(self.raw, 4)
        return self.raw[PRELUDE_LEN : PRELUDE_LEN + headers_len]

    def with_payload(self, payload: bytes) -> bytes:
        """A new message with this frame's header bytes (unchanged) and `payload`."""
        return encode_frame(self.header_bytes, payload)


def encode_frame(headers: bytes | Sequence[Header], payload: bytes) -> bytes:
    """Encode one message with valid prelude and message CRCs.

    `headers` is either an encoded header block (reused byte for byte) or headers to encode.
    """
    block = headers if isinstance(headers, bytes) else encode_headers(headers)
    if len(block) > MAX_HEADERS_LEN or len(payload) > MAX_PAYLOAD_LEN:
        raise FramingError("headers or payload too long for one message")
    prelude = _U32X2.pack(MIN_FRAME_LEN + len(block) + len(payload), len(block))
    prelude += _U32.pack(zlib.crc32(prelude))
    message = prelude + block + payload
    return message + _U32.pack(zlib.crc32(message))


def encode_headers(headers: Sequence[Header]) -> bytes:
    """Encode a header block; raises FramingError for values that do not fit their type."""
    out = bytearray()
    for h in headers:
        name = h.name.encode("utf-8")
        if len(name) > 255:
            raise FramingError(f"header name too long: {h.name[:40]!r}")
        out += bytes((len(name),)) + name + bytes((int(h.type),))
        out += _encode_value(h)
    return bytes(out)


def _encode_value(h: Header) -> bytes:
    t, v = h.type, h.value
    if t in (HeaderType.BOOL_TRUE, HeaderType.BOOL_FALSE):
        if v is not (t == HeaderType.BOOL_TRUE):
            raise FramingError(f"header {h.name!r}: type {t.name} needs value {t == HeaderType.BOOL_TRUE}")
        return b""
    if t in _INTS:
        if type(v) is not int:
            raise FramingError(f"header {h.name!r}: type {t.name} needs an int")
        try:
            return _INTS[t].pack(v)
        except struct.error as e:
            raise FramingError(f"header {h.name!r}: {e}") from e
    if t == HeaderType.UUID:
        if not isinstance(v, bytes) or len(v) != 16:
            raise FramingError(f"header {h.name!r}: a UUID is 16 bytes")
        return v
    if t == HeaderType.STRING and isinstance(v, str):
        data = v.encode("utf-8")
    elif t == HeaderType.BYTE_ARRAY and isinstance(v, bytes):
        data = v
    else:
        raise FramingError(f"header {h.name!r}: value does not match type {t.name}")
    if len(data) > 0xFFFF:
        raise FramingError(f"header {h.name!r}: value longer than 65535 bytes")
    return _U16.pack(len(data)) + data


def parse_headers(block: bytes) -> tuple[Header, ...]:
    """Decode a header block; raises FramingError where botocore's parser would fail."""
    out: list[Header] = []
    seen: set[str] = set()
    i, n = 0, len(block)
    try:
        while i < n:
            name_len = block[i]
            name = block[i + 1 : i + 1 + name_len]
            i += 1 + name_len
            if len(name) != name_len or i >= n:
                raise FramingError("header name runs past the header block")
            t = HeaderType(block[i])
            i += 1
            value: HeaderValue
            if t in (HeaderType.BOOL_TRUE, HeaderType.BOOL_FALSE):
                value = t == HeaderType.BOOL_TRUE
            elif t in _INTS:
                (value,) = _INTS[t].unpack_from(block, i)
                i += _INTS[t].size
            elif t == HeaderType.UUID:
                value = block[i : i + 16]
                i += 16
            else:
                (length,) = _U16.unpack_from(block, i)
                data = block[i + 2 : i + 2 + length]
                i += 2 + length
                value = data.decode("utf-8") if t == HeaderType.STRING else data
            if i > n:
                raise FramingError("header value runs past the header block")
            text = name.decode("utf-8")
            if text in seen:
                raise FramingError(f"duplicate header {text!r}")
            seen.add(text)
            out.append(Header(text, t, value))
    except FramingError:
        raise
    except (struct.error, ValueError) as e:  # unknown type, short value, bad UTF-8
        raise FramingError(f"bad header block: {e}") from e
    return tuple(out)


class EventStreamFramer:
    """Feed bytes, get complete checked frames; after a malformed frame, pass bytes through."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.failure: str | None = None  # why framing stopped; None while it works

    def feed(self, data: bytes) -> list[Frame]:
        """Frames completed by `data`, in order. Once failed, bytes go to `passthrough()`."""
        self._buf += data
        if self.failure is not None:
            return []
        frames: list[Frame] = []
        buf, pos = self._buf, 0
        while len(buf) - pos >= PRELUDE_LEN:
            try:
                total = self._check_prelude(buf, pos)
                if len(buf) - pos < total:
                    break
                frames.append(self._frame(bytes(buf[pos : pos + total])))
            except FramingError as e:
                self.failure = str(e)
                break
            pos += total
        del buf[:pos]
        return frames

    def passthrough(self) -> bytes:
        """Bytes to send as they came, because framing has failed (empty while it works)."""
        if self.failure is None or not self._buf:
            return b""
        out = bytes(self._buf)
        self._buf.clear()
        return out

    def end(self) -> bytes:
        """The stream ended: the bytes no frame covers (a truncated frame, or pass-through)."""
        out = bytes(self._buf)
        self._buf.clear()
        if out and self.failure is None:
            self.failure = f"stream ended inside a frame ({len(out)} bytes left)"
        return out

    @staticmethod
    def _check_prelude(buf: bytearray, pos: int) -> int:
        """The frame's total length, once its prelude has been checked."""
        total: int
        total, headers_len, crc = _U32X3.unpack_from(buf, pos)
        if zlib.crc32(buf[pos : pos + 8]) != crc:
            raise FramingError("prelude CRC mismatch")
        if total < MIN_FRAME_LEN or headers_len > total - MIN_FRAME_LEN:
            raise FramingError(f"impossible lengths: total {total}, headers {headers_len}")
        if headers_len > MAX_HEADERS_LEN or total - MIN_FRAME_LEN - headers_len > MAX_PAYLOAD_LEN:
            raise FramingError(f"frame too large: total {total}, headers {headers_len}")
        return total

    @staticmethod
    def _frame(raw: bytes) -> Frame:
        """Check the message CRC and decode the headers."""
        (crc,) = _U32.unpack_from(raw, len(raw) - 4)
        if zlib.crc32(raw[:-4]) != crc:
            raise FramingError("message CRC mismatch")
        (headers_len,) = _U32.unpack_from(raw, 4)
        headers = parse_headers(raw[PRELUDE_LEN : PRELUDE_LEN + headers_len])
        return Frame(raw, headers, raw[PRELUDE_LEN + headers_len : -4])
