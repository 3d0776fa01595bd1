"""The study page's API rules (retimer.study.page_api): plain values in, answers out."""

from __future__ import annotations

import json

import pytest

from retimer.study.page import MAX_MESSAGE, parse_page
from retimer.study.page_api import (
    PageRefused,
    TurnView,
    chat_text,
    json_body,
    page_rating,
    progress_json,
    same_origin,
    upstream_headers,
)
from retimer.study.ratings import RatingError, parse_rating, score_of

SETTINGS = parse_page({"model": "m", "tasks": ["a", "b"], "slow_question": True,
                       "completion": {"code": "C0DE"}})
OPENAI_ONLY = parse_page({"model": "m", "tasks": ["a"], "scales": [{"name": "speed"}]})
ANTHROPIC = parse_page({"api": "anthropic", "model": "m", "tasks": ["a"]})
assert SETTINGS is not None and OPENAI_ONLY is not None and ANTHROPIC is not None


def refused(call: object, *args: object) -> tuple[int, str]:
    with pytest.raises(PageRefused) as e:
        call(*args)  # type: ignore[operator]
    return e.value.status, str(e.value)


@pytest.mark.parametrize(("ctype", "site", "origin", "ok"), [
    ("application/json", "same-origin", None, True),
    ("application/json", "none", None, True),  # typed into the address bar
    ("application/json", "cross-site", "https://study.example", False),  # Sec-Fetch-Site wins
    ("application/json", None, "https://study.example", True),
    ("application/json", None, "https://STUDY.example", True),
    ("application/json", None, "https://evil.example", False),
    ("application/json", None, None, True),  # no browser word either way
    ("application/x-www-form-urlencoded", "same-origin", None, False),  # a form: never
])
def test_only_the_page_itself_may_post(ctype: str, site: str | None, origin: str | None, ok: bool) -> None:
    assert same_origin(ctype, site, origin, ["study.example", ""]) is ok


def test_a_message_is_text_within_the_limit() -> None:
    assert chat_text({"text": "  hi there \n"}) == "hi there"
    assert refused(chat_text, {"text": "   "}) == (400, "Please write a message.")
    assert refused(chat_text, {"text": 5}) == (400, "Please write a message.")
    assert refused(chat_text, {"text": "x" * (MAX_MESSAGE + 1)})[0] == 400
    assert refused(json_body, b"[1]") == (400, "The request is not a JSON object.")
    assert refused(json_body, b"{") == (400, "The request is not valid JSON.")
    assert json_body(b"") == {}


def test_a_rating_answers_every_scale_and_the_slow_question() -> None:
    assert SETTINGS is not None
    good = page_rating({"turn": "t1", "scores": {"speed": 7, "quality": 1}, "slow": False}, SETTINGS)
    assert (good.turn, good.scores, good.slow) == ("t1", {"speed": 7, "quality": 1}, False)
    assert refused(page_rating, {"turn": "t1", "scores": {"speed": 9, "quality": 1}, "slow": True},
                   SETTINGS) == (400, "speed: expected 1-7, got 9.")
    for bad in (True, "5", 4.5, None):  # the page sends whole numbers: nothing else passes
        status, line = refused(page_rating, {"turn": "t", "scores": {"speed": bad, "quality": 1},
                                             "slow": True}, SETTINGS)
        assert (status, line) == (400, "speed: expected a whole number 1-7.")
    assert refused(page_rating, {"turn": "t", "scores": {"speed": 1, "quality": 1}}, SETTINGS) == (
        400, "Please answer whether the response felt slow.")
    assert refused(page_rating, {"scores": {}}, SETTINGS)[0] == 400
    assert OPENAI_ONLY is not None  # a study that does not ask keeps no answer to it
    assert page_rating({"turn": "t", "scores": {"speed": 2}, "slow": True}, OPENAI_ONLY).slow is None


def test_the_two_rating_pages_share_one_rule_for_a_score() -> None:
    assert score_of("speed", "5") == 5 and score_of("speed", "") is None  # the form's text
    assert score_of("speed", 5, strict=True) == 5
    with pytest.raises(RatingError, match="expected a whole number"):
        score_of("speed", "5", strict=True)
    with pytest.raises(RatingError, match="expected 1-7, got 0"):
        score_of("speed", "0")
    assert parse_rating(b"stream=s1&speed=3&quality=&slow=no", "")[1] == {
        "slow": False, "speed": 3, "quality": None}


def test_progress_shows_the_code_only_once_finished() -> None:
    assert SETTINGS is not None
    turn = TurnView("t1", 0, "hi", "hello", "done", False)
    going = progress_json(SETTINGS, True, 5, False, [turn])
    assert going["task"] == 1 and going["code"] == "" and going["turns"] == [
        {"turn": "t1", "task": 0, "message": "hi", "reply": "hello", "status": "done", "rated": False}]
    done = progress_json(SETTINGS, True, 2, True, [])
    assert done["finished"] and done["code"] == "C0DE" and done["title"] == SETTINGS.title


def test_the_upstream_call_carries_the_researchers_key_and_nothing_of_the_browsers() -> None:
    assert SETTINGS is not None and ANTHROPIC is not None
    assert upstream_headers(SETTINGS, "sk-1", "api.example") == {
        "host": "api.example", "content-type": "application/json", "accept": "text/event-stream",
        "authorization": "Bearer sk-1"}
    assert upstream_headers(ANTHROPIC, "sk-2", None) == {
        "content-type": "application/json", "accept": "text/event-stream", "x-api-key": "sk-2",
        "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("extra, cap", [
    ({}, ("max_completion_tokens", 800)),  # OpenAI's current name: its reasoning models need it
    ({"max_tokens_field": "max_tokens"}, ("max_tokens", 800)),  # a server that knows only this one
    ({"api": "anthropic"}, ("max_tokens", 800)),
])
def test_the_upstream_call_names_the_cap_as_its_api_does_and_adds_the_extra_fields(
        extra: dict[str, object], cap: tuple[str, int]) -> None:
    from retimer.study.page import upstream_request

    settings = parse_page({"model": "gpt-5-mini", "tasks": ["a"], "max_tokens": 800, "system": "Be brief.",
                           "extra_body": {"reasoning_effort": "minimal", "metadata": {"study": "s"}},
                           **extra})
    body = json.loads(upstream_request(settings, [("user", "hi")]))
    names = {"max_tokens", "max_completion_tokens"}
    assert {k: body[k] for k in names if k in body} == dict([cap])
    assert (body["model"], body["stream"], body["reasoning_effort"], body["metadata"]) == (
        "gpt-5-mini", True, "minimal", {"study": "s"})
    assert body["messages"][-1] == {"role": "user", "content": "hi"}
