"""`retimer whatif`'s arithmetic on hand-built logs, and its expectation against real draws.

The session arithmetic (busy periods, between-call time) is checked where the answer is known
exactly, and as properties (hypothesis). The per-call expectation (retimer.profile.expected)
is checked against Monte-Carlo means of real `StreamTiming` draws driven as the pacer drives
them, for the parts of the model the built-in profiles leave off at their defaults: hidden
thinking, whole responses, stalls, speculative steps, visible reasoning.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.profile.expected import Calls, expected_waits
from retimer.profile.loader import builtin_profiles, load_profile, load_profile_spec, profile_specs
from retimer.profile.model import Profile, ProfileError
from retimer.records.parse import stream_record_of
from retimer.records.schema import StreamRecord
from retimer.report.whatif import session_figures, sessions_of, whatif
from retimer.report.whatif_view import to_json
from retimer.timing.model import StallSpec
from retimer.timing.quantiles import QuantileShape
from tests.support.proxy import run_cli
from tests.support.whatif_draws import draws_for, expected, monte_carlo

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
TIMED = [p for p in builtin_profiles() if not p.passthrough]


def line(start: float, wait: float, upstream: float | None = None, tokens: int = 50,
         **extra: Any) -> dict[str, Any]:
    """A stream record's log line as the proxy writes it, with only the fields whatif reads
    (a study's, `participant` and `conversation`, with the study's name)."""
    up = wait / 2 if upstream is None else upstream
    rec = {"time": (T0 + timedelta(seconds=start)).isoformat(), "protocol": "openai-chat",
           "outcome": "complete", "status": 200, "fallback": None,
           "upstream": {"duration_ms": up * 1000, "tokens": tokens, "channels": {"text": tokens}},
           "emitted": {"duration_ms": wait * 1000, "tokens": tokens, "channels": {"text": tokens}},
           "model": {"prompt_tokens": 1200, "cached_tokens": 0}}
    rec.update(extra)
    if "participant" in extra:
        rec["study"] = "s"
    return rec


def record(start: float, wait: float, upstream: float | None = None, tokens: int = 50,
           **extra: Any) -> StreamRecord:
    """The record of `line(...)`, as the reader reads it."""
    return stream_record_of(line(start, wait, upstream, tokens, **extra))


# ---------------------------------------------------------------- session arithmetic

def test_busy_periods_and_between_time_on_a_known_session() -> None:
    # calls at 0 (2 s) and 1 (2 s) overlap: one period 0..3; a call at 10 (1 s): 10..11
    starts, recorded = np.array([0.0, 1.0, 10.0]), np.array([2.0, 2.0, 1.0])
    between, fig = session_figures(starts, recorded, recorded)
    assert between == pytest.approx(7.0)
    assert (fig.waiting_s, fig.calls_s, fig.total_s) == pytest.approx((4.0, 5.0, 11.0))
    # other waits keep each call's offset in its period: max(0 + 1, 1 + 1) + 3
    _, fig = session_figures(starts, recorded, np.array([1.0, 1.0, 3.0]))
    assert (fig.waiting_s, fig.total_s) == pytest.approx((5.0, 12.0))
    # the first call alone sets its period's end when it outlasts the second
    _, fig = session_figures(starts, recorded, np.array([6.0, 1.0, 1.0]))
    assert fig.waiting_s == pytest.approx(7.0)


def test_a_session_from_records_recorded_upstream_and_unmodelled() -> None:
    recs = [record(0, 2.0, 0.5), record(1, 2.0, 0.4), record(10, 1.0, 0.2),
            record(20, 3.0, 3.0, outcome="client-gone")]
    r = whatif("s", recs[::-1], TIMED[:2])  # file order does not matter: calls sort by start
    assert r is not None and r.calls == 4
    assert r.between_s == pytest.approx(7.0 + 9.0)
    assert (r.recorded.waiting_s, r.recorded.total_s) == pytest.approx((7.0, 23.0))
    # upstream alone: 0..0.5 and 1..1.4 -> 0.5 + 0.4 (two periods' worth, offsets kept: 1.4),
    # 0.2, and the cut stream keeps its recorded 3 s
    assert r.upstream.waiting_s == pytest.approx(1.4 + 0.2 + 3.0)
    assert r.unmodelled == {"outcome client-gone": 1}
    for fig in r.profiles:
        assert fig.total_s == pytest.approx(r.between_s + fig.waiting_s)


def test_websocket_turns_are_modelled_like_any_call() -> None:
    """An agent over WebSockets (Codex, Copilot CLI): each turn's record has the socket's 101;
    its turns are timed by every profile as the same session over SSE would be."""
    turns = [record(0, 0.8, 0.01, tokens=16, protocol="websocket", status=101),
             record(5, 0.8, 0.01, tokens=16, protocol="websocket", status=101),
             record(9, 0.8, 0.01, tokens=16, protocol="websocket", status=101, outcome="client-gone")]
    sse = [dataclasses.replace(t, protocol="openai-responses", status=200) for t in turns]
    ws, over_sse = whatif("ws", turns, TIMED), whatif("sse", sse, TIMED)
    assert ws is not None and over_sse is not None
    assert ws.timed == 2 and ws.unmodelled == {"outcome client-gone": 1}
    assert [f.waiting_s for f in ws.profiles] == [f.waiting_s for f in over_sse.profiles]
    assert len({round(f.waiting_s, 3) for f in ws.profiles}) > 1  # the profiles differ
    gone = whatif("x", [record(0, 1.0, protocol="openai-chat", status=101)], TIMED[:1])
    assert gone is not None and gone.unmodelled == {"status 101": 1}  # 101 is a socket's only


def test_calls_that_touch_are_not_one_period() -> None:
    """A call that starts as the one before it ends waits on its own: the two do not overlap,
    so under a faster profile the time between them stays (before, touching calls merged and
    the time between them shrank with the model)."""
    r = whatif("s", [record(0, 2.0, 0.1), record(2.0, 2.0, 0.1)], TIMED)
    assert r is not None and r.between_s == 0.0
    assert r.upstream.waiting_s == pytest.approx(0.2)  # two periods: 0.1 each
    merged = whatif("s", [record(0, 2.0, 0.1), record(1.999, 2.0, 0.1)], TIMED)
    assert merged is not None and merged.upstream.waiting_s == pytest.approx(1.999 + 0.1)


def test_a_websocket_turn_recorded_before_version_3_ends_at_its_last_event() -> None:
    """Before records version 3 a turn's emitted duration ran until the client's next message
    (the socket's id on every turn): whatif ends it with its last event sent, from its trace,
    so a session of short turns with pauses between them is not one long call."""
    trace = {"unit_ms": 0.01, "emitted": {"t": [50_000, 10_000], "n": [5, 11]}}  # 0.5, 0.6 s
    old = [record(t, 3.0, 0.05, tokens=16, protocol="websocket", status=101, id="sock",
                  trace=trace) for t in (0.0, 3.0, 6.0)]
    assert all(r.schema == 1 for r in old)
    r = whatif("ws", old, TIMED[:1])
    assert r is not None and r.recorded.waiting_s == pytest.approx(3 * 0.6)
    assert r.between_s == pytest.approx(6.0 + 0.6 - 3 * 0.6)  # span: to the last turn's end
    new = [dataclasses.replace(t, schema=3) for t in old]  # a version 3 duration is the turn's
    r3 = whatif("ws", new, TIMED[:1])
    assert r3 is not None and r3.recorded.waiting_s == pytest.approx(9.0)


def test_a_session_with_no_call_the_model_can_time() -> None:
    r = whatif("s", [record(0, 2.0, outcome="upstream-error")], TIMED)
    assert r is not None and r.unmodelled == {"outcome upstream-error": 1}
    assert all(f.waiting_s == r.recorded.waiting_s == 2.0 for f in r.profiles)


def test_sessions_by_participant_conversation_file_and_all() -> None:
    a = [record(0, 1, participant="p1", conversation="c1"),
         record(5, 1, participant="p2", conversation="c1"),
         record(9, 1, participant="p1", conversation="c2")]
    b = [record(100, 1)]
    by, sessions = sessions_of([("a.jsonl", a), ("b.jsonl", b)])
    assert by == "participant" and [k for k, _ in sessions] == ["-", "p1", "p2"]
    by, sessions = sessions_of([("a.jsonl", a)], "conversation")
    assert [k for k, _ in sessions] == ["p1 / c1", "p1 / c2", "p2 / c1"]
    assert [k for k, _ in sessions_of([("a.jsonl", a), ("b.jsonl", b)], "file")[1]] == [
        "a.jsonl", "b.jsonl"]
    assert len(sessions_of([("a.jsonl", a), ("b.jsonl", b)], "all")[1][0][1]) == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20), st.floats(0, 20)),
                min_size=1, max_size=30))
def test_session_properties(calls: list[tuple[float, float, float]]) -> None:
    starts = np.array([c[0] for c in calls])
    recorded = np.array([c[1] for c in calls])
    other = np.array([c[2] for c in calls])
    between, rec = session_figures(starts, recorded, recorded)
    span = float(np.max(starts + recorded) - np.min(starts))
    assert rec.total_s == pytest.approx(span, abs=1e-9)
    assert rec.total_s == pytest.approx(between + rec.waiting_s, abs=1e-9)
    assert rec.waiting_s <= rec.calls_s + 1e-9 and rec.waiting_s >= recorded.max() - 1e-9
    _, alt = session_figures(starts, recorded, other)
    assert alt.total_s == pytest.approx(between + alt.waiting_s, abs=1e-9)
    # longer waits never shorten a session, shorter never lengthen it
    _, longer = session_figures(starts, recorded, np.maximum(other, recorded))
    _, shorter = session_figures(starts, recorded, np.minimum(other, recorded))
    assert shorter.total_s - 1e-9 <= rec.total_s <= longer.total_s + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TIMED), st.floats(1.05, 4.0),
       st.lists(st.tuples(st.integers(1, 3000), st.one_of(st.none(), st.integers(0, 200_000)),
                          st.integers(0, 200_000), st.booleans(), st.booleans()),
                min_size=1, max_size=8))
def test_a_faster_profile_never_waits_longer(p: Profile, k: float, calls: list[tuple]) -> None:
    calls = [(n, pr, min(c, pr or 0), r, w) for n, pr, c, r, w in calls]
    for thinking in [None, *(name for name, _ in p.thinking_levels)]:
        slow = p.with_overrides(thinking=thinking)
        fast = p.with_overrides(speed=k, thinking=thinking)
        assert np.all(expected(fast, calls) <= expected(slow, calls) * (1 + 1e-9))
        assert np.all(expected(fast, calls) > 0)


# ---------------------------------------------------------------- the expectation, by draws

def _stalling(p: Profile, where: str) -> Profile:
    return dataclasses.replace(p, stalls=StallSpec(20.0, QuantileShape(0.3, 0.8, 2.0), where))


@pytest.mark.parametrize("spec", [
    "gpt-5:thinking=medium", "o3:thinking=low", "sonnet:thinking=2000", "gemini-flash",
    "fireworks", "together:jitter=0", "cerebras:speed=0.5", "r1:thinking=low,tps=30"])
def test_expectation_matches_real_draws(spec: str) -> None:
    p = load_profile_spec(spec)
    calls = [(120, 1500, 0, False, False), (40, None, 0, False, False),
             (300, 30_000, 20_000, True, False), (200, 8000, 4000, False, True)]
    mc = monte_carlo(p, calls, max(500, draws_for(p)), 11)
    assert np.all(np.abs(mc / expected(p, calls) - 1) < 0.10), (spec, mc / expected(p, calls))


@pytest.mark.parametrize("where", ["any", "early", "late"])
def test_expectation_with_stalls(where: str) -> None:
    p = _stalling(load_profile("groq"), where)
    calls = [(600, 2000, 0, False, False), (100, 2000, 0, False, True)]
    parts = expected_waits(p, Calls.of(*[list(c) for c in zip(*calls, strict=True)]))
    assert parts.stalls[0] > 0
    mc = monte_carlo(p, calls, 600, 5)
    assert np.all(np.abs(mc / parts.total - 1) < 0.10), mc / parts.total


# ---------------------------------------------------------------- profiles and JSON

def test_profile_specs_and_overrides() -> None:
    assert profile_specs("cerebras, gpt-5:tps=40,thinking=high,o3") == [
        "cerebras", "gpt-5:tps=40,thinking=high", "o3"]
    p = load_profile_spec("gpt-5:tps=40,thinking=high")
    assert p.effective_name == "openai-gpt-5 tps=40 thinking=high"
    for bad in ("gpt-5:tsp=40", "gpt-5:tps=", "nosuch:tps=40", "gpt-5:tps=-1"):
        with pytest.raises(ProfileError):
            load_profile_spec(bad)


def test_json_schema_on_a_hand_built_log() -> None:
    recs = [record(0, 2.0), record(5, 1.0, tokens=0)]
    r = whatif("s", recs, TIMED[:1], keep_waits=True)
    assert r is not None
    doc = json.loads(json.dumps(to_json("file", [r])))
    s = doc["sessions"][0]
    assert doc["version"] == 1 and doc["profiles"] == [TIMED[0].name] and doc["all"] == s
    assert (s["calls"], s["timed"], s["unmodelled"]) == (2, 1, {"no tokens": 1})
    assert s["recorded"] == {"waiting_s": 3.0, "calls_s": 3.0, "total_s": 6.0}
    assert s["waits"]["recorded"] == [2.0, 1.0] and s["waits"][TIMED[0].name][1] == 1.0
    assert set(s["profiles"][0]) == {"profile", "waiting_s", "calls_s", "total_s",
                                     "first_token_s", "hidden_s", "decode_s", "stall_s"}


@pytest.mark.parametrize(("args", "message"), [
    (["nosuch.jsonl"], "nosuch.jsonl: no such file"),
    (["{notlog}"], "no stream records in it"),
    (["{log}", "--profiles", "gpt-6"], "unknown profile 'gpt-6'"),
    (["{log}", "--profiles", "gpt-5:tsp=3"], "bad override 'tsp=3'"),
    (["{log}", "--profiles", "passthrough"], "is passthrough"),
    (["{log}", "--per-call"], "--per-call needs --json"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    log, notlog = tmp_path / "log.jsonl", tmp_path / "notes.txt"
    log.write_text(json.dumps(line(0, 1.0)) + "\n")
    notlog.write_text("hello\nworld\n")
    argv = [a.format(log=log, notlog=notlog) for a in args]
    done = run_cli("whatif", *argv)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr, lines


def test_a_study_log_is_one_session_per_participant(tmp_path: Path) -> None:
    log = tmp_path / "study.jsonl"
    recs = [line(10 * i + j, 1.0 + j, participant=f"p{i}", conversation=f"c{j % 2}")
            for i in range(6) for j in range(3)]
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    done = run_cli("whatif", str(log), "--profiles", "cerebras,o3")
    assert done.returncode == 0, done.stderr
    assert "6 sessions (by participant)" in done.stdout and "all 6 sessions" in done.stdout
    doc = json.loads(run_cli("whatif", str(log), "--json", "--profiles", "o3").stdout)
    assert doc["by"] == "participant" and [s["session"] for s in doc["sessions"]] == [
        f"p{i}" for i in range(6)]
    assert doc["all"]["calls"] == 18 and doc["all"]["timed"] == 18
    assert doc["all"]["recorded"]["total_s"] == pytest.approx(
        sum(s["recorded"]["total_s"] for s in doc["sessions"]))
    doc = json.loads(run_cli("whatif", str(log), "--json", "--by", "conversation").stdout)
    assert len(doc["sessions"]) == 12 and len(doc["profiles"]) == len(TIMED)


@pytest.mark.parametrize("seconds, text", [
    (0.4, "400 ms"), (0.9996, "1.00 s"), (1.3, "1.30 s"), (9.994, "9.99 s"), (9.996, "10.0 s"),
    (59.96, "1 min 00 s"), (65, "1 min 05 s"), (4000, "1 h 07 min"),
])
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    from retimer.report.whatif_view import duration_text

    assert duration_text(seconds) == text
