"""A cassette's files (retimer.cassette.format, retimer.cassette.store): calls read back as
recorded, owner-only, nothing secret kept; a recording stopped at any point or refused by the
disk leaves the calls so far; a corrupted, truncated or foreign cassette is one line naming
its file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from retimer.cache.entry import new_entry
from retimer.cassette.format import CassetteCall, UpstreamTiming
from retimer.cassette.shape import call_shape
from retimer.cassette.store import INDEX, CassetteError, CassetteWriter, read_cassette

BODY = b'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\ndata: [DONE]\n\n'


def call(n: int, body: bytes = BODY) -> CassetteCall:
    request = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{n}"}]})
    entry = new_entry(200, "OK", [("content-type", "text/event-stream"), ("set-cookie", "s=1"),
                                  ("openai-organization", "acme"), ("x-request-id", "r1")],
                      body, url="https://api.example.com/v1/chat/completions?key=SECRET",
                      method="POST", protocol="openai-chat", created="2026-12-05T14:00:00+00:00")
    return CassetteCall(call_shape("POST", "/v1/chat/completions", request.encode()), entry,
                        UpstreamTiming(ttft_ms=400.0 + n, duration_ms=2000.0, tokens=12))


def test_calls_read_back_in_order_with_their_shapes_bodies_and_timing(tmp_path: Path) -> None:
    writer = CassetteWriter(tmp_path / "c")
    assert [writer.add(call(i)) for i in range(3)] == [1, 2, 3]
    about, calls = read_cassette(tmp_path / "c")
    assert about["created"] == writer.created and about["retimer"]
    assert calls == [call(i) for i in range(3)]
    assert [c.upstream.ttft_ms for c in calls] == [400.0, 401.0, 402.0]


def test_trailers_read_back_and_a_format_2_cassette_still_reads(tmp_path: Path) -> None:
    """A gRPC call's HTTP/2 trailers are kept (format 3); a format-2 index (no trailers, from
    the retimer before) reads as it did."""
    from dataclasses import replace

    grpc = replace(call(0), trailers=[("grpc-status", "0"), ("x-usage", "tokens=41")])
    writer = CassetteWriter(tmp_path / "c")
    writer.add(grpc)
    writer.add(call(1))
    assert read_cassette(tmp_path / "c")[1] == [grpc, call(1)]
    index = json.loads((tmp_path / "c" / INDEX).read_text())
    assert index["format"] == 3 and "trailers" not in index["calls"][1]
    index["format"] = 2
    del index["calls"][0]["trailers"]
    (tmp_path / "c" / INDEX).write_text(json.dumps(index))
    assert read_cassette(tmp_path / "c")[1] == [call(0), call(1)]


def test_the_files_are_owner_only_and_keep_no_secret(tmp_path: Path) -> None:
    writer = CassetteWriter(tmp_path / "c")
    writer.add(call(0))
    files = [p for p in (tmp_path / "c").rglob("*")]
    assert {p.name for p in files} == {"calls", INDEX, "0001.body"}
    for p in [tmp_path / "c", *files]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, (p, oct(mode))
    index = (tmp_path / "c" / INDEX).read_text()
    for secret in ("SECRET", "s=1", "acme", "q0"):
        assert secret not in index
    assert "x-request-id" in index  # an ordinary header is replayed


def test_a_directory_with_a_cassette_is_not_recorded_over(tmp_path: Path) -> None:
    CassetteWriter(tmp_path / "c").add(call(0))
    with pytest.raises(CassetteError, match=r"c/cassette.json: a cassette is already recorded here"):
        CassetteWriter(tmp_path / "c")


def test_a_recording_the_disk_refuses_keeps_the_calls_so_far(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    writer = CassetteWriter(tmp_path / "c")
    writer.add(call(0))
    real_replace = os.replace

    def full(src: str, dst: str) -> None:
        if str(dst).endswith(INDEX):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(CassetteError, match=r"cassette.json: cannot write \(No space left on device\)"):
        writer.add(call(1))
    monkeypatch.undo()
    _, calls = read_cassette(tmp_path / "c")
    assert calls == [call(0)]  # the index names the first call only; the stray body is not read
    assert not [p for p in (tmp_path / "c").rglob(".*.tmp")]  # no temporary file left


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "calls" / "0002.body").write_bytes(BODY[:-3]), rf"0002.body: it has {len(BODY) - 3} bytes, the index says {len(BODY)}"),
    (lambda d: (d / "calls" / "0002.body").write_bytes(BODY.replace(b"Hello", b"Hellp")), r"0002.body: it is not the body the index names \(sha256 differs\)"),
    (lambda d: (d / "calls" / "0001.body").unlink(), r"0001.body: cannot read \(No such file or directory\)"),
    (lambda d: (d / INDEX).write_bytes((d / INDEX).read_bytes()[:100]), r"cassette.json: not a cassette this retimer can replay: not JSON"),
    (lambda d: (d / INDEX).write_text(json.dumps({**json.loads((d / INDEX).read_text()), "format": 99})),
     r"format 99; this retimer reads formats 2, 3 \(recorded by retimer "),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"upstream"', '"trailers": [["grpc-status"]], "upstream"', 1)),
     r"call 1 has bad trailers"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"calls/0002.body"', '"../x.body"')),
     r"call 2 names a body file outside calls/"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"status": 200', '"status": 9', 1)),
     r"call 1 has a bad status 9"),
    (lambda d: (d / INDEX).unlink(), r"cassette.json: no cassette here"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"tokens": 12', '"tokens": 1e999', 1)),
     r"call 1's upstream tokens is not a whole number >= 0"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"tokens": 12', '"tokens": 12.5', 1)),
     r"call 1's upstream tokens is not a whole number >= 0"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"ttft_ms": 400.0', '"ttft_ms": NaN', 1)),
     r"call 1's upstream TTFT is not a number >= 0"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"duration_ms": 2000.0', '"duration_ms": Infinity', 1)),
     r"call 1's upstream duration is not a number >= 0"),
    (lambda d: (d / INDEX).write_text("[" * 200_000 + "]" * 200_000),
     r"cassette.json: not a cassette this retimer can replay: not JSON a reader can take \(nested too deeply\)"),
    (lambda d: (d / INDEX).write_text((d / INDEX).read_text().replace('"openai-chat"', '"carrier-pigeon"', 1)),
     r"cassette.json: not a cassette this retimer can replay: call 1 is in a format this retimer "
     r"does not know \('carrier-pigeon'\)"),
])
def test_a_damaged_cassette_is_one_line_naming_its_file(tmp_path: Path, damage, message: str) -> None:  # type: ignore[no-untyped-def]
    writer = CassetteWriter(tmp_path / "c")
    writer.add(call(0))
    writer.add(call(1))
    damage(tmp_path / "c")
    with pytest.raises(CassetteError, match=message) as got:
        read_cassette(tmp_path / "c")
    assert "\n" not in str(got.value) and str(tmp_path / "c") in str(got.value)
