"""The timing model: prefill, prompt cache, context, hidden reasoning, stalls, speed, bursts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from retimer.cli.records.profiles import timing_lines
from retimer.profile.loader import builtin_profiles, load_profile
from retimer.profile.model import Profile, ProfileError
from retimer.timing.distributions import ChunkSampler, GapSampler
from retimer.timing.model import (
    EARLY_TOKENS,
    ContextSpec,
    PrefillSpec,
    PromptCacheSpec,
    ReasoningSpec,
    SpeculativeSpec,
    StallSampler,
    StallSpec,
    speculative_chunks,
)
from retimer.timing.quantiles import QuantileShape, sample_ttft
from retimer.wire.prompt import PromptCache, PromptInfo, estimate_prompt

TTFT = QuantileShape(0.5, 0.8, 2.0)


def make(**over: object) -> Profile:
    fields: dict[str, object] = {"name": "t", "source": "test", "ttft": TTFT, "tps": 50.0}
    return Profile(**{**fields, **over})  # type: ignore[arg-type]


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def prompt(tokens: int, **kw: object) -> PromptInfo:
    return PromptInfo(tokens, "test", **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- prefill

PREFILL = PrefillSpec(tps=10_000.0, reference_tokens=1000)  # 100 ms of TTFT's 500 ms median


def test_a_reference_size_prompt_keeps_the_drawn_ttft_exactly() -> None:
    p = make(prefill=PREFILL)
    for seed in range(200):
        with_prompt = p.stream_timing(np.random.default_rng(seed), prompt=prompt(1000))
        without = p.stream_timing(np.random.default_rng(seed))
        assert with_prompt.ttft == with_prompt.ttft_draw == without.ttft


def test_a_longer_prompt_adds_its_prefill_time_to_every_draw() -> None:
    p = make(prefill=PREFILL)
    for seed in range(200):
        t = p.stream_timing(np.random.default_rng(seed), prompt=prompt(51_000))
        assert t.ttft - t.ttft_draw == pytest.approx(5.0, abs=1e-12)  # 50k extra at 10k tok/s
        assert t.prefill_s == pytest.approx(5.0, abs=1e-12)
    # so the TTFT quantiles shift by the same 5 s
    draws = np.array([p.stream_timing(np.random.default_rng(s), prompt=prompt(51_000)).ttft
                      for s in range(4000)])
    assert rel(float(np.median(draws)), 5.5) < 0.01
    assert rel(float(np.quantile(draws, 0.9)), 5.8) < 0.01


def test_a_short_prompt_never_drops_below_the_non_prefill_part() -> None:
    p = make(prefill=PREFILL)
    share = 0.1 / 0.5
    below_median = 0
    for seed in range(400):
        t = p.stream_timing(np.random.default_rng(seed), prompt=prompt(0))
        d = t.ttft_draw
        assert t.ttft >= d * (1 - share) - 1e-12
        if d >= TTFT.p50:
            assert t.ttft == pytest.approx(d - 0.1)  # the whole reference prefill is saved
        else:
            below_median += 1
            assert t.ttft == pytest.approx(d * (1 - share))
    assert 150 < below_median < 250


def test_explicit_ttft_and_tps_mean_what_they_say() -> None:
    """--ttft replaces prefill, prompt cache and hidden reasoning; --tps drops the slowdown."""
    full = make(prefill=PREFILL, prompt_cache=PromptCacheSpec(0.9), reasoning=HIDDEN,
                context=ContextSpec(1000.0), stalls=StallSpec(1.0, QuantileShape(1, 2, 3)))
    p = full.with_overrides(ttft="300ms", tps=200, jitter=0)
    assert (p.prefill, p.prompt_cache, p.reasoning, p.context) == (None, None, None, None)
    assert p.stalls == full.stalls  # a shape, like jitter: kept
    t = p.stream_timing(np.random.default_rng(0), prompt=prompt(90_000), cache=PromptCache())
    assert t.ttft == 0.3 and {t.gap() for _ in range(500)} == {1 / 200}
    kept = full.with_overrides(jitter=0)
    assert kept.prefill == PREFILL and kept.context is not None


def test_prefill_from_a_real_request_body() -> None:
    p = make(prefill=PREFILL)
    body = json.dumps({"messages": [{"role": "user", "content": "lorem ipsum " * 10_000}]})
    info = estimate_prompt(body.encode())
    t = p.stream_timing(np.random.default_rng(1), prompt=info)
    assert 19_000 < info.tokens < 21_000
    assert t.ttft - t.ttft_draw == pytest.approx((info.tokens - 1000) / 10_000)


# ---------------------------------------------------------------- prompt cache (via the profile)


def test_a_repeated_prefix_cuts_its_prefill_by_the_discount() -> None:
    p = make(prefill=PREFILL, prompt_cache=PromptCacheSpec(0.9, 1024, 300.0))
    turn1 = json.dumps({"model": "m", "messages": [
        {"role": "system", "content": "rules " * 6000}, {"role": "user", "content": "hi"}]})
    turn2 = json.dumps({"model": "m", "messages": [
        {"role": "system", "content": "rules " * 6000}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more " * 100}]})
    a, b = estimate_prompt(turn1, "h"), estimate_prompt(turn2, "h")
    cache = PromptCache()
    first = p.stream_timing(np.random.default_rng(5), prompt=a, cache=cache, now=0.0)
    second = p.stream_timing(np.random.default_rng(5), prompt=b, cache=cache, now=60.0)
    cold = p.stream_timing(np.random.default_rng(5), prompt=b)  # no session cache
    assert first.cached_tokens == 0 and second.cached_tokens == a.tokens
    assert cold.ttft - second.ttft == pytest.approx(a.tokens * 0.9 / 10_000)
    late = p.stream_timing(np.random.default_rng(5), prompt=b, cache=cache, now=60.0 + 301)
    assert late.cached_tokens == 0  # the ttl ran out


def test_a_profile_without_a_prompt_cache_is_not_sped_up_but_says_what_one_would_hold() -> None:
    """No `prompt_cache` key (or an exact --ttft): the first token is not moved by a cache,
    but the timing (and so the record) still says what a usual provider's would hold, for
    `retimer whatif` under profiles that have one."""
    p = make(prefill=PREFILL)
    cache = PromptCache()
    info = estimate_prompt(json.dumps({"messages": [{"role": "user", "content": "x " * 5000}]}))
    first, again = (p.stream_timing(np.random.default_rng(2), prompt=info, cache=cache, now=now)
                    for now in (0.0, 1.0))
    alone = p.stream_timing(np.random.default_rng(2), prompt=info)
    assert first.cached_tokens == 0 and again.cached_tokens >= 1024
    assert first.ttft == again.ttft == alone.ttft


# ---------------------------------------------------------------- context slowdown


def test_decode_rate_halves_at_half_rate_at_and_the_mean_is_exact() -> None:
    p = make(tps=100.0, context=ContextSpec(64_000.0))
    t = p.stream_timing(np.random.default_rng(3), prompt=prompt(64_000))
    assert t.rate_at(64_000) == pytest.approx(50.0) and t.rate_at(0) == 100.0
    gaps = np.array([t.gap() for _ in range(128 * 20)])
    positions = 64_000 + 1 + np.arange(gaps.size)  # gap i is for visible token i + 1
    want = 1.0 / np.array([t.rate_at(n) for n in positions])
    for blocks in (1, 5, 20):
        n = 128 * blocks
        assert rel(float(gaps[:n].sum()), float(want[:n].sum())) < 1e-9
    observed_rate = gaps.size / gaps.sum()
    assert rel(float(observed_rate), 100.0 / (1 + (64_000 + 1280.5) / 64_000)) < 1e-6
    assert rel(float(gaps.sum()), t.expected_decode_s(gaps.size + 1)) < 1e-9


def test_context_slows_a_long_prompt_more_than_a_short_one() -> None:
    p = make(tps=100.0, context=ContextSpec(10_000.0))
    short = p.stream_timing(np.random.default_rng(4), prompt=prompt(100))
    long = p.stream_timing(np.random.default_rng(4), prompt=prompt(20_000))
    s, lg = sum(short.gap() for _ in range(1280)), sum(long.gap() for _ in range(1280))
    assert rel(lg / s, (1 + (20_000 + 640.5) / 10_000) / (1 + (100 + 640.5) / 10_000)) < 1e-9


# ---------------------------------------------------------------- hidden reasoning

HIDDEN = ReasoningSpec(QuantileShape(800.0, 3000.0, 8000.0))


def test_hidden_tokens_follow_their_quantiles_and_mean() -> None:
    p = make(reasoning=HIDDEN)
    rng = np.random.default_rng(6)
    x = np.array([p.stream_timing(rng).hidden_tokens for _ in range(30_000)], dtype=float)
    for q, want in ((0.5, 800), (0.9, 3000), (0.99, 8000)):
        assert rel(float(np.quantile(x, q)), want) < 0.03
    assert rel(float(x.mean()), HIDDEN.hidden_tokens.mean()) < 0.02


def test_hidden_reasoning_is_in_ttft_at_the_decode_rate() -> None:
    p = make(tps=40.0, prefill=PREFILL, reasoning=HIDDEN, context=ContextSpec(50_000.0))
    t = p.stream_timing(np.random.default_rng(7), prompt=prompt(3000))
    h = t.hidden_tokens
    explicit = sum((1 + (3000 + i) / 50_000) / 40.0 for i in range(h))
    assert h > 0 and t.hidden_s == pytest.approx(explicit, rel=1e-12)
    assert t.ttft == pytest.approx(t.ttft_draw + (3000 - 1000) / 10_000 + t.hidden_s)
    assert t.summary()["hidden_reasoning_tokens"] == h
    assert t.summary()["hidden_reasoning_ms"] == pytest.approx(t.hidden_s * 1000, abs=1e-3)
    t.skip_hidden_reasoning()  # the upstream shows its reasoning: pace that instead
    assert t.ttft == pytest.approx(t.ttft_draw + 0.2) and t.hidden_tokens == 0
    gaps = sum(t.gap() for _ in range(128))  # the context no longer holds the hidden tokens
    assert gaps == pytest.approx(sum((1 + (3000 + i) / 50_000) / 40.0 for i in range(1, 129)))


def test_thinking_budget_and_max_tokens_cap_hidden_reasoning() -> None:
    p = make(reasoning=HIDDEN)
    for seed in range(50):
        assert p.stream_timing(np.random.default_rng(seed),
                               prompt=prompt(10, reasoning_budget=0)).hidden_tokens == 0
        assert p.stream_timing(np.random.default_rng(seed),
                               prompt=prompt(10, reasoning_budget=500)).hidden_tokens <= 500
        assert p.stream_timing(np.random.default_rng(seed),
                               prompt=prompt(10, max_output_tokens=300)).hidden_tokens <= 300
    assert make(reasoning=HIDDEN, jitter=0.0).stream_timing(
        np.random.default_rng(1)).hidden_tokens == 800


# ---------------------------------------------------------------- stalls

DURATION = QuantileShape(0.3, 1.0, 3.0)


def test_stall_frequency_per_1000_tokens() -> None:
    s = StallSampler(StallSpec(5.0, DURATION), np.random.default_rng(8))
    n = 400_000
    count = sum(1 for pos in range(1, n + 1) if s.extra(pos) > 0)
    assert abs(count - 2000) < 4 * math.sqrt(2000)  # Bernoulli(0.005) per token


def test_stall_durations_follow_their_quantiles() -> None:
    s = StallSampler(StallSpec(1000.0, DURATION), np.random.default_rng(9))  # every token
    x = np.array([s.extra(pos) for pos in range(1, 100_001)])
    assert np.all(x > 0)
    for q, want in ((0.5, 0.3), (0.9, 1.0), (0.99, 3.0)):
        assert rel(float(np.quantile(x, q)), want) < 0.04  # p99's standard error is ~1.2%
    assert rel(float(x.mean()), DURATION.mean()) < 0.02


@pytest.mark.parametrize("where", ["early", "late", "any"])
def test_stalls_fall_where_asked(where: str) -> None:
    positions = []
    for seed in range(40):
        s = StallSampler(StallSpec(50.0, DURATION, where), np.random.default_rng(seed))  # type: ignore[arg-type]
        positions += [pos for pos in range(1, 2001) if s.extra(pos) > 0]
    early = sum(p <= EARLY_TOKENS for p in positions)
    if where == "early":
        assert early == len(positions) > 100
    elif where == "late":
        assert early == 0 and len(positions) > 1000
    else:
        assert 0 < early < len(positions)


def test_stalls_lengthen_gaps_and_are_recorded() -> None:
    base = make(tps=100.0)
    stalled = make(tps=100.0, stalls=StallSpec(20.0, DURATION))
    a = base.stream_timing(np.random.default_rng(1))
    b = stalled.stream_timing(np.random.default_rng(1))
    extra = [gb - ga for ga, gb in ((a.gap(), b.gap()) for _ in range(5000))]
    stalls = [e for e in extra if e > 1e-12]
    assert b.stalls == len(stalls) and 60 < len(stalls) < 140
    assert b.stall_s == pytest.approx(sum(stalls))
    assert make(tps=100.0, stalls=StallSpec(1000.0, DURATION), jitter=0.0).stream_timing(
        np.random.default_rng(1)).gap() == 0.01  # a metronome has no stalls


# ---------------------------------------------------------------- speed factor


@pytest.mark.parametrize("text,factor", [("0.5x", 0.5), ("2", 2.0), ("200%", 2.0), (2, 2.0),
                                         (" 1.5 X ", 1.5), ("50%", 0.5), (0.25, 0.25)])
def test_speed_parses_factors(text: object, factor: float) -> None:
    p = load_profile("o3").with_overrides(speed=text)  # type: ignore[arg-type]
    base = load_profile("o3")
    assert p.speed == factor and p.tps == pytest.approx(base.tps * factor)  # type: ignore[operator]


def test_speed_two_plays_everything_twice_as_fast() -> None:
    base = make(prefill=PREFILL, reasoning=HIDDEN, context=ContextSpec(50_000.0),
                stalls=StallSpec(20.0, DURATION))
    fast = base.with_overrides(speed="2x")
    assert fast.ttft is not None and fast.prefill is not None and fast.stalls is not None
    assert (fast.ttft.p50, fast.ttft.p90, fast.ttft.p99) == pytest.approx((0.25, 0.4, 1.0))
    assert fast.tps == 100.0 and fast.prefill.tps == 20_000.0
    assert fast.stalls.duration.p50 == pytest.approx(0.15)
    assert fast.reasoning == base.reasoning and fast.context == base.context  # token counts
    a = base.stream_timing(np.random.default_rng(3), prompt=prompt(9000))
    b = fast.stream_timing(np.random.default_rng(3), prompt=prompt(9000))
    assert b.hidden_tokens == a.hidden_tokens
    assert b.ttft == pytest.approx(a.ttft / 2)
    ga, gb = [a.gap() for _ in range(2000)], [b.gap() for _ in range(2000)]
    assert gb == pytest.approx([g / 2 for g in ga])
    assert base.with_overrides(speed=2).with_overrides(speed=2).speed == 4.0
    # --speed first, then an explicit --ttft means what it says
    assert fast.with_overrides(ttft="400ms").ttft.p50 == pytest.approx(0.4)  # type: ignore[union-attr]
    assert base.with_overrides(speed=2, tps=30).tps == 30.0


@pytest.mark.parametrize("bad", ["fast", "0", "-1x", "nan", "", "x", "2y", 0, -2, True, "inf"])
def test_bad_speed_is_one_line_naming_the_option(bad: object) -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("groq").with_overrides(speed=bad)  # type: ignore[arg-type]
    assert "--speed" in str(e.value) and "\n" not in str(e.value)


def test_speed_does_not_apply_to_passthrough() -> None:
    with pytest.raises(ProfileError, match="--speed"):
        load_profile("passthrough").with_overrides(speed=2)


# ---------------------------------------------------------------- bursts: chunking and speculative


def test_speculative_step_sizes_follow_the_acceptance_formula() -> None:
    d = speculative_chunks(3, 0.6)
    assert d == pytest.approx({1: 0.4, 2: 0.24, 3: 0.144, 4: 0.216})
    for k, a in ((1, 0.5), (4, 0.8), (7, 0.3)):
        d = speculative_chunks(k, a)
        assert sum(d.values()) == pytest.approx(1.0)
        assert sum(s * q for s, q in d.items()) == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def _events(p: Profile, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, wait) per network event, as the pacer draws them: size, then a gap per token."""
    t = p.stream_timing(np.random.default_rng(seed))
    sizes, waits = [], []
    for _ in range(n):
        k = t.chunk_size()
        sizes.append(k)
        waits.append(sum(t.gap() for _ in range(k)))
    return np.array(sizes), np.array(waits)


def test_speculative_bursts_keep_a_step_cadence_and_the_mean_rate() -> None:
    spec = make(tps=400.0, speculative=SpeculativeSpec(3, 0.6))
    sizes, waits = _events(spec, 4000)
    assert abs(float(np.corrcoef(sizes, waits)[0, 1])) < 0.1  # the wait ignores the size
    assert rel(float(sizes.sum() / waits.sum()), 400.0) < 0.01
    for size in (1, 4):  # a 4-token step waits as long as a 1-token one
        assert rel(float(waits[sizes == size].mean()), float(waits.mean())) < 0.1
    assert rel(float(np.mean(sizes == 4)), 0.216) < 0.05


def test_chunked_bursts_wait_for_each_of_their_tokens() -> None:
    """Anthropic-like buffering: an event of k tokens waits about k gaps; the rate stays."""
    burst = make(tps=400.0, chunking=((1, 0.5), (4, 0.3), (8, 0.2)))
    sizes, waits = _events(burst, 4000)
    assert float(np.corrcoef(sizes, waits)[0, 1]) > 0.9
    assert rel(float(waits[sizes == 8].mean() / waits[sizes == 1].mean()), 8.0) < 0.1
    assert rel(float(sizes.sum() / waits.sum()), 400.0) < 0.01
    assert set(sizes.tolist()) == {1, 4, 8}


def test_speculative_with_jitter_zero_is_a_metronome() -> None:
    sizes, waits = _events(make(tps=400.0, speculative=SpeculativeSpec(3, 0.6), jitter=0.0), 300)
    assert set(sizes.tolist()) == {1} and set(waits.tolist()) == {1 / 400}


# ---------------------------------------------------------------- backwards compatibility


def test_a_profile_without_the_new_keys_draws_exactly_as_before() -> None:
    """The first three child generators feed TTFT, gaps and chunks as they always did, and a
    prompt or a cache changes nothing without the keys that use them."""
    p = load_profile("human-reading")
    assert p.ttft is not None and p.tps is not None
    info = estimate_prompt(json.dumps({"messages": [{"role": "user", "content": "w " * 9000}]}))
    for seed in range(5):
        r_ttft, r_gap, r_chunk = np.random.default_rng([seed, 1]).spawn(3)
        t = p.stream_timing(np.random.default_rng([seed, 1]), prompt=info, cache=PromptCache())
        assert t.ttft == sample_ttft(p.ttft, r_ttft, p.jitter)
        assert [t.gap() for _ in range(300)] == GapSampler(p.tps, *p.gap, r_gap).take(300)
        chunks = ChunkSampler(dict(p.chunking), r_chunk)
        assert [t.chunk_size() for _ in range(300)] == [chunks.next() for _ in range(300)]
        assert t.hidden_tokens == 0 and t.prefill_s == 0.0 and t.stalls == 0


# ---------------------------------------------------------------- built-in profiles


def test_every_table_row_models_prefill_and_context_with_cited_sources() -> None:
    rows = [p for p in builtin_profiles() if p.path is not None and p.path.name[:2].isdigit()]
    assert len(rows) == 20
    for p in rows:
        assert p.prefill is not None and p.context is not None, p.name
        assert "Prefill" in p.source and "Context" in p.source, p.name
        assert p.prefill.reference_s < p.ttft.p50  # type: ignore[union-attr]
        for key in ("prompt_cache", "stalls", "speculative"):
            if getattr(p, key) is not None:
                assert key.replace("_", " ").split()[0].capitalize() in p.source, (p.name, key)
        # used as it is, a table row waits the table's TTFT: thinking is off until chosen
        assert p.reasoning is None and p.thinking == "off", p.name
        if p.thinking_levels:
            assert "Thinking levels" in p.source, p.name
    by_name = {p.name: p for p in rows}
    for name in ("openai-gpt-5-mini", "openai-gpt-5", "openai-o3", "anthropic-claude-haiku",
                 "anthropic-claude-sonnet", "anthropic-claude-opus", "google-gemini-2.5-flash",
                 "google-gemini-2.5-pro", "deepseek-api-r1"):
        assert by_name[name].prompt_cache is not None, name
    for name in ("openai-o3", "deepseek-api-r1", "openai-gpt-5", "google-gemini-2.5-pro"):
        assert [k for k, _ in by_name[name].thinking_levels] == ["low", "medium", "high"], name
    assert load_profile("human-reading").prefill is None  # the new keys stay optional


def test_o3_thinks_before_its_first_visible_token_when_asked() -> None:
    plain = load_profile("o3")
    rng = np.random.default_rng(11)
    assert all(plain.stream_timing(rng).hidden_tokens == 0 for _ in range(200))
    p = plain.with_overrides(thinking="medium")
    t = [p.stream_timing(rng) for _ in range(2000)]
    hidden = np.median([x.hidden_s for x in t])
    assert 15 < hidden < 35  # ~900 tokens at 40 tok/s: AA's 23 s to the first answer token
    assert all(x.ttft > x.ttft_draw for x in t if x.hidden_tokens > 0)


def test_profiles_command_describes_the_new_keys() -> None:
    o3 = "\n".join(timing_lines(load_profile("o3")))
    for word in ("ttft:", "decode:", "chunking:", "prefill: 20000 tok/s", "prompt cache:",
                 "context: decode rate halves at 69k", "thinking: off; --thinking low ≈",
                 "medium: hidden tokens p50 900, p90 4000, p99 10000"):
        assert word in o3, word
    assert "stalls: 0.05 per 1000 tokens" in "\n".join(timing_lines(load_profile("sonnet")))
    assert "speculative: 3 draft tokens" in "\n".join(timing_lines(load_profile("fireworks")))
    assert "speed: 2x" in "\n".join(timing_lines(load_profile("o3").with_overrides(speed=2)))
    assert timing_lines(load_profile("passthrough"))[0].startswith("timing: none")


def test_speculative_steps_without_chunk_size_calls() -> None:
    """A caller that only asks gap() (no network events) still gets step bursts at the rate."""
    t = make(tps=400.0, speculative=SpeculativeSpec(3, 0.6)).stream_timing(np.random.default_rng(2))
    gaps = np.array([t.gap() for _ in range(20_000)])
    assert 0.3 < float(np.mean(gaps == 0.0)) < 0.7  # tokens after the first of their step
    assert rel(float(gaps.size / gaps.sum()), 400.0) < 0.01
