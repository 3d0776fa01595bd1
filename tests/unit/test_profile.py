"""Profiles: every built-in loads and matches the speed table; broken files fail in one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from retimer.profile.loader import builtin_dir, builtin_profiles, load_profile
from retimer.profile.model import Profile
from retimer.profile.units import ProfileError, parse_duration, parse_rate
from tests.support.paths import FIXTURES

# The seed speed table (shared/seeds/000_376c19f4af5448d5.txt): row -> (tok/s, TTFT ms).
TABLE = {
    1: (2100, 120), 2: (1800, 140), 3: (1400, 180), 4: (950, 220), 5: (780, 200),
    6: (570, 240), 7: (520, 220), 8: (480, 250), 9: (400, 260), 10: (320, 280),
    11: (260, 450), 12: (210, 550), 13: (180, 500), 14: (95, 800), 15: (85, 850),
    16: (80, 900), 17: (55, 1100), 18: (45, 1400), 19: (40, 1500), 20: (35, 1800),
}
SEED_TABLE = FIXTURES / "speed-table.txt"  # copy of the seed

REQUIRED_ALIASES = {
    "cerebras": 1, "groq": 3, "sambanova": 5, "together": 8, "fireworks": 9,
    "gemini-flash": 11, "gpt-5-mini": 12, "claude-haiku": 13, "gpt-5": 14, "frontier": 14,
    "claude-sonnet": 15, "gemini-pro": 16, "claude-opus": 17, "mythos": 18, "o3": 19,
    "reasoning": 19, "deepseek-r1": 20,
}


def row_files() -> dict[int, Path]:
    files = {}
    for f in builtin_dir().glob("*.yaml"):
        m = re.match(r"(\d\d)-", f.name)
        if m:
            files[int(m.group(1))] = f
    return files


# ---------------------------------------------------------------- built-ins


def test_builtin_dir_is_the_profiles_folder() -> None:
    assert (builtin_dir() / "README.md").is_file()


def test_embedded_table_matches_the_seed_file() -> None:
    rows = re.findall(r"^(\d+)\t[^\t]+\t(\d+)\t(\d+)ms\t", SEED_TABLE.read_text(), re.M)
    assert {int(r): (int(t), int(ms)) for r, t, ms in rows} == TABLE


def test_every_builtin_loads_and_is_complete() -> None:
    profiles = builtin_profiles()
    assert len(profiles) == 23
    for p in profiles:
        assert p.source and p.description and p.path is not None
        assert p.path.stem in (p.name, f"{p.path.stem[:2]}-{p.name}")
        if p.passthrough:
            continue
        assert p.ttft is not None and p.tps is not None
        assert p.ttft.p50 < p.ttft.p90 < p.ttft.p99
        assert 1 < p.gap[0] < p.gap[1]
        assert abs(sum(q for _, q in p.chunking) - 1) < 1e-9
    names = {p.name for p in profiles}
    assert {"passthrough", "human-reading"} <= names


def test_twenty_table_rows_with_the_tables_exact_medians() -> None:
    files = row_files()
    assert sorted(files) == list(range(1, 21))
    for row, path in files.items():
        p = load_profile(str(path))
        tps, ttft_ms = TABLE[row]
        assert p.tps == tps, path.name
        assert p.ttft is not None and p.ttft.p50 == ttft_ms / 1000, path.name
        assert f"row {row} " in p.source, path.name


def test_aliases_are_unique_and_resolve() -> None:
    seen: dict[str, str] = {}
    for p in builtin_profiles():
        for key in (p.name, *p.aliases):
            assert key not in seen, f"{key} in {p.name} and {seen[key]}"
            seen[key] = p.name
    for key, name in seen.items():
        assert load_profile(key).name == name
        assert load_profile(f"  {key.upper()} ").name == name


def test_required_aliases_point_at_their_rows() -> None:
    files = row_files()
    for alias, row in REQUIRED_ALIASES.items():
        assert load_profile(alias).path == files[row], alias
    assert load_profile("none").passthrough and load_profile("off").passthrough
    assert load_profile("human-reading").tps == 5


def test_load_from_a_path(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("name: my-speed\nsource: a test\nttft: {p50: 300, p90: 0.5s, p99: 1.2s}\n"
                 "decode: {tps: 60tok/s}\n")
    p = load_profile(str(f))
    assert (p.name, p.tps, p.path) == ("my-speed", 60.0, f)
    assert (p.ttft.p50, p.ttft.p90, p.ttft.p99) == (0.3, 0.5, 1.2)  # type: ignore[union-attr]
    assert p.chunking == ((1, 1.0),) and p.jitter == 1.0
    shipped = sorted(builtin_dir().glob("1[0-9]-*.yaml"))[0]
    assert load_profile(str(shipped)).path == shipped


# ---------------------------------------------------------------- overrides and timing


def test_ttft_override_sets_the_median_and_keeps_the_tail_shape() -> None:
    base = load_profile("claude-haiku")
    p = base.with_overrides(ttft=0.25)
    assert p.ttft is not None and base.ttft is not None
    assert p.ttft.p50 == pytest.approx(0.25)
    assert p.ttft.p90 / p.ttft.p50 == pytest.approx(base.ttft.p90 / base.ttft.p50)
    assert p.ttft.p99 / p.ttft.p50 == pytest.approx(base.ttft.p99 / base.ttft.p50)
    assert p.tps == base.tps and p.name == base.name
    assert base.ttft.p50 == 0.5  # the original is untouched


def test_tps_and_jitter_overrides() -> None:
    p = load_profile("groq").with_overrides(tps="40tok/s", jitter=0)
    assert p.tps == 40.0 and p.jitter == 0.0
    t = p.stream_timing(np.random.default_rng(1))
    assert p.ttft is not None and t.ttft == p.ttft.p50
    assert {t.gap() for _ in range(300)} == {1 / 40}  # --tps is the rate: no context slowdown
    # without --tps, groq's `context` (half rate at 100k) makes gap i exactly 1/rate at its
    # position; a stream without a known prompt starts at the profile's reference prompt
    groq = load_profile("groq")
    assert groq.prefill is not None
    t = groq.with_overrides(jitter=0).stream_timing(np.random.default_rng(1))
    ref = groq.prefill.reference_tokens
    want = [(1 + (ref + i) / 100_000) / 1400 for i in range(1, 301)]
    assert [t.gap() for _ in range(300)] == pytest.approx(want, rel=1e-12)
    shifted = load_profile("groq").with_overrides(ttft="400ms").ttft
    assert shifted is not None and shifted.p50 == pytest.approx(0.4)


@pytest.mark.parametrize("kwargs,option", [({"ttft": 0}, "--ttft"), ({"ttft": -1}, "--ttft"),
                                            ({"ttft": "soon"}, "--ttft"), ({"tps": 0}, "--tps"),
                                            ({"tps": float("nan")}, "--tps"),
                                            ({"jitter": -0.5}, "--jitter"),
                                            ({"jitter": "lots"}, "--jitter")])
def test_bad_overrides_name_the_option(kwargs: dict[str, object], option: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("cerebras").with_overrides(**kwargs)  # type: ignore[arg-type]
    assert option in str(e.value) and "\n" not in str(e.value)


def test_passthrough_has_no_timing() -> None:
    p = load_profile("passthrough")
    with pytest.raises(ProfileError):
        p.stream_timing(np.random.default_rng(0))
    with pytest.raises(ProfileError):
        p.with_overrides(tps=10)
    assert p.with_overrides() == p


def test_stream_timing_reproduces_and_follows_the_profile() -> None:
    p = load_profile("gpt-5")
    a, b = p.stream_timing(np.random.default_rng(3)), p.stream_timing(np.random.default_rng(3))
    assert a.ttft == b.ttft
    assert [a.gap() for _ in range(300)] == [b.gap() for _ in range(300)]
    assert [a.chunk_size() for _ in range(300)] == [b.chunk_size() for _ in range(300)]
    rng = np.random.default_rng(4)
    draws = np.array([p.stream_timing(rng).ttft_draw for _ in range(4000)])
    assert p.ttft is not None
    assert abs(np.median(draws) / p.ttft.p50 - 1) < 0.03
    assert abs(np.quantile(draws, 0.9) / p.ttft.p90 - 1) < 0.04
    t = p.with_overrides(thinking="medium").stream_timing(np.random.default_rng(5))
    # GPT-5 has context and, when chosen, hidden reasoning: whole blocks of gaps sum to the
    # mean time exactly
    assert abs(sum(t.gap() for _ in range(1280)) / t.expected_decode_s(1281) - 1) < 1e-9
    assert t.ttft == pytest.approx(t.ttft_draw + t.hidden_s) and t.hidden_tokens > 0


# ---------------------------------------------------------------- broken profiles

GOOD = {
    "name": "x", "source": "s",
    "ttft": "{p50: 100ms, p90: 150ms, p99: 300ms}", "decode": "{tps: 50}",
}


def doc(**over: str | None) -> str:
    fields = {**GOOD, **over}
    return "".join(f"{k}: {v}\n" for k, v in fields.items() if v is not None)


BROKEN = [
    ("name: [unclosed\n", "invalid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("just a string\n", "top level must be a mapping"),
    ("", "empty"),
    (doc() + "decod: {tps: 3}\n", "unknown key 'decod'"),
    (doc() + "prefil: {tps: 10000}\n", "unknown key 'prefil' (did you mean 'prefill'?)"),
    (doc() + "prefill: {rate: 10000}\n", "unknown key 'prefill.rate'"),
    (doc(ttft="{p50: 1ms, p90: 2ms, p95: 3ms}"),
     "unknown key 'ttft.p95' (allowed: p50, p90, p99)"),
    (doc(decode="{tps: 5, gaps: {p90: 2, p99: 3}}"), "unknown key 'decode.gaps'"),
    (doc(name=None), "missing required key 'name'"),
    (doc(source=None), "missing required key 'source'"),
    (doc(ttft=None), "missing required key 'ttft'"),
    (doc(decode="{gap: {p90: 2, p99: 3}}"), "missing required key 'decode.tps'"),
    (doc(ttft="{p50: 1ms, p90: 2ms}"), "missing required key 'ttft.p99'"),
    (doc(decode="{tps: 0}"), "decode.tps must be a positive number"),
    (doc(decode="{tps: -3}"), "decode.tps must be a positive number of tokens/s (0.01 to 1,000,000), got -3"),
    (doc(decode="{tps: 1e-300}"), "decode.tps must be a positive number of tokens/s (0.01"),
    (doc(ttft="{p50: 100ms, p90: 150ms, p99: 4000s}"), "ttft.p99 must be a positive duration of at most 1 hour"),
    (doc() + "reasoning: {hidden_tokens: {p50: 1e30, p90: 2e30, p99: 3e30}}\n",
     "reasoning.hidden_tokens.p50 must be a positive number of tokens (at most 100M)"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "invalid YAML: nested too deeply"),
    (doc(decode="{tps: fast}"), "decode.tps"),
    (doc(decode="{tps: true}"), "decode.tps"),
    (doc(decode="{tps: .nan}"), "decode.tps"),
    (doc(decode="100"), "decode must be a mapping"),
    (doc(ttft="{p50: -5ms, p90: 2ms, p99: 3ms}"), "ttft.p50 must be a positive duration"),
    (doc(ttft="{p50: 0, p90: 2ms, p99: 3ms}"), "ttft.p50"),
    (doc(ttft="{p50: soon, p90: 2ms, p99: 3ms}"), "ttft.p50"),
    (doc(ttft="{p50: 1ms, p90: 2h, p99: 3ms}"), "ttft.p90"),
    (doc(ttft="{p50: 200ms, p90: 150ms, p99: 300ms}"), "ttft quantiles must increase"),
    (doc(ttft="{p50: 200ms, p90: 200ms, p99: 300ms}"), "ttft quantiles must increase"),
    (doc(ttft="120ms"), "ttft must be a mapping"),
    (doc(decode="{tps: 5, gap: {p90: 0.9, p99: 2}}"),
     "decode.gap.p90 must be a number greater than 1"),
    (doc(decode="{tps: 5, gap: {p90: 3, p99: 2}}"), "decode.gap quantiles must increase"),
    (doc(decode="{tps: 5, gap: {p90: 2}}"), "missing required key 'decode.gap.p99'"),
    (doc() + "chunking: {1: 0.5, 2: 0.4}\n", "chunking probabilities must sum to 1, got 0.9"),
    (doc() + "chunking: {0: 1.0}\n", "chunking keys"),
    (doc() + "chunking: {1.5: 1.0}\n", "chunking keys"),
    (doc() + "chunking: {1: 1.2, 2: -0.2}\n", "chunking.2 must be a positive number"),
    (doc() + "chunking: [1, 2]\n", "chunking must be a mapping"),
    (doc() + "jitter: -1\n", "jitter must be a number >= 0"),
    (doc() + "name: y\n", "duplicate key 'name'"),
    (doc(name="'My Profile'"), "name must be a lowercase name"),
    (doc() + "aliases: [Fast]\n", "each alias must be a lowercase name"),
    (doc() + "aliases: [off]\n", "quote it"),
    (doc() + "aliases: [x]\n", "alias 'x' repeats the profile's name"),
    (doc() + "aliases: [a, a]\n", "alias 'a' appears twice"),
    (doc() + "aliases: fast\n", "aliases must be a list"),
    (doc() + "passthrough: true\n", "passthrough profile takes no timing keys"),
    (doc() + "passthrough: maybe\n", "passthrough must be true or false"),
    (doc(description="[1, 2]"), "description must be a non-empty string"),
    # the timing-model keys: each problem names its key
    (doc() + "prefill: 10000\n", "prefill must be a mapping"),
    (doc() + "prefill: {reference_tokens: 1000}\n", "missing required key 'prefill.tps'"),
    (doc() + "prefill: {tps: 0}\n", "prefill.tps must be a positive number of tokens/s"),
    (doc() + "prefill: {tps: fast}\n", "prefill.tps"),
    (doc() + "prefill: {tps: 10000, reference_tokens: -5}\n", "prefill.reference_tokens"),
    (doc() + "prefill: {tps: 10000, reference_tokens: 1.5}\n",
     "prefill.reference_tokens must be a whole number"),
    (doc() + "prefill: {tps: 10000, ref: 1000}\n", "unknown key 'prefill.ref'"),
    (doc() + "prefill: {tps: 1000, reference_tokens: 1000}\n",
     "prefill: reference_tokens / tps = 1000ms must be below ttft.p50 (100ms)"),
    (doc() + "prompt_cache: {discount: 0.9}\n", "prompt_cache needs prefill"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {min_tokens: 1024}\n",
     "missing required key 'prompt_cache.discount'"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {discount: 1.5}\n",
     "prompt_cache.discount must be a fraction above 0 and at most 1"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {discount: 0}\n", "prompt_cache.discount"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {discount: 0.5, ttl: 300}\n",
     "prompt_cache.ttl must be a positive lifetime like 5m"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {discount: 0.5, ttl: 5 weeks}\n",
     "prompt_cache.ttl"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {discount: 0.5, min_tokens: 0}\n",
     "prompt_cache.min_tokens must be a whole number of tokens >= 1"),
    (doc() + "prefill: {tps: 50000}\nprompt_cache: {discount: 0.5, lifetime: 5m}\n",
     "unknown key 'prompt_cache.lifetime'"),
    (doc() + "context: 64000\n", "context must be a mapping"),
    (doc() + "context: {}\n", "missing required key 'context.half_rate_at'"),
    (doc() + "context: {half_rate_at: 0}\n", "context.half_rate_at must be a whole number"),
    (doc() + "context: {half_rate_at: lots}\n", "context.half_rate_at"),
    (doc() + "context: {half_rate: 64k}\n", "unknown key 'context.half_rate' (did you mean"),
    (doc() + "reasoning: {hidden_tokens: 800}\n", "reasoning.hidden_tokens must be a mapping"),
    (doc() + "reasoning: {}\n", "reasoning: give levels (low, medium, high)"),
    (doc() + "reasoning: {levels: {extreme: {p50: 1, p90: 2, p99: 3}}}\n",
     "unknown key 'reasoning.levels.extreme'"),
    (doc() + "reasoning: {levels: {low: {p50: 1, p90: 2, p99: 3}}, default: high}\n",
     "reasoning.default must be off or a declared level (low), got 'high'"),
    (doc() + "reasoning: {hidden_tokens: {p50: 1, p90: 2, p99: 3}, default: \"off\"}\n",
     "give either hidden_tokens"),
    (doc() + "reasoning: {hidden_tokens: {p50: 800, p90: 3000}}\n",
     "missing required key 'reasoning.hidden_tokens.p99'"),
    (doc() + "reasoning: {hidden_tokens: {p50: 800, p90: 300, p99: 8000}}\n",
     "reasoning.hidden_tokens quantiles must increase"),
    (doc() + "reasoning: {hidden_tokens: {p50: -1, p90: 300, p99: 8000}}\n",
     "reasoning.hidden_tokens.p50 must be a positive number of tokens"),
    (doc() + "reasoning: {visible_tokens: 3}\n", "unknown key 'reasoning.visible_tokens'"),
    (doc() + "stalls: {duration: {p50: 1s, p90: 2s, p99: 3s}}\n",
     "missing required key 'stalls.per_1000_tokens'"),
    (doc() + "stalls: {per_1000_tokens: 0, duration: {p50: 1s, p90: 2s, p99: 3s}}\n",
     "stalls.per_1000_tokens must be a number above 0 and at most 1000"),
    (doc() + "stalls: {per_1000_tokens: 2000, duration: {p50: 1s, p90: 2s, p99: 3s}}\n",
     "stalls.per_1000_tokens"),
    (doc() + "stalls: {per_1000_tokens: 1}\n", "missing required key 'stalls.duration'"),
    (doc() + "stalls: {per_1000_tokens: 1, duration: {p50: 1s, p90: 2s, p99: 1s}}\n",
     "stalls.duration quantiles must increase"),
    (doc() + "stalls: {per_1000_tokens: 1, duration: {p50: 1h, p90: 2s, p99: 3s}}\n",
     "stalls.duration.p50 must be a positive duration"),
    (doc() + "stalls: {per_1000_tokens: 1, duration: {p50: 1s, p90: 2s, p99: 3s}, where: middle}\n",
     "stalls.where must be any, early or late, got 'middle'"),
    (doc() + "stalls: {per_1000_tokens: 1, duration: 1s}\n", "stalls.duration must be a mapping"),
    (doc() + "speculative: {draft_tokens: 3}\n",
     "missing required key 'speculative.acceptance'"),
    (doc() + "speculative: {draft_tokens: 0, acceptance: 0.5}\n", "speculative.draft_tokens"),
    (doc() + "speculative: {draft_tokens: 40, acceptance: 0.5}\n",
     "speculative.draft_tokens must be at most 16"),
    (doc() + "speculative: {draft_tokens: 3, acceptance: 1}\n",
     "speculative.acceptance must be a probability above 0 and below 1"),
    (doc() + "speculative: {draft_tokens: 3, acceptance: 0}\n", "speculative.acceptance"),
    (doc() + "speculative: {draft_tokens: 3, acceptance: 0.5}\nchunking: {1: 1.0}\n",
     "chunking and speculative both set tokens per event"),
    (doc() + "passthrough: true\n" + "prefill: {tps: 1000}\n", "takes no timing keys"),
]


@pytest.mark.parametrize("text,expected", BROKEN, ids=[f"broken{i}" for i in range(len(BROKEN))])
def test_broken_profile_fails_in_one_line_naming_file_and_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_profile(str(f))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{f}: ")
    assert expected in message


def test_the_good_base_document_loads(tmp_path: Path) -> None:
    f = tmp_path / "good.yaml"
    f.write_text(doc())
    assert load_profile(str(f)).name == "x"  # so each BROKEN case fails for its own reason


def test_unknown_name_and_missing_file() -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("cerebrus")
    assert str(e.value).startswith("unknown profile 'cerebrus' (")
    assert "retimer profiles" in str(e.value) and "cerebras" in str(e.value)
    with pytest.raises(ProfileError, match="^nowhere/x.yaml: no such profile file$"):
        load_profile("nowhere/x.yaml")
    assert issubclass(ProfileError, ValueError)


# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize("text,seconds", [
    ("400ms", 0.4), ("2s", 2.0), ("1.5s", 1.5), ("250", 0.25), (250, 0.25), (1.5, 0.0015),
    (" 1.5 S ", 1.5), ("120MS", 0.12), ("0", 0.0), (".5s", 0.5), ("1e3ms", 1.0),
])
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["-1s", "-5", -5, "abc", "1.5h", "", "ms", "nan", "inf", "1s2",
                                 True, None, float("inf")])
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(ProfileError) as e:
        parse_duration(bad)  # type: ignore[arg-type]
    assert "\n" not in str(e.value) and "duration" in str(e.value)


@pytest.mark.parametrize("text,rate", [("40", 40.0), ("40tok/s", 40.0), ("40 tokens/s", 40.0),
                                       ("12.5 t/s", 12.5), (85, 85.0), ("2100TPS", 2100.0)])
def test_parse_rate(text: str | float, rate: float) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("bad", ["0", "-3", "fast", "", "40 tok/min", True, 0, float("nan"), None])
def test_parse_rate_rejects(bad: object) -> None:
    with pytest.raises(ProfileError) as e:
        parse_rate(bad)  # type: ignore[arg-type]
    assert "\n" not in str(e.value) and "rate" in str(e.value)


def test_profile_needs_timing_unless_passthrough() -> None:
    with pytest.raises(ProfileError):
        Profile("x")
    assert Profile("y", passthrough=True).passthrough


def test_jitter_zero_is_a_metronome() -> None:
    """--jitter 0: TTFT at its median, every gap 1/tps, one token per network event."""
    profile = load_profile("cerebras").with_overrides(ttft="400ms", tps="40", jitter="0")
    timing = profile.stream_timing(np.random.default_rng(1))
    assert timing.ttft == 0.4
    assert {timing.gap() for _ in range(500)} == {1 / 40}
    assert {timing.chunk_size() for _ in range(500)} == {1}
    jittery = load_profile("cerebras").stream_timing(np.random.default_rng(1))
    assert len({jittery.chunk_size() for _ in range(500)}) > 1
