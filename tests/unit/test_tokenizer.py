"""The built-in splitter: lossless on any text, BPE-like pieces, BPE-like counts on prose."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from retimer.wire.tokenizer import LONG_WORD_PIECE, MAX_WORD_PIECE, count_tokens, split_tokens
from tests.support.paths import STREAMS_DIR

STREAMS = STREAMS_DIR

# Characters that stress the pattern: combining marks, emoji with modifiers and joiners,
# CJK, kana, Hangul, Indic signs, digits, every kind of space, punctuation, apostrophes.
TRICKY = (
    "aZéñßø\u0301\u0308\u20dd\u093f\u094d\u0e31"  # letters and combining marks
    "😀👍🏽👨\u200d👩\u200d👧🇫🇷\ufe0f\u2764\U000e0067"  # emoji, skin tone, ZWJ, flag, tag
    "漢字かなカナ한국어\u3002\uff01\U00020000"  # CJK, kana, Hangul, CJK punct., ext. B
    "0123456789٣"  # digits (with an Arabic-Indic one)
    " \t\n\r\u00a0\u2003\u3000"  # spaces
    ".,;:!?'\u2019\"()[]{}<>-_/\\*#@`~^|=+%$&"  # punctuation
    "\U0001d400\U0001f9ff\u00bd\u2070"  # astral letters and symbols, numerics
)


@settings(max_examples=500, deadline=None)
@given(st.text())
@example("")
@example("e\u0301\u0301 x\u0308")
@example("👨\u200d👩\u200d👧 🏳\ufe0f\u200d🌈")
def test_join_is_identity_on_any_text(text: str) -> None:
    pieces = split_tokens(text)
    assert "".join(pieces) == text
    assert all(pieces)
    assert count_tokens(text) == len(pieces)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(TRICKY), max_size=80))
def test_join_is_identity_on_tricky_text(text: str) -> None:
    pieces = split_tokens(text)
    assert "".join(pieces) == text
    assert all(pieces)


def test_lone_surrogates_survive() -> None:
    text = "a\ud800b \udfff."
    assert "".join(split_tokens(text)) == text


@pytest.mark.parametrize("text,pieces", [
    ("Hello world", ["Hello", " world"]),
    ("   hello", ["  ", " hello"]),
    ("12345678", ["123", "456", "78"]),
    ("costs 1,000", ["costs", " ", "1", ",", "000"]),
    ("wait... what?!", ["wait", "...", " what", "?!"]),
    ("don't we'll", ["don", "'t", " we", "'ll"]),
    ("漢字かな", ["漢", "字", "か", "な"]),
    ("한국어", ["한", "국", "어"]),
    ("中文 text", ["中", "文", " text"]),
    ("a\n\nb", ["a", "\n\n", "b"]),
    (" naïve café", [" naïve", " café"]),
    ("e\u0301t\u00e9", ["e\u0301t\u00e9"]),
    ("ok 👍🏽!", ["ok", " ", "👍🏽", "!"]),
])
def test_pieces(text: str, pieces: list[str]) -> None:
    assert split_tokens(text) == pieces


def test_long_words_are_cut_into_short_pieces() -> None:
    short = " abcdefgh"[: MAX_WORD_PIECE + 1]
    assert split_tokens(short) == [short]
    pieces = split_tokens(" internationalization")
    assert pieces[0] == " inte" and len(pieces) >= 3
    assert all(len(p.strip()) <= MAX_WORD_PIECE for p in pieces)
    assert all(len(p.strip()) == LONG_WORD_PIECE for p in pieces[:-1])


def test_whitespace_and_punctuation_runs_stay_together() -> None:
    assert split_tokens("\t\t  \n") == ["\t\t  \n"]
    assert split_tokens("x ```") == ["x", " ```"]


def _responses_text() -> tuple[str, int]:
    """The answer and reasoning-summary text of the long o3-mini Responses capture."""
    deltas = []
    path = STREAMS / "openai-responses" / "reasoning-summary-text-delta-long.sse"
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event.get("type", "").endswith("text.delta"):
                deltas.append(event["delta"])
    return "".join(deltas), len(deltas)


def _anthropic_text() -> str:
    parts = []
    for name in ("llm-anthropic-web-search-server-tool-citations.sse",
                 "pydantic-ai-thinking-stream.sse"):
        for line in (STREAMS / "anthropic" / name).read_text(encoding="utf-8").splitlines():
            if line.startswith("data: "):
                delta = json.loads(line[6:]).get("delta", {})
                if delta.get("type") in ("text_delta", "thinking_delta"):
                    parts.append(delta.get("text") or delta.get("thinking"))
    return "".join(parts)


def test_english_prose_gives_bpe_like_characters_per_token() -> None:
    text, _ = _responses_text()
    assert len(text) > 3000
    assert 3.5 <= len(text) / count_tokens(text) <= 5.0
    other = _anthropic_text()
    assert len(other) > 1500
    assert 3.5 <= len(other) / count_tokens(other) <= 5.0


def test_count_is_near_openais_own_token_count() -> None:
    """OpenAI streams about one BPE token per delta event, so the event count is a real count."""
    text, events = _responses_text()
    assert 0.95 <= count_tokens(text) / events <= 1.25
