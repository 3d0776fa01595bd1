"""`retimer fit`: a profile fitted to recorded upstream traffic gives back the profile it came from.

Synthetic traffic (tests/support/synthetic_traffic.py) is drawn from built-in profiles through
`Profile.stream_timing`, as retimer's pacer would send it. Sampling error is kept below the
5% tolerance by the sample sizes (several hundred thousand gaps, thousands of TTFTs), except
where noted. Real records come from the real proxy, fed recorded fixtures by FakeLLM.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from retimer.cli.records import fit as fit_cmd
from retimer.profile.fit import Fit, fit_streams, to_yaml
from retimer.profile.loader import load_profile
from retimer.profile.model import Profile
from retimer.records.fit_input import streams_from
from retimer.timing.model import StallSpec
from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.tokenizer import split_tokens
from tests.support import synthetic_traffic
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.records import streams as typed
from tests.support.stream_bodies import load_fixture, make_openai_stream, split_events
from tests.support.upstream import FakeLLM


def _fit(records: list[dict]) -> Fit:
    streams, _ = streams_from(typed(records))
    return fit_streams(streams)


def _close(got: float, want: float, tol: float, what: str) -> None:
    assert abs(got - want) <= tol * abs(want), f"{what}: fitted {got:.4g}, expected {want:.4g}"


def _check_core(fit: Fit, p: Profile, recs: list[dict], ttft_p99_tol: float = 0.05) -> None:
    """TTFT quantiles, mean rate, gap shape and chunking within 5% of the profile; TTFT also
    exactly the sample's (the fit reads the first token's time right)."""
    drawn = [r["synthetic"]["ttft_ms"] for r in recs]
    assert p.ttft is not None and p.tps is not None
    for got, q, want in zip(fit.ttft_ms, (50, 90, 99), (p.ttft.p50, p.ttft.p90, p.ttft.p99),
                            strict=True):
        _close(got, float(np.percentile(drawn, q)), 0.001, f"TTFT p{q} vs the sample")
        _close(got, want * 1000, ttft_p99_tol if q == 99 else 0.05, f"TTFT p{q}")
    _close(fit.tps, p.tps, 0.05, "tps")
    _close(fit.gap[0], p.gap[0], 0.05, "gap p90/p50")
    _close(fit.gap[1], p.gap[1], 0.05, "gap p99/p50")
    assert set(fit.chunking) == {k for k, _ in p.chunking}
    for size, prob in p.chunking:
        _close(fit.chunking[size], prob, 0.05, f"chunk {size}")


@pytest.mark.parametrize(("name", "streams", "tokens"), [
    ("groq", 2000, (50, 250)),  # chunks of 1-2, 1400 tok/s
    ("cerebras", 1500, (50, 400)),  # chunks of 1-8 tokens, 2100 tok/s (0.5 ms gaps)
])
def test_recovers_builtin_profiles(name: str, streams: int, tokens: tuple[int, int]) -> None:
    p = load_profile(name)
    recs = synthetic_traffic.records(p, streams, tokens, seed=11)
    fit = _fit(recs)
    _check_core(fit, p, recs)
    assert fit.stalls == 0 and fit.stall_ms is None and fit.prefill is None


def test_recovers_chunking_and_stalls() -> None:
    """Haiku: chunks of 1-7 tokens, a heavy TTFT tail, stalls. Its stall rate (0.05 per 1000
    tokens) is raised 40x so 390k tokens hold ~800 stalls. Its TTFT p99 (7.6x the median)
    has a sampling error of ~9% at 3000 streams: checked exactly against the sample, and
    against the profile within 3 standard errors."""
    haiku = load_profile("haiku")
    assert haiku.stalls is not None
    p = dataclasses.replace(haiku, stalls=StallSpec(2.0, haiku.stalls.duration))
    recs = synthetic_traffic.records(p, 3000, (60, 200), seed=5)
    fit = _fit(recs)
    _check_core(fit, p, recs, ttft_p99_tol=0.3)
    true_stalls = sum(r["model"]["stalls"] for r in recs)
    assert true_stalls > 600
    _close(fit.stalls, true_stalls, 0.02, "stalls found")
    _close(fit.stall_per_1000, 2.0, 0.1, "stalls per 1000 tokens")
    assert fit.stall_ms is not None
    _close(fit.stall_ms[0], 3000, 0.15, "stall p50")
    _close(fit.stall_ms[1], 15000, 0.3, "stall p90")


def test_big_chunks_count_the_cut_last_event() -> None:
    """Gemini Flash sends 15-50 tokens per event; each stream's last event is cut short. The
    fit must match every chunk size drawn (the cut ones included), not the events seen."""
    p = load_profile("gemini-flash")
    recs = synthetic_traffic.records(p, 1500, (100, 300), seed=3)
    fit = _fit(recs)
    draws = np.concatenate([r["synthetic"]["chunk_draws"] for r in recs])
    for size, prob in p.chunking:
        share = float(np.mean(draws == size))
        assert abs(fit.chunking[size] - share) < 0.01, (size, fit.chunking[size], share)
        _close(fit.chunking[size], prob, 0.1, f"chunk {size}")
    seen = np.concatenate([encoded["trace"]["upstream"]["n"][:-1] for encoded in recs])
    naive = float(np.mean(seen == 50))
    assert abs(fit.chunking[50] - 0.1) < abs(naive - 0.1)  # leaving cut events out biases


def test_events_read_together_are_one_network_event() -> None:
    """Two adapter events in one read share an arrival time: the client gets them as one
    event, so they are one chunk (and no zero gap)."""
    rng = np.random.default_rng(4)
    recs = []
    for _ in range(100):
        steps = 0.1 + np.cumsum(rng.uniform(0.008, 0.012, 40))
        times = [float(t) for t in np.repeat(steps, 2)]
        recs.append(synthetic_traffic.upstream_record(times, [1] * len(times)))
    fit = _fit(recs)
    assert fit.chunking == {2: 1.0}
    _close(fit.tps, 200, 0.02, "tps")  # 2 tokens per 10 ms
    assert 1.05 < fit.gap[0] < fit.gap[1] < 1.3  # uniform 8-12 ms event gaps


def test_records_left_out_and_why() -> None:
    good = synthetic_traffic.upstream_record([0.1, 0.2, 0.3], [1, 1, 1])
    variants = [
        {"outcome": "client-gone"}, {"protocol": "non-streaming"}, {"cache": "hit"},
        {"fallback": "ValueError: bad"}, {"trace": None},
        {"trace": {"unit_ms": 0.01, "upstream": {"t": [5, 5], "n": [0, 0]}}},
    ]
    streams, skipped = streams_from(typed([good, *({**good, **v} for v in variants)]))
    assert len(streams) == 1
    assert skipped == {"not complete": 1, "non-streaming": 1, "cache hit": 1, "unparsed": 1,
                       "no trace": 1, "no tokens": 1}


def test_prefill_slope_from_prompt_sizes() -> None:
    p = load_profile("groq")  # prefill 15k tok/s, TTFT quantiles at its reference prompt
    assert p.prefill is not None and p.ttft is not None
    recs = synthetic_traffic.records(p, 1000, (20, 60), seed=2, prompts=(1000, 40000))
    fit = _fit(recs)
    assert fit.prefill is not None
    tps, ref = fit.prefill
    _close(tps, p.prefill.tps, 0.05, "prefill tps")
    # the fitted quantiles stand for a `ref`-token prompt: the profile's moved by the prefill
    want = p.ttft.p50 * 1000 + (ref - p.prefill.reference_tokens) / p.prefill.tps * 1000
    _close(fit.ttft_ms[0], want, 0.05, "TTFT p50 at the reference prompt")
    same = synthetic_traffic.records(p, 200, (20, 60), seed=2, prompts=(1000, 1100))
    flat = _fit(same)
    assert flat.prefill is None and any("prefill not fitted" in n for n in flat.notes)


def test_yaml_loads_with_the_fitted_numbers(tmp_path: Path) -> None:
    haiku = load_profile("haiku")
    assert haiku.stalls is not None
    p = dataclasses.replace(haiku, stalls=StallSpec(3.0, haiku.stalls.duration))
    recs = synthetic_traffic.records(p, 400, (100, 300), seed=9, prompts=(500, 30000))
    streams, skipped = streams_from(typed(recs))
    fit = fit_streams(streams)
    assert fit.stall_ms is not None and fit.prefill is not None
    path = tmp_path / "fitted.yaml"
    path.write_text(to_yaml(fit, "my-fit", "rec<1>.jsonl", len(recs), skipped))
    got = load_profile(str(path))
    assert got.name == "my-fit" and "rec<1>.jsonl" in got.source and "400 upstream" in got.source
    assert got.ttft is not None and got.tps is not None and got.stalls is not None
    for a, b in zip((got.ttft.p50, got.ttft.p90, got.ttft.p99), fit.ttft_ms, strict=True):
        _close(a * 1000, b, 0.001, "ttft in YAML")
    _close(got.tps, fit.tps, 0.001, "tps in YAML")
    assert got.gap == pytest.approx(fit.gap, abs=0.001)
    assert dict(got.chunking) == pytest.approx(fit.chunking, abs=1e-4)
    _close(got.stalls.per_1000_tokens, fit.stall_per_1000, 0.01, "stall rate in YAML")
    _close(got.stalls.duration.p50 * 1000, fit.stall_ms[0], 0.001, "stall p50 in YAML")
    assert got.prefill is not None and got.prefill.reference_tokens == fit.prefill[1]
    got.stream_timing(np.random.default_rng(0))  # it times streams


# ------------------------------------------------------------------ the command


def _write_log(path: Path, *parts: list[dict]) -> None:
    """The records, a study's rating and marker lines (not streams), and a half-written line."""
    lines = [json.dumps(r) for part in parts for r in part]
    lines += [json.dumps({"type": "rating", "stream": "s1", "speed": 3}),
              json.dumps({"type": "study-start", "study": "x"})]
    path.write_text("\n".join(lines) + "\n{half a line")


def _mixed_log(tmp_path: Path) -> Path:
    groq = synthetic_traffic.records(load_profile("groq"), 150, (80, 200), seed=1)
    fast = synthetic_traffic.records(load_profile("cerebras"), 150, (80, 200), seed=2,
                                     protocol="anthropic-messages")
    for r in fast:
        r["url"] = "https://api.fast.test/v1/messages"
        r["time"] = "2026-12-01T09:00:00+00:00"
    log = tmp_path / "mixed.jsonl"
    _write_log(log, groq, fast)
    return log


def _fit_cmd(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`retimer fit ARGV` in this process (the subprocess runs below cover the real command)."""
    code = 0
    try:
        fit_cmd.main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _loads(text: str, tmp_path: Path) -> Profile:
    path = tmp_path / "out.yaml"
    path.write_text(text)
    return load_profile(str(path))


def test_command_prints_a_profile(tmp_path: Path) -> None:
    log = _mixed_log(tmp_path)
    done = run_cli("fit", str(log))
    assert done.returncode == 0, done.stderr
    both = _loads(done.stdout, tmp_path)
    assert both.name == "fitted-mixed" and "300 upstream streams" in both.source
    assert "300 records read" in both.source  # ratings and other lines are not streams
    assert done.stderr.startswith("retimer fit: 300 streams")
    bad = run_cli("fit", str(log), "--protocol", "ollama")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == (f"retimer fit: error: {log}: no records matching protocol "
                                  "ollama (300 records in the file; protocols in it: "
                                  "anthropic-messages, openai-chat)")


def test_a_mistyped_protocol_is_an_error_even_when_others_match(tmp_path: Path) -> None:
    """`--protocol openai-chat,antropic` must not fit openai-chat alone and say nothing."""
    log = _mixed_log(tmp_path)
    for command in ("fit", "report"):
        bad = run_cli(command, str(log), "--protocol", "openai-chat,antropic-messages",
                      "-o", str(tmp_path / "x.out"))
        assert bad.returncode == 2, (command, bad.stderr)
        assert bad.stderr.strip().endswith(
            "--protocol: unknown protocol 'antropic-messages'; did you mean anthropic-messages?")
        assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.out").exists()


def test_command_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _mixed_log(tmp_path)
    cases = {("--protocol", "anthropic-messages"): 2100, ("--host", "FAST.test"): 2100,
             ("--since", "2026-12-01"): 2100, ("--protocol", "openai-chat"): 1400}
    for args, tps in cases.items():
        code, out, err = _fit_cmd(capsys, str(log), *args, "--name", "sub")
        assert code == 0, err
        p = _loads(out, tmp_path)
        assert p.name == "sub" and "150 upstream streams" in p.source, args
        assert p.tps is not None
        _close(p.tps, tps, 0.06, f"tps with {args}")
    out_file = tmp_path / "o.yaml"
    code, out, _ = _fit_cmd(capsys, str(log), "-o", str(out_file))
    assert code == 0 and out == "" and load_profile(str(out_file)).tps


@pytest.mark.parametrize(("args", "message"), [
    (["missing.jsonl"], "no such file"),
    (["LOG", "--since", "yesterday-ish"], "--since"),
    (["LOG", "--name", "Bad Name"], "--name"),
    (["EMPTY"], "no fit-worthy stream"),
    (["LOG", "--bogus"], "unrecognized argument --bogus"),
])
def test_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     args: list[str], message: str) -> None:
    log = tmp_path / "log.jsonl"
    _write_log(log, synthetic_traffic.records(load_profile("groq"), 3, (5, 9)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"outcome": "complete", "protocol": "non-streaming"}) + "\n")
    argv = [str(log) if a == "LOG" else str(empty) if a == "EMPTY" else a for a in args]
    code, out, err = _fit_cmd(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retimer fit: error:") and message in lines[0]


# ------------------------------------------------------------------ the real proxy

FIXTURES = {  # fixture -> (path, adapter that counts its tokens)
    "openai-chat/gpt4o-text-include-usage.sse": ("/v1/chat/completions", OpenAIChatAdapter),
    "openai-chat/gpt4o-parallel-tool-calls-usage.sse": ("/v1/chat/completions", OpenAIChatAdapter),
    "groq/groq-tool-call-x-groq-usage.sse": ("/v1/chat/completions", OpenAIChatAdapter),
    "mistral/sk-mistral-after-function-call.sse": ("/v1/chat/completions", OpenAIChatAdapter),
    "anthropic/llm-anthropic-sonnet45-thinking-signature.sse": ("/v1/messages",
                                                                 AnthropicMessagesAdapter),
    "anthropic/pydantic-ai-redacted-thinking-stream.sse": ("/v1/messages",
                                                            AnthropicMessagesAdapter),
}
GAP_S, FIRST_S = 0.01, 0.05


def _ideal_record(fixture: str, adapter_cls: type) -> dict:
    """What the fixture would record with no network or timer noise: each SSE event at
    FIRST_S + i * GAP_S, carrying the tokens the adapter finds in it."""
    adapter, times, sizes = adapter_cls(), [], []
    for i, piece in enumerate(split_events(load_fixture(fixture))):
        n = sum(len(split_tokens(e.text)) for e in adapter.feed(piece) if e.texts and e.text)
        if n:
            times.append(FIRST_S + i * GAP_S)
            sizes.append(n)
    return synthetic_traffic.upstream_record(times, sizes)


def _text(sse: bytes) -> str:
    """The answer an OpenAI Chat stream spells out (re-timing splits events, not the text)."""
    out = []
    for line in sse.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                out.append(choice.get("delta", {}).get("content") or "")
    return "".join(out)


@pytest.mark.serial  # the fake sends an event every 10 ms: under a hog with four workers its
# sleeps ran 13 ms apart (a hunt read 124 tok/s for 165), so the fit's rate needs a quiet machine
def test_fit_on_recorded_fixtures_through_the_proxy(tmp_path: Path) -> None:
    with FakeLLM(per_event_gap=GAP_S, first_delay=FIRST_S) as fake, \
            RetimerProxy(tmp_path / "rec", "--profile", "passthrough") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as client:
            for fixture, (path, _) in FIXTURES.items():
                with client.stream("POST", fake.url + path, json={"stream": True},
                                   headers={"x-fake-fixture": fixture}) as r:
                    assert r.status_code == 200
                    r.read()
        records = proxy.records(len(FIXTURES))
    assert len(records) == len(FIXTURES)
    assert all(r["trace"]["upstream"]["n"] for r in records)
    ideal = _fit([_ideal_record(f, cls) for f, (_, cls) in FIXTURES.items()])
    real = _fit(records)
    # tokens are counted as the upstream sent them; events 10 ms apart may still share a
    # read on a busy machine (they then count as one network event), so chunks are compared
    # by their mean
    assert real.tokens == ideal.tokens
    mean_chunk = [sum(k * p for k, p in f.chunking.items()) for f in (real, ideal)]
    _close(mean_chunk[0], mean_chunk[1], 0.1, "tokens per event")
    # never before the server sent it; the rest is local latency on a busy machine
    assert ideal.ttft_ms[0] - 1 <= real.ttft_ms[0] <= ideal.ttft_ms[0] + 150
    _close(real.tps, ideal.tps, 0.2, "tps against the fixtures' event spacing")
    upstream_ttfts = sorted(r["upstream"]["ttft_ms"] for r in records)
    assert real.ttft_ms[0] == pytest.approx(float(np.median(upstream_ttfts)), abs=0.05)

    # the command's YAML is a profile `retimer --profile` runs with
    done = run_cli("fit", str(proxy.log_path), "--name", "fixture-fit")
    assert done.returncode == 0, done.stderr
    assert f"{len(FIXTURES)} streams" in done.stderr
    fitted = tmp_path / "fixture-fit.yaml"
    fitted.write_text(done.stdout)
    body = make_openai_stream("Fitted profiles time real streams. " * 4)
    with FakeLLM(openai_body=body) as fake, \
            RetimerProxy(tmp_path / "use", "--profile", str(fitted)) as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as client:
            r = client.post(fake.url + "/v1/chat/completions", json={"stream": True})
            assert r.status_code == 200 and _text(r.content) == _text(body) != ""
        (rec,) = proxy.records(1)
    assert rec["profile"] == "fixture-fit" and rec["outcome"] == "complete"
    assert rec["target"]["tps"] == pytest.approx(load_profile(str(fitted)).tps)
