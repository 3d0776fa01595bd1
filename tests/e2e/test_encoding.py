"""Content-Encoding decoding (sans-io): every coding as servers really stream it, cut anywhere.

The re-timed body goes to the client without its Content-Encoding header, so the decoder must
read all a client would (every gzip member and zstd frame, raw or wrapped deflate) and must
say when the body is corrupt or cut short instead of passing on bytes nobody can decode.
"""

from __future__ import annotations

import gzip
import random
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.wire.encoding import decoder_for
from retimer.wire.tokenizer import split_tokens
from tests.support.proxy import RetimerProxy
from tests.support.sse_client import read_until_error, sse_text
from tests.support.stream_bodies import BodyEncoder
from tests.support.upstream import FakeLLM

GOOD = ["gzip", "gzip-members", "deflate", "deflate-raw", "br", "zstd-frames"]


def encode(kind: str, pieces: list[bytes]) -> tuple[str, bytes]:
    enc = BodyEncoder(kind, len(pieces))
    return enc.header, b"".join(enc.encode(p, i) for i, p in enumerate(pieces))


def cut(data: bytes, rnd: random.Random) -> list[bytes]:
    """`data` in random network reads, down to single bytes."""
    out, i = [], 0
    while i < len(data):
        n = rnd.choice([1, 2, 3, rnd.randint(1, 64), rnd.randint(1, 4096)])
        out.append(data[i:i + n])
        i += n
    return out


def decode(header: str, reads: list[bytes]) -> bytes:
    decoder = decoder_for(header)
    assert decoder is not None
    out = b"".join(decoder.decode(r) for r in reads)
    decoder.end()
    return out


@pytest.mark.parametrize("kind", GOOD)
@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=8),
       seed=st.integers(0, 2**32))
def test_every_coding_decodes_whole_at_any_cut(kind: str, pieces: list[bytes], seed: int) -> None:
    header, body = encode(kind, pieces)
    assert decode(header, cut(body, random.Random(seed))) == b"".join(pieces)


def test_gzip_members_and_zero_padding() -> None:
    body = gzip.compress(b"data: one\n\n") + b"\0\0" + gzip.compress(b"data: two\n\n") + b"\0"
    assert decode("gzip", [body[i:i + 1] for i in range(len(body))]) == b"data: one\n\ndata: two\n\n"


def test_a_chain_of_codings_is_undone_in_reverse() -> None:
    inner = BodyEncoder("deflate-raw", 1).encode(b"data: x\n\n", 0)
    assert decode("deflate, gzip", [gzip.compress(inner)]) == b"data: x\n\n"


@pytest.mark.parametrize("header", ["gzip", "deflate", "br", "zstd", "identity", ""])
def test_an_empty_body_is_complete(header: str) -> None:
    assert decode(header, []) == b""


@pytest.mark.parametrize("kind", ["gzip-corrupt", "gzip-truncated"])
@pytest.mark.parametrize("seed", range(8))
def test_corrupt_or_cut_bodies_raise(kind: str, seed: int) -> None:
    rnd = random.Random(seed)
    pieces = [f"data: piece {i} {'x' * rnd.randint(0, 200)}\n\n".encode() for i in range(5)]
    header, body = encode(kind, pieces)
    with pytest.raises(ValueError):
        decode(header, cut(body, rnd))


@pytest.mark.parametrize("kind", GOOD)
def test_a_body_cut_short_raises_at_the_end(kind: str) -> None:
    header, body = encode(kind, [b"data: " + b"y" * 500 + b"\n\n"] * 3)
    with pytest.raises(ValueError):
        decode(header, [body[:-5]])


def test_garbage_after_the_last_member_raises() -> None:
    with pytest.raises(ValueError):
        decode("gzip", [gzip.compress(b"data: a\n\n") + b"<html>oops</html>"])


# -- through the proxy ---------------------------------------------------------------------
WORDS = " ".join(f"w{i}" for i in range(300))
pytestmark = [  # the module's fake and proxy, shared by the tests through the proxy
    pytest.mark.fake_llm(openai=WORDS, words_per_chunk=3, bursts=4, burst_gap=0.05, scope="module"),
    pytest.mark.retimer_proxy("--profile", "gpt-5", "--ttft", "50ms", "--tps", "400", "--jitter", "0",
                              scope="module"),
]


def _fetch(proxy: RetimerProxy, fake: FakeLLM, kind: str) -> tuple[httpx.Response, bytes,
                                                                     BaseException | None, dict]:
    before = len(proxy.records(0, timeout=0))
    with httpx.Client(proxy=proxy.url, timeout=30) as c:
        with c.stream("POST", fake.url + "/v1/chat/completions", json={},
                      headers={"x-fake-encoding": kind, "accept-encoding": "gzip"}) as r:
            got, error = read_until_error(r)
    return r, got, error, proxy.records(before + 1)[before]


@pytest.mark.parametrize("kind", GOOD)
def test_every_coding_reaches_the_client_decoded_whole_and_paced(
    proxy: RetimerProxy, fake: FakeLLM, kind: str
) -> None:
    r, got, error, record = _fetch(proxy, fake, kind)
    assert error is None and "content-encoding" not in r.headers
    assert sse_text(got) == WORDS
    assert record["outcome"] == "complete" and record["protocol"] == "openai-chat"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 300
    assert got.count(b"data: ") > fake.openai_body.count(b"data: ")  # split: it was paced
    assert "corrupt" not in proxy.stderr() and "cannot parse" not in proxy.stderr()


@pytest.mark.parametrize("kind", ["gzip-corrupt", "gzip-truncated"])
def test_a_corrupt_body_ends_with_an_error_never_with_garbage(
    proxy: RetimerProxy, fake: FakeLLM, kind: str
) -> None:
    """A client reading the upstream directly fails to decode it; through the proxy (which
    removed Content-Encoding) it gets the text decoded so far, then a broken body."""
    warnings = proxy.stderr().count("is corrupt")
    r, got, error, record = _fetch(proxy, fake, kind)
    assert isinstance(error, httpx.RemoteProtocolError)  # never a clean end
    assert "content-encoding" not in r.headers
    got.decode("utf-8")  # no compressed bytes reached the client
    assert WORDS.startswith(sse_text(got))
    if kind == "gzip-truncated":  # everything but the gzip trailer came: all of the text
        assert sse_text(got) == WORDS
    assert record["outcome"] == "upstream-error"
    deadline = time.monotonic() + 5
    while proxy.stderr().count("is corrupt") == warnings and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.stderr().count("is corrupt") == warnings + 1
    assert "Traceback" not in proxy.stderr()


@pytest.mark.parametrize("kind", ["gzip-corrupt", "gzip-truncated"])
def test_passthrough_passes_a_corrupt_body_on_as_it_came(
    tmp_path: Path, fake: FakeLLM, kind: str
) -> None:
    """With `--profile passthrough` mitmproxy sends the body as it came, still compressed; a
    corrupt one reaches the client byte for byte (as reading the upstream directly would), the
    record says `complete` with what could be counted, and one warning says why."""
    headers = {"x-fake-encoding": kind, "accept-encoding": "gzip"}
    with httpx.Client(timeout=30) as c, \
            c.stream("POST", fake.url + "/v1/chat/completions", json={}, headers=headers) as r:
        direct = b"".join(r.iter_raw())
    with RetimerProxy(tmp_path, "--profile", "passthrough") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as c, \
                c.stream("POST", fake.url + "/v1/chat/completions", json={}, headers=headers) as r:
            got = b"".join(r.iter_raw())
            assert r.headers["content-encoding"] == "gzip"
        (record,) = proxy.records(1)
        deadline = time.monotonic() + 5
        while "cannot be decoded to count it" not in proxy.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.stderr().count("cannot be decoded to count it") == 1
        assert "Traceback" not in proxy.stderr()
    assert got == direct
    assert record["outcome"] == "complete" and record["profile"] == "passthrough"
    assert record["upstream"]["tokens"] == record["emitted"]["tokens"]  # what was decoded
    if kind == "gzip-truncated":  # everything but the gzip trailer came: all of the text
        assert record["upstream"]["tokens"] == len(split_tokens(WORDS))
