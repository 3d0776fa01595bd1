"""The study page's API rules, request in, answer out. Pure: no I/O, no mitmproxy.

The shell (`retimer.proxy.study.page`) routes `/study/...` and keeps the state; every decision
about what a request may do is made here, from plain values: whether a POST came from the page
itself, whether a message or a rating is well formed, what the participant's progress looks
like to the page, and which headers the study's upstream call carries (none of the browser's).
A request that cannot be done raises `PageRefused` (the status and the one line the
participant reads).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from retimer.study.page import MAX_MESSAGE, PageSettings
from retimer.study.ratings import RatingError, score_of

__all__ = ["PageRefused", "PageRating", "TurnView", "chat_text", "json_body", "page_rating",
           "progress_json", "same_origin", "upstream_headers"]


class PageRefused(Exception):
    """A page action that cannot be done now; str() is the one line the participant reads,
    `status` the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_body(raw: bytes) -> dict[str, object]:
    """A page request's JSON object."""
    try:
        obj = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        raise PageRefused(400, "The request is not valid JSON.") from None
    if not isinstance(obj, dict):
        raise PageRefused(400, "The request is not a JSON object.")
    return obj


def same_origin(content_type: str, sec_fetch_site: str | None, origin: str | None,
                hosts: Iterable[str]) -> bool:
    """A POST from the page itself: a JSON body (a cross-site form cannot send one without a
    preflight), and no browser's word that it came from another site (Sec-Fetch-Site, else an
    Origin other than one of `hosts`, the addresses the browser may have used)."""
    if "application/json" not in content_type:
        return False
    if sec_fetch_site is not None:
        return sec_fetch_site in ("same-origin", "none")
    if not origin:
        return True
    return urlsplit(origin).netloc.lower() in {h.strip().lower() for h in hosts if h}


def chat_text(body: Mapping[str, object]) -> str:
    """The participant's message, as it goes into the conversation."""
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise PageRefused(400, "Please write a message.")
    if len(text) > MAX_MESSAGE:
        raise PageRefused(400, f"Please keep a message under {MAX_MESSAGE} characters.")
    return text.strip()


@dataclass(frozen=True, slots=True)
class PageRating:
    """A rating the page sent, checked against the study's scales."""

    turn: str
    scores: dict[str, int]
    slow: bool | None  # None: the study does not ask


def page_rating(body: Mapping[str, object], settings: PageSettings) -> PageRating:
    """The rating in a page's `api/rate` body: every scale answered (1-7), and the slow
    question when the study asks it."""
    turn, scores, slow = body.get("turn"), body.get("scores"), body.get("slow")
    if not isinstance(turn, str) or not isinstance(scores, dict):
        raise PageRefused(400, "A rating names its response and its scores.")
    values: dict[str, int] = {}
    for scale in settings.scales:
        try:
            score = score_of(scale.name, scores.get(scale.name), strict=True)
        except RatingError as e:
            raise PageRefused(400, f"{e}.") from None
        assert score is not None  # strict: every scale is answered
        values[scale.name] = score
    if settings.slow_question and not isinstance(slow, bool):
        raise PageRefused(400, "Please answer whether the response felt slow.")
    return PageRating(turn, values, slow if settings.slow_question and isinstance(slow, bool) else None)


@dataclass(frozen=True, slots=True)
class TurnView:
    """One turn of the participant's transcript, as the page shows it."""

    turn: str
    task: int
    message: str
    reply: str
    status: str
    rated: bool


def progress_json(settings: PageSettings, consented: bool, task: int, finished: bool,
                  turns: Sequence[TurnView]) -> dict[str, Any]:
    """What `api/state` answers: the page's settings, where the participant is, and their
    transcript (the completion code only once they have finished)."""
    return {**settings.public(), "consented": consented,
            "task": min(task, len(settings.tasks) - 1), "finished": finished,
            "code": settings.code if finished else "",
            "redirect": settings.redirect if finished else "",
            "turns": [{"turn": t.turn, "task": t.task, "message": t.message, "reply": t.reply,
                       "status": t.status, "rated": t.rated} for t in turns]}


def upstream_headers(settings: PageSettings, key: str, host: str | None) -> dict[str, str]:
    """The headers of the study's upstream call: nothing of the browser's (no cookie, no
    origin), the researcher's key in the API's own header."""
    out = {"host": host} if host else {}
    out |= {"content-type": "application/json", "accept": "text/event-stream"}
    if settings.api == "anthropic":
        out |= {"x-api-key": key, "anthropic-version": "2023-06-01"}
    else:
        out["authorization"] = f"Bearer {key}"
    return out
