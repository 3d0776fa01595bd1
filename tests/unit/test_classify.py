"""What a flow is to retimer (`retimer.wire.classify.classify`), decided once from its request and
its response's head: the shapes the proxy meets, each with the treatment the addon acts on."""

from __future__ import annotations

import json

import pytest

from retimer.wire.classify import Treatment, classify
from retimer.wire.protocols.base import RequestShape

CHAT = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
WHOLE = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def shape(method: str = "POST", host: str = "api.openai.com", path: str = "/v1/chat/completions",
          body: bytes = CHAT) -> RequestShape:
    return RequestShape(method, host, path, {"content-type": "application/json"}, body)


@pytest.mark.parametrize(("request_shape", "status", "ctype", "encoding", "llm", "treatment", "adapter"), [
    (shape(), 200, "text/event-stream", "", True, Treatment.PACE, "openai-chat"),
    (shape(host="127.0.0.1"), 200, "text/event-stream", "gzip", False, Treatment.PACE, "openai-chat"),
    (shape(body=WHOLE), 200, "application/json", "", True, Treatment.HOLD, "generic"),
    (shape(body=WHOLE), 201, "application/json", "", True, Treatment.LEAVE, None),
    (shape(), 500, "application/json", "", True, Treatment.LEAVE, None),
    (shape(), 429, "text/event-stream", "", True, Treatment.STREAM, None),
    (shape(method="HEAD"), 200, "text/event-stream", "", True, Treatment.STREAM, None),
    (shape(method="GET", host="localhost", path="/"), 200, "text/html", "", False, Treatment.STREAM, None),
    (shape(host="example.com", path="/events"), 200, "text/event-stream", "", False, Treatment.STREAM, None),
    (shape(host="api.openai.com", path="/v1/other"), 200, "text/event-stream", "", True, Treatment.PACE, None),
])
def test_each_shape_gets_its_treatment(request_shape: RequestShape, status: int, ctype: str, encoding: str,
                                       llm: bool, treatment: Treatment, adapter: str | None) -> None:
    verdict = classify(request_shape, status, ctype, encoding, llm)
    assert verdict.treatment is treatment and verdict.warning == ""
    if adapter is not None:
        assert verdict.adapter is not None and verdict.adapter.name == adapter
    if treatment is Treatment.PACE:
        assert verdict.adapter is not None and verdict.decoder is not None


def test_an_unknown_encoding_streams_through_with_a_warning_naming_it() -> None:
    verdict = classify(shape(), 200, "text/event-stream", "zstd-unknown", True)
    assert verdict.treatment is Treatment.STREAM
    assert verdict.warning == ("unknown content-encoding 'zstd-unknown' from api.openai.com; "
                               "passing the stream through unchanged")


def test_each_paced_verdict_has_adapters_of_its_own() -> None:
    """Adapters and decoders keep a stream's state: two flows never share one."""
    a, b = (classify(shape(), 200, "text/event-stream", "", True) for _ in range(2))
    assert a.adapter is not b.adapter and a.decoder is not b.decoder
