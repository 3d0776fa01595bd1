"""The pacing bridge's drivers and sinks, driven with fakes: no proxy, no socket, no loop.

A driver turns mitmproxy's events for one stream into its timed bytes (through a sink) and
its end; these tests hand it mitmproxy's real event and command types on a made-up stream, a
playout with a fixed timing, and a writer that records what it was given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import http as http_layer

from retimer.proxy.bridge import driver as driver_mod
from retimer.proxy.bridge import passthrough as passthrough_mod
from retimer.proxy.bridge.driver import BridgeState, StreamDriver
from retimer.proxy.bridge.passthrough import PassthroughDriver
from retimer.proxy.bridge.sinks import ClientWriter, LayerSink
from retimer.proxy.bridge.timers import PacingWakeup
from retimer.timing.pacer import StreamPacer
from retimer.timing.playout import Playout, PlayoutPool
from tests.support.pacer_fakes import FixedTiming, LineAdapter, text_of

STREAMING = "stream response body"  # the stream's server_state while its body streams
BODY = b"T:one\nT:two\nT:three\n"


def fake_stream(store: bool = False) -> Any:
    """The parts of mitmproxy's HttpStream a driver reads."""
    flow = SimpleNamespace(id="f1", request=SimpleNamespace(pretty_host="api.example"),
                           server_conn=SimpleNamespace(timestamp_end=None),
                           response=SimpleNamespace(stream=True))
    context = SimpleNamespace(options=SimpleNamespace(store_streamed_bodies=store),
                              client=SimpleNamespace(), layers=[])
    return SimpleNamespace(flow=flow, stream_id=1, server_state=STREAMING,
                           state_stream_response_body=STREAMING, response_body_buf=b"",
                           context=context)


class Recorder:
    """mitmproxy's own HTTP handler (what a driver hands an event it does not keep) and the
    stream's record callback."""

    def __init__(self) -> None:
        self.passed: list[events.Event] = []
        self.outcomes: list[str] = []

    def original(self, stream: Any, event: events.Event) -> Iterable[commands.Command]:
        self.passed.append(event)
        return iter(())

    def done(self, flow: Any, pacer: StreamPacer, end: float, outcome: str) -> None:
        self.outcomes.append(outcome)


class FakeWriter:
    """A direct writer: what it was given, and whether it takes bytes."""

    def __init__(self, ready: bool = True) -> None:
        self.ready = ready
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def commands(self) -> Iterable[commands.Command]:
        return iter(())


def paced(ttft: float, store: bool = False) -> tuple[StreamDriver, Any, Recorder]:
    rec = Recorder()
    state = BridgeState(original_http=rec.original)  # type: ignore[arg-type]
    now = time.monotonic()
    playout = Playout(StreamPacer(LineAdapter(), FixedTiming(ttft, 0.0), now), PlayoutPool(), now)
    stream = fake_stream(store)
    driver = StreamDriver(stream.flow, playout, state, rec.done)
    state.streams[stream.flow.id] = driver
    return driver, stream, rec


def sent(cmds: Iterable[commands.Command]) -> bytes:
    """The body bytes of a driver's SendHttp commands."""
    return b"".join(c.event.data for c in cmds if isinstance(c, http_layer.SendHttp))


def data(chunk: bytes) -> events.Event:
    return http_layer.ResponseData(1, chunk)


def test_due_bytes_go_through_the_layers_then_the_upstreams_end() -> None:
    driver, stream, rec = paced(ttft=0.0)
    out = list(driver.event(stream, data(BODY)))
    assert text_of(sent(out)) == "onetwothree" and rec.passed == [] and rec.outcomes == []
    end = http_layer.ResponseEndOfMessage(1)
    assert sent(driver.event(stream, end)) == b""
    assert rec.outcomes == ["complete"] and rec.passed == [end]  # the end went on, last
    assert driver.finished and "f1" not in driver._state.streams


def test_held_bytes_ask_for_a_wakeup_and_a_stale_one_is_dropped() -> None:
    driver, stream, rec = paced(ttft=60.0)
    out = list(driver.event(stream, data(BODY)))
    (cmd,) = out  # no bridge timers yet: mitmproxy's own wakeup, which names the handler
    assert isinstance(cmd, PacingWakeup) and list(driver.wakeups) == [cmd]
    assert 0 < cmd.delay <= 60  # (a held stream wakes now and then: keep-alives, checks)
    assert list(driver.woken(stream, PacingWakeup(0.0))) == []  # not one this stream asked for
    assert list(driver.wakeups) == [cmd]
    (again,) = driver.woken(stream, cmd)  # early: nothing is due, it asks again
    assert isinstance(again, PacingWakeup) and again is not cmd and list(driver.wakeups) == [again]
    assert rec.outcomes == []


def test_a_broken_upstream_gets_what_came_then_the_error() -> None:
    driver, stream, rec = paced(ttft=60.0)
    list(driver.event(stream, data(BODY + b"T:par")))  # held, with a partial line
    error = http_layer.ResponseProtocolError(1, "reset", http_layer.ErrorCode.GENERIC_SERVER_ERROR)
    out = list(driver.event(stream, error))
    assert sent(out) == BODY + b"T:par"  # everything that arrived, the partial line verbatim
    assert rec.outcomes == ["upstream-error"] and rec.passed == [error]


def test_a_client_that_goes_is_recorded_as_gone() -> None:
    driver, stream, rec = paced(ttft=60.0)
    list(driver.event(stream, data(BODY)))
    gone = http_layer.RequestProtocolError(1, "client disconnected",
                                          http_layer.ErrorCode.CLIENT_DISCONNECTED)
    list(driver.event(stream, gone))
    assert rec.outcomes == ["client-gone"] and rec.passed == [gone]
    driver.finish("complete")  # a second end is ignored: one record per stream
    assert rec.outcomes == ["client-gone"]


def test_an_upstream_that_closed_without_an_end_ends_the_stream_broken(
        caplog: pytest.LogCaptureFixture) -> None:
    driver, stream, rec = paced(ttft=60.0)
    (cmd,) = driver.event(stream, data(BODY))
    stream.flow.server_conn.timestamp_end = 1.0  # mitmproxy lost the connection's close
    with caplog.at_level(logging.WARNING, "retimer.proxy.bridge"):
        out = list(driver.woken(stream, cmd))
    assert sent(out) == BODY and rec.outcomes == ["upstream-error"]
    (error,) = rec.passed
    assert isinstance(error, http_layer.ResponseProtocolError)
    assert "closed without ending it" in caplog.text


@pytest.mark.parametrize("store", [True, False])
def test_streamed_bodies_are_kept_only_when_mitmproxy_keeps_them(store: bool) -> None:
    driver, stream, _ = paced(ttft=0.0, store=store)
    out = sent(driver.event(stream, data(BODY)))
    assert stream.response_body_buf == (out if store else b"") and out


def test_the_direct_wake_writes_through_the_writer_and_leaves_the_end_to_the_layers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    writer = FakeWriter()
    monkeypatch.setattr(driver_mod, "client_writer", lambda stream, handler: writer)
    driver, stream, rec = paced(ttft=0.0)
    armed: list[float] = []
    driver._state.timers = SimpleNamespace(  # type: ignore[assignment]  # the bridge's loop timers
        arm=lambda paced, cmd: armed.append(paced.wakeups[cmd]) or True)
    driver.stream, driver.handler = stream, object()  # type: ignore[assignment]  # known: timers arm
    driver.playout.feed(BODY, time.monotonic())
    cmd = PacingWakeup(0.0)
    driver.wakeups[cmd] = 0.0
    assert driver.wake_direct(cmd) is True and cmd not in driver.wakeups
    assert text_of(writer.data) == "onetwothree"
    assert len(armed) == len(driver.wakeups) == 1  # the next wake, on the bridge's timers
    driver.playout.end(time.monotonic())
    end_cmd = PacingWakeup(0.0)
    driver.wakeups[end_cmd] = 0.0
    assert driver.wake_direct(end_cmd) is False  # the end goes through mitmproxy's layers
    assert end_cmd in driver.wakeups and rec.outcomes == []
    driver.held_end = http_layer.ResponseEndOfMessage(1)
    assert sent(driver.woken(stream, end_cmd)) == b"" and rec.outcomes == ["complete"]


def test_a_writer_that_does_not_take_bytes_sends_the_wake_the_ordinary_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_mod, "client_writer", lambda stream, handler: FakeWriter(ready=False))
    driver, stream, _ = paced(ttft=0.0)
    driver.stream, driver.handler = stream, object()  # type: ignore[assignment]
    cmd = PacingWakeup(0.0)
    driver.wakeups[cmd] = 0.0
    assert driver.wake_direct(cmd) is False and cmd in driver.wakeups


# -- passthrough ---------------------------------------------------------------------------
def passthrough(writer: FakeWriter | None, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[PassthroughDriver, Any, Recorder]:
    monkeypatch.setattr(passthrough_mod, "connection_handler", lambda server, client: object())
    monkeypatch.setattr(passthrough_mod, "client_writer", lambda stream, handler: writer)
    rec = Recorder()
    state = BridgeState(original_http=rec.original)  # type: ignore[arg-type]
    pacer = StreamPacer(LineAdapter(), FixedTiming(60.0, 1.0), 0.0, passthrough=True)
    stream = fake_stream()
    return PassthroughDriver(stream.flow, Playout(pacer, PlayoutPool(), 0.0), state, rec.done), stream, rec


def test_a_passthrough_chunk_is_written_directly_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    writer = FakeWriter()
    driver, stream, rec = passthrough(writer, monkeypatch)
    assert list(driver.event(stream, data(BODY))) == []
    assert writer.data == BODY and rec.passed == [] and driver._state.passed_directly == 1
    end = http_layer.ResponseEndOfMessage(1)
    list(driver.event(stream, end))
    assert rec.passed == [end] and rec.outcomes == ["complete"]
    assert driver.playout.pacer.stats.upstream.tokens == 3  # counted for the record


def test_a_passthrough_chunk_without_a_writer_goes_through_mitmproxy(monkeypatch: pytest.MonkeyPatch) -> None:
    driver, stream, rec = passthrough(None, monkeypatch)
    chunk = data(BODY)
    list(driver.event(stream, chunk))
    assert rec.passed == [chunk] and driver._state.passed_directly == 0


# -- sinks ---------------------------------------------------------------------------------
def test_the_layer_sink_gives_each_write_as_one_command_once() -> None:
    sink = LayerSink(fake_stream())
    assert sink.ready
    sink.write(b"a")
    sink.write(b"b")
    assert sent(sink.commands()) == b"ab" and list(sink.commands()) == []


class FakeTransport:
    def __init__(self) -> None:
        self.closing = False
        self.data = b""

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.data += data


def test_the_client_writer_frames_writes_and_notes_the_activity() -> None:
    transport, activity = FakeTransport(), []
    watchdog = SimpleNamespace(register_activity=lambda: activity.append(1))
    chunked = ClientWriter(transport, None, lambda d: b"%x\r\n%s\r\n" % (len(d), d),  # type: ignore[arg-type]
                           lambda: True, watchdog)  # type: ignore[arg-type]
    assert chunked.ready and list(chunked.commands()) == []
    chunked.write(b"hello")
    assert transport.data == b"5\r\nhello\r\n" and activity == [1]
    held = ClientWriter(transport, None, lambda d: b"", lambda: True, watchdog)  # type: ignore[arg-type]
    held.write(b"more")  # h2 flow control keeps it in the connection's buffer
    assert transport.data == b"5\r\nhello\r\n" and activity == [1]
    transport.closing = True
    assert not chunked.ready
    assert not ClientWriter(FakeTransport(), None, bytes, lambda: False, watchdog).ready  # type: ignore[arg-type]
