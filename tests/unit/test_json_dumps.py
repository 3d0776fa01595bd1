"""The compact serialiser split pieces are written with (retimer.wire.protocols.sse_json.dumps)
gives exactly what `json.dumps` with the same options gives, for any JSON value."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from retimer.wire.protocols.sse_json import dumps

# text with lone surrogates (what a broken upstream escape decodes to) and astral characters
TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(TEXT, inner, max_size=4), max_leaves=20)


def reference(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    return text


@given(VALUES)
def test_dumps_is_json_dumps_compact(obj: Any) -> None:
    assert dumps(obj) == reference(obj)


def test_a_value_with_a_lone_surrogate_is_escaped_and_reads_back() -> None:
    obj = {"content": "a\ud800b", "n": [1.5, float("nan"), None]}
    out = dumps(obj)
    assert "\\ud800" in out
    assert out.encode("utf-8")
    back = json.loads(out)
    assert back["content"] == "a\ud800b"
