"""An addon's own fields in a stream's record: the way a `-s` script labels streams.

The record an addon's hooks get is read-only (retimer.records.schema.StreamRecord); an addon adds
fields by putting them in the flow's `flow.metadata["retimer_record"]` dict, before or in
`retimer_stream_done`, and they are written as they are, next to retimer's own.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from mitmproxy import http

from retimer.proxy.hooks import RECORD_KEY, StreamHandle
from retimer.records.reader import read_logs
from retimer.records.schema import SCHEMA_VERSION, StreamRecord
from tests.support.inproc_proxy import InProcessProxy
from tests.support.upstream import FakeLLM


class Labeller:
    """A user's addon: a label when the request comes, a figure when the stream is done, and
    the stream's decoded body, kept through the hooks' handle."""

    name = "labeller"

    def __init__(self) -> None:
        self.seen: list[object] = []
        self.bodies: list[tuple[str, str | None, bytes | None]] = []

    def retimer_stream_start(self, flow: http.HTTPFlow, stream: StreamHandle) -> None:
        assert stream.body is None  # nothing is kept unless an addon asks
        stream.keep_body()

    def request(self, flow: http.HTTPFlow) -> None:
        flow.metadata[RECORD_KEY] = {**flow.metadata.get(RECORD_KEY, {}), "team": "blue"}

    def retimer_stream_done(self, flow: http.HTTPFlow, stream: StreamHandle, record: StreamRecord) -> None:
        self.seen.append(record)
        self.bodies.append((stream.adapter.name, stream.fallback, stream.body))
        tokens = record.emitted.tokens if record.emitted else None
        flow.metadata[RECORD_KEY] = {**flow.metadata.get(RECORD_KEY, {}), "tokens_seen": tokens}


def test_an_addons_fields_are_written_with_the_record(tmp_path: Path) -> None:
    labeller = Labeller()
    with FakeLLM() as fake, InProcessProxy(tmp_path, "--profile", "cerebras") as proxy:
        proxy.call(lambda: proxy.master.addons.add(labeller))
        with httpx.Client(proxy=proxy.url, timeout=30) as client:
            r = client.post(f"{fake.url}/v1/chat/completions", json={"stream": True})
            assert r.status_code == 200
        (line,) = proxy.records(1)
    (record,) = labeller.seen
    ((adapter, fallback, body),) = labeller.bodies
    assert (adapter, fallback) == ("openai-chat", None) and body == fake.openai_body  # as it came
    assert isinstance(record, StreamRecord) and record.outcome == "complete"
    assert record.extra == {"team": "blue"}  # the stream_done field comes after this hook
    assert line["schema"] == SCHEMA_VERSION and line["team"] == "blue"
    assert line["tokens_seen"] == line["emitted"]["tokens"] > 0
    (read,) = read_logs([proxy.log_path]).streams
    assert read.extra == {"team": "blue", "tokens_seen": line["emitted"]["tokens"]}
    assert read.to_json() == line
