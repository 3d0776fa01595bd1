"""A real grpcio server-streaming call through retimer (forward mode, TLS, HTTP/2): the text
arrives exact, its multi-word messages split into token pieces, paced to the profile, and the
HTTP/2 trailers (status, message, trailing metadata) arrive intact, an error status too."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from tests.support.proxy import RetimerProxy
from tests.support.server_certs import make_certs

PROTO = """
syntax = "proto3";
package rt;
message ChatRequest { string prompt = 1; int32 fail_after = 2; }
message Delta { string content = 1; }
message ChatChunk { Delta delta = 1; string model = 2; int32 index = 3; }
service Chat { rpc Stream(ChatRequest) returns (stream ChatChunk); }
"""
PIECES = ["The quick brown fox", " jumps over the lazy dog,", " and the cat watches it",
          " from the warm window sill.", " Nobody moves much after that,", " which suits them all."]
TTFT_MS, TPS = 300.0, 50.0


def _compiled(tmp: Path) -> tuple[ModuleType, ModuleType]:
    (tmp / "rtchat.proto").write_text(PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"--python_out={tmp}",
                    f"--grpc_python_out={tmp}", str(tmp / "rtchat.proto")], check=True)
    sys.path.insert(0, str(tmp))
    try:
        return importlib.import_module("rtchat_pb2"), importlib.import_module("rtchat_pb2_grpc")
    finally:
        sys.path.remove(str(tmp))


@pytest.fixture(scope="module")
def grpc_chat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, int, Path, RetimerProxy]]:
    tmp = tmp_path_factory.mktemp("grpc")
    pb, pb_grpc = _compiled(tmp)
    ca, cert, key = make_certs(tmp, ("localhost", "127.0.0.1"), "retimer grpc test CA")

    asked: list[str] = []  # the prompts the server was called with

    class Chat(pb_grpc.ChatServicer):  # type: ignore[misc, name-defined]
        def Stream(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            asked.append(request.prompt)
            context.set_trailing_metadata((("x-usage", "tokens=41"),))
            for i, piece in enumerate(PIECES):
                if request.fail_after and i == request.fail_after:
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota: 41 tokens left")
                yield pb.ChatChunk(delta=pb.Delta(content=piece), model="model-7b", index=i)

    server = grpc.server(futures.ThreadPoolExecutor(4))
    pb_grpc.add_ChatServicer_to_server(Chat(), server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(key.read_bytes(), cert.read_bytes())]))
    server.start()
    try:
        with RetimerProxy(tmp / "proxy", "--intercept", "localhost", "--profile", "gpt-5",
                          "--ttft", f"{TTFT_MS:g}ms", "--tps", f"{TPS:g}", "--jitter", "0",
                          upstream_ca=ca) as proxy:
            yield pb, pb_grpc, port, ca, proxy, asked
    finally:
        server.stop(0)


def _call(served: tuple[Any, ...], fail_after: int = 0,
          direct: bool = False) -> tuple[list[Any], grpc.Call, list[float]]:
    pb, pb_grpc, port, ca, proxy = served[:5]
    roots = ca.read_bytes() if direct else proxy.ca_path.read_bytes()
    options = [] if direct else [("grpc.http_proxy", proxy.url)]
    options.append(("grpc.enable_http_proxy", 0 if direct else 1))
    with grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(roots),
                             options=options) as channel:
        call = pb_grpc.ChatStub(channel).Stream(pb.ChatRequest(prompt="hi", fail_after=fail_after))
        got, times, start = [], [], time.monotonic()
        try:
            for message in call:
                got.append(message)
                times.append(time.monotonic() - start)
        except grpc.RpcError:
            pass  # the status is read from the call below
        return got, call, times


@pytest.mark.serial  # the record's rate within 5 % of the profile: a quiet machine
def test_a_grpc_stream_is_split_paced_and_keeps_its_trailers(grpc_chat: Any) -> None:
    before = len(grpc_chat[4].records(0, timeout=0))
    got, call, _ = _call(grpc_chat)
    assert "".join(m.delta.content for m in got) == "".join(PIECES)
    assert len(got) > 3 * len(PIECES)  # each multi-word message went out as token pieces
    assert {(m.model, m.index) for m in got} == {("model-7b", i) for i in range(len(PIECES))}
    assert call.code() == grpc.StatusCode.OK
    assert ("x-usage", "tokens=41") in [(m.key, m.value) for m in call.trailing_metadata()]
    (record,) = grpc_chat[4].records(before + 1)[before:]
    assert (record["protocol"], record["outcome"], record["url"].split("/", 3)[3]) == (
        "grpc", "complete", "rt.Chat/Stream")
    # never sooner than the profile; a loaded machine only makes it later
    assert TTFT_MS - 5 < record["emitted"]["ttft_ms"] < TTFT_MS + 150
    assert record["emitted"]["tps"] == pytest.approx(TPS, rel=0.05)
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 30
    assert record["upstream"]["duration_ms"] < record["emitted"]["duration_ms"] / 4  # it was held


def test_an_error_status_arrives_after_the_same_text(grpc_chat: Any) -> None:
    direct, direct_call, _ = _call(grpc_chat, fail_after=3, direct=True)
    got, call, _ = _call(grpc_chat, fail_after=3)
    assert "".join(m.delta.content for m in got) == "".join(m.delta.content for m in direct)
    assert (call.code(), call.details()) == (direct_call.code(), direct_call.details()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED, "quota: 41 tokens left")
    assert ("x-usage", "tokens=41") in [(m.key, m.value) for m in call.trailing_metadata()]


def test_a_grpc_session_recorded_replays_with_its_trailers_and_no_upstream_call(
        grpc_chat: Any, tmp_path: Path) -> None:
    """`--record` keeps a gRPC call's HTTP/2 trailers; `--replay` answers the same calls from
    the cassette (an HTTP/2 replay server of its own) at another profile: the same messages,
    status and trailing metadata, an error status too, paced anew, the server never called; a
    call it does not hold gets gRPC's own error status."""
    pb, pb_grpc, port, ca, _, asked = grpc_chat
    cassette = tmp_path / "cassette"
    with RetimerProxy(tmp_path / "rec", "--intercept", "localhost", "--profile", "gpt-5",
                      "--ttft", "300ms", "--tps", "100", "--jitter", "0", "--record",
                      str(cassette), upstream_ca=ca) as recorder:
        recorded = [_call((pb, pb_grpc, port, ca, recorder), fail_after=f) for f in (0, 3)]
        recorder.records(2)
    index = json.loads((cassette / "cassette.json").read_text())
    assert [c["protocol"] for c in index["calls"]] == ["grpc", "grpc"]
    assert [dict(c["trailers"])["grpc-status"] for c in index["calls"]] == ["0", "8"]
    before = len(asked)
    with RetimerProxy(tmp_path / "play", "--intercept", "localhost", "--profile", "gpt-5",
                      "--ttft", "100ms", "--tps", "400", "--jitter", "0", "--replay",
                      str(cassette), upstream_ca=ca) as player:
        replayed = [_call((pb, pb_grpc, port, ca, player), fail_after=f) for f in (0, 3)]
        records = player.records(2)
        _, astray, _ = _call((pb, pb_grpc, port, ca, player), fail_after=5)  # never recorded
    assert len(asked) == before  # every call from the cassette
    for (got, call, _), (want, want_call, _) in zip(replayed, recorded, strict=True):
        assert got == want  # message for message, as recorded
        assert (call.code(), call.details()) == (want_call.code(), want_call.details())
        assert ("x-usage", "tokens=41") in [(m.key, m.value) for m in call.trailing_metadata()]
    assert replayed[1][1].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(replayed[0][0]) > len(PIECES)  # split into token pieces again
    assert [(r["protocol"], r["outcome"], r["cassette"]["match"]) for r in records] == [
        ("grpc", "complete", "replayed")] * 2
    assert all(95 < r["emitted"]["ttft_ms"] < 1000 for r in records)  # this profile's 100 ms
    # a call the cassette does not hold: gRPC's own error, saying why
    assert astray.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "matches no recorded call" in astray.details(), astray.details()
