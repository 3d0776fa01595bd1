"""Content-Encoding, decoded incrementally as the body arrives (sans-io).

A compressed stream cannot be split into timed events, so the body is decoded before it is
parsed and the re-timed response goes to the client without Content-Encoding. As the header is
gone, the decoder must read everything a client would have: every gzip member and zstd frame
(servers flush a stream as a series of them), and `deflate` with or without its zlib wrapper
(servers send both, and clients accept both). Corrupt or truncated input raises
BodyDecodingError (a ValueError): the caller ends the stream as broken rather than hand the
client bytes it can no longer decode. It is no AdapterError: the stream cannot pass through
unchanged, its Content-Encoding header is already gone.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

import brotli

try:  # Python >= 3.14
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # mitmproxy depends on the backport below 3.14
    from backports import zstd

__all__ = ["GZIP_MAGIC", "BodyDecodingError", "Decoder", "Step", "decoder_for"]

GZIP_MAGIC = b"\x1f\x8b"


class BodyDecodingError(ValueError):
    """A body that is corrupt or cut short for its Content-Encoding."""


class Step(Protocol):
    def feed(self, data: bytes) -> bytes: ...

    def end(self) -> None:
        """The body is over: raise BodyDecodingError when it stopped inside a member or frame."""


class _Members:
    """A sequence of gzip members or zstd frames: a new decompressor after each one ends."""

    def __init__(self, new: Any, magic: bytes | None = None) -> None:
        self._new = new
        self._magic = magic
        self._d = new()
        self._between = False  # a member ended and no byte of the next has come yet
        self._pending = b""  # the first bytes of a next member, too few to check its magic
        self._fed = False

    def feed(self, data: bytes) -> bytes:
        self._fed = self._fed or bool(data)
        out = []
        data = self._pending + data
        self._pending = b""
        while data:
            if self._between:
                if self._magic is not None:
                    data = data.lstrip(b"\0")  # zero padding between or after members
                    if not data:
                        break
                    if len(data) < len(self._magic) and self._magic.startswith(data):
                        self._pending = data
                        break
                    if not data.startswith(self._magic):
                        raise BodyDecodingError(f"{len(data)} bytes of trailing garbage after the last member")
                self._d = self._new()
                self._between = False
            out.append(self._d.decompress(data))
            if not self._d.eof:
                break
            data = self._d.unused_data
            self._between = True
        return b"".join(out)

    def end(self) -> None:
        if self._fed and (self._pending or not (self._between or self._d.eof)):
            raise BodyDecodingError("the body ends inside a compressed member")


class _Deflate:
    """`deflate` as RFC 9110 means it (zlib-wrapped), or raw deflate as many servers send it:
    told apart by the zlib header's check bits, as browsers and curl do."""

    def __init__(self) -> None:
        self._d: Any = None
        self._head = b""

    def feed(self, data: bytes) -> bytes:
        if self._d is None:
            self._head += data
            if len(self._head) < 2:
                return b""
            cmf, flg = self._head[0], self._head[1]
            wrapped = cmf & 0x0F == 8 and (cmf << 8 | flg) % 31 == 0
            self._d = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self._head = self._head, b""
        out = self._d.decompress(data)
        if self._d.eof and self._d.unused_data.strip(b"\0"):
            raise BodyDecodingError("trailing garbage after the deflate stream")
        return out

    def end(self) -> None:
        if (self._d is not None and not self._d.eof) or self._head:
            raise BodyDecodingError("the body ends inside the deflate stream")


class _Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def feed(self, data: bytes) -> bytes:
        return self._d.process(data)

    def end(self) -> None:
        if not self._d.is_finished():
            raise BodyDecodingError("the body ends inside the brotli stream")


def _step(coding: str) -> Step | None:
    if coding in ("gzip", "x-gzip"):
        return _Members(lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), GZIP_MAGIC)
    if coding == "deflate":
        return _Deflate()
    if coding == "br":
        return _Brotli()
    if coding == "zstd":
        return _Members(zstd.ZstdDecompressor)
    return None


class Decoder:
    """Undoes a Content-Encoding chain chunk by chunk; raises BodyDecodingError on corrupt input."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = steps
        self._fed = False  # an empty body is complete whatever its Content-Encoding says

    def decode(self, data: bytes) -> bytes:
        self._fed = self._fed or bool(data)
        try:
            for step in self._steps:
                data = step.feed(data)
        except Exception as e:  # zlib.error, brotli.error, ZstdError: all mean corrupt input
            raise BodyDecodingError(f"cannot decode the response body: {e}") from e
        return data

    def end(self) -> None:
        """The body is complete: raise BodyDecodingError when it was cut inside compressed data."""
        if self._fed:
            for step in self._steps:
                step.end()


def decoder_for(content_encoding: str) -> Decoder | None:
    """A decoder for the header's codings, a no-op one for identity, None when unknown."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    steps: list[Step] = []
    for coding in reversed([c for c in codings if c != "identity"]):  # last applied first
        step = _step(coding)
        if step is None:
            return None
        steps.append(step)
    return Decoder(steps)
