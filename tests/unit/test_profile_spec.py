"""One grammar for a profile with overrides, shared by `retimer demo` and `retimer whatif`."""

from __future__ import annotations

import pytest

from retimer.profile.loader import load_profile_spec, parse_profile_spec, profile_specs
from retimer.profile.model import ProfileError


@pytest.mark.parametrize("spec", ["o3:thinking=high:ttft=2s", "o3:thinking=high,ttft=2s",
                                  "o3: thinking = high : ttft=2s"])
def test_colons_and_commas_separate_overrides(spec: str) -> None:
    assert parse_profile_spec(spec) == ("o3", {"thinking": "high", "ttft": "2s"})
    p = load_profile_spec(spec)
    assert p.thinking == "high" and p.effective_name.startswith("openai-o3")


def test_a_list_keeps_comma_overrides_with_their_profile() -> None:
    assert profile_specs("cerebras, o3:thinking=high,ttft=2s ,gpt-5:tps=40:speed=2") == [
        "cerebras", "o3:thinking=high,ttft=2s", "gpt-5:tps=40:speed=2"]


@pytest.mark.parametrize("spec, words", [("gpt-5:tsp=3", ["'tsp=3'", "did you mean 'tps'"]),
                                         ("gpt-5:tps", ["'tps'", "key=value"]),
                                         ("gpt-5:tps=", ["'tps='"])])
def test_bad_overrides_are_named(spec: str, words: list[str]) -> None:
    with pytest.raises(ProfileError) as e:
        parse_profile_spec(spec)
    assert str(e.value).startswith(spec) and all(w in str(e.value) for w in words)
