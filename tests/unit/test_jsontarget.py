"""JSONTarget: the one record of where an event's text lives, shared by the JSON adapters."""

from __future__ import annotations

from retimer.wire.protocols.jsontarget import JSONTarget, replaced


def test_with_text_copies_the_path_and_keeps_key_order() -> None:
    obj = {"type": "t", "delta": {"kind": "k", "text": "hello", "n": 1}, "list": [{"a": "x"}], "z": 0}
    target = JSONTarget("frame", obj, ("delta", "text"))
    out = target.with_text("he")
    assert out == {"type": "t", "delta": {"kind": "k", "text": "he", "n": 1}, "list": [{"a": "x"}], "z": 0}
    assert list(out) == list(obj) and list(out["delta"]) == list(obj["delta"])
    assert obj["delta"]["text"] == "hello" and out["list"] is obj["list"]  # the original is untouched


def test_mirrors_get_the_same_text() -> None:
    obj = {"d": {"reasoning": "abc", "reasoning_content": "abc", "details": [{"text": "abc", "sig": "s"}]}}
    target = JSONTarget(None, obj, ("d", "reasoning"), (("d", "reasoning_content"), ("d", "details", 0, "text")))
    assert target.with_text("a") == {"d": {"reasoning": "a", "reasoning_content": "a",
                                           "details": [{"text": "a", "sig": "s"}]}}


def test_replaced_through_lists() -> None:
    obj = {"choices": [{"t": "x"}, {"t": "y"}]}
    out = replaced(obj, ("choices", 1, "t"), "z")
    assert out == {"choices": [{"t": "x"}, {"t": "z"}]} and out["choices"][0] is obj["choices"][0]
    assert replaced(obj, (), "whole") == "whole"
