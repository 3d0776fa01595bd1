"""The hosted study page's settings and rules. Pure: no I/O, no mitmproxy.

Why a page: online studies of perceived latency (Zhou et al., C&C '25; Gnewuch et al.) send
participants from a panel to a web app where they chat, rate and get a completion code. The
page is served by the study's own proxy (`retimer.proxy.study.page`), so every response it shows
comes from the real model through retimer's pacing. The server, not the page, decides what goes
upstream: the study's model, system prompt, token cap and the participant's own history, with
the researcher's key, whatever the page sends.

Study file section::

    page:
      api: openai                  # openai (Chat Completions) | anthropic (Messages)
      model: gpt-5-mini            # required: the model every request names
      key_env: OPENAI_API_KEY      # the environment variable holding the researcher's key
      system: You are a helpful assistant.   # optional
      max_tokens: 800              # per response (default 1024)
      max_tokens_field: max_completion_tokens   # openai: or max_tokens (servers that know only it)
      extra_body: {reasoning_effort: minimal}   # further request fields, sent as given
      participant_params: [PROLIFIC_PID, participant]   # URL parameters naming a participant
      title: A study of chat assistants
      consent: |                   # shown first; the participant agrees to go on
        ...
      tasks:                       # one conversation each, in order
        - Ask the assistant for a weekday dinner recipe.
        - {text: Ask what a CSV file is., prompt: What is a CSV file?}   # a fixed first message
      turns: 1                     # rated responses per task before the next one (default 1)
      scales:                      # 1-7 items after each response (default speed, quality)
        - {name: speed, low: very slow, high: very fast}
      slow_question: true          # also ask "Did this response feel slow?" (yes/no)
      completion: {code: C0DE, redirect: "https://app.prolific.com/submissions/complete?cc=C0DE"}
      limits: {turns: 30, output_tokens: 40000, requests_per_minute: 6,   # per participant
               study_requests_per_hour: 600, study_output_tokens_per_hour: 400000,
               new_participants_per_minute: 20}                         # the whole study's
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["APIS", "Limits", "PageError", "PageSettings", "Scale", "cookie_value",
           "parse_page", "reply_text", "upstream_request", "verify_cookie"]

APIS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
KEYS = ("api", "model", "key_env", "system", "max_tokens", "max_tokens_field", "extra_body",
        "participant_params", "title", "consent", "tasks", "turns", "scales", "slow_question",
        "completion", "limits")
# the cap's name in the request: OpenAI's reasoning models (o-series, gpt-5) refuse the older
# `max_tokens` with a 400; servers that know only `max_tokens` set `max_tokens_field`
TOKEN_FIELDS = {"openai": ("max_completion_tokens", "max_tokens"), "anthropic": ("max_tokens",)}
# what the page itself decides in every request: extra_body may not set these
PAGE_FIELDS = frozenset({"model", "messages", "stream", "stream_options", "system", "max_tokens",
                         "max_completion_tokens", "n"})
LIMIT_KEYS = ("turns", "output_tokens", "requests_per_minute", "study_requests_per_hour",
              "study_output_tokens_per_hour", "new_participants_per_minute")
DEFAULT_SCALES = (("speed", "very slow", "very fast"), ("quality", "very poor", "excellent"))
MAX_MESSAGE = 4000  # characters of one message from the page
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_PARAM = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CODE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class PageError(ValueError):
    """A page section that cannot be used; str() is one line naming the key."""


@dataclass(frozen=True)
class Scale:
    name: str
    low: str
    high: str


@dataclass(frozen=True)
class Limits:
    """None: no limit. The first three are per participant; the rest bound the whole study
    (participant ids cost nothing to make up: each new one would have a fresh budget)."""

    turns: int | None = None
    output_tokens: int | None = None
    requests_per_minute: int | None = None
    study_requests_per_hour: int | None = None
    study_output_tokens_per_hour: int | None = None
    new_participants_per_minute: int | None = None


@dataclass(frozen=True)
class PageSettings:
    model: str
    tasks: tuple[str, ...]
    api: str = "openai"
    key_env: str = "OPENAI_API_KEY"
    system: str = ""
    max_tokens: int = 1024
    max_tokens_field: str = "max_completion_tokens"  # "" never: parse_page fills in the API's
    # further fields of every upstream request, as the study file gives them (reasoning_effort)
    extra_body: tuple[tuple[str, object], ...] = ()
    participant_params: tuple[str, ...] = ("PROLIFIC_PID", "participant")
    title: str = "A study of chat assistants"
    consent: str = ""
    turns: int = 1
    scales: tuple[Scale, ...] = tuple(Scale(*s) for s in DEFAULT_SCALES)
    slow_question: bool = False
    code: str = ""
    redirect: str = ""
    limits: Limits = field(default_factory=Limits)
    # each task's fixed first message (None: the participant writes it); with the response cache
    # on (`--cache DIR`) a fixed message's reply is the same for everyone, played at each
    # condition's timing: the content is controlled, every condition feasible
    prompts: tuple[str | None, ...] = ()

    def prompt(self, task: int) -> str | None:
        return self.prompts[task] if 0 <= task < len(self.prompts) else None

    def first_message(self, task: int) -> str:
        """What the pilot sends for `task`: its fixed first message, else the task's text."""
        return self.prompt(task) or self.tasks[task]

    @property
    def path(self) -> str:
        """The upstream API path the page's messages go to."""
        return APIS[self.api]

    def public(self) -> dict[str, object]:
        """What the page may know of the settings (no model, key or system prompt)."""
        return {"title": self.title, "consent": self.consent, "tasks": list(self.tasks),
                "prompts": [self.prompt(i) for i in range(len(self.tasks))],
                "turns_needed": self.turns, "slow_question": self.slow_question,
                "scales": [{"name": s.name, "low": s.low, "high": s.high} for s in self.scales]}


def _show(value: object) -> str:
    text = " ".join((repr(value) if isinstance(value, str) else str(value)).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _text(raw: Mapping[str, object], key: str, default: str | None, limit: int = 20000) -> str:
    value = raw.get(key, default)
    if value is None:
        raise PageError(f"page.{key}: required")
    if not isinstance(value, str) or len(value) > limit:
        raise PageError(f"page.{key}: expected text (at most {limit} characters), got {_show(value)}")
    return value.strip()


def _task(item: object, i: int) -> tuple[str, str | None]:
    """A task: its text, or {text, prompt} with a fixed first message."""
    if isinstance(item, str) and item.strip():
        return item.strip(), None
    if isinstance(item, dict) and set(item) <= {"text", "prompt"}:
        text, prompt = item.get("text"), item.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise PageError(f"page.tasks[{i}].text: expected the task's text, got {_show(text)}")
        if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()
                                   or len(prompt) > 4000):
            raise PageError(f"page.tasks[{i}].prompt: expected the fixed first message (at most "
                            f"4000 characters), got {_show(prompt)}")
        return text.strip(), None if prompt is None else prompt.strip()
    raise PageError(f"page.tasks[{i}]: expected a task's text or {{text, prompt}}, got {_show(item)}")


def _count(raw: Mapping[str, object], key: str, default: int | None, top: int, where: str = "page.") -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise PageError(f"{where}{key}: expected a whole number from 1 to {top}, got {_show(value)}")
    return value


def _scales(raw: object) -> tuple[Scale, ...]:
    if raw is None:
        return tuple(Scale(*s) for s in DEFAULT_SCALES)
    if not isinstance(raw, list) or not 1 <= len(raw) <= 8:
        raise PageError(f"page.scales: expected a list of 1 to 8 scales, got {_show(raw)}")
    scales: list[Scale] = []
    for i, item in enumerate(raw):
        where = f"page.scales[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise PageError(f"{where}: expected a mapping with name, low and high, got {_show(item)}")
        for k in item:
            if k not in ("name", "low", "high"):
                raise PageError(f"{where}.{k}: unknown key (known: name, low, high)")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in ("slow", "stream"):
            raise PageError(f"{where}.name: expected a lower-case name like speed (not slow or "
                            f"stream), got {_show(name)}")
        if name in {s.name for s in scales}:
            raise PageError(f"{where}.name: '{name}' is used twice")
        low, high = item.get("low", "1"), item.get("high", "7")
        if not isinstance(low, str) or not isinstance(high, str):
            raise PageError(f"{where}: low and high are the ends' labels (text)")
        scales.append(Scale(name, low, high))
    return tuple(scales)


def parse_page(raw: object) -> PageSettings | None:
    """The `page:` section (None when absent); errors are one line naming the key."""
    if raw is None or raw is False:
        return None
    if not isinstance(raw, dict):
        raise PageError(f"page: expected a mapping with model and tasks, got {_show(raw)}")
    for k in raw:
        if k not in KEYS:
            raise PageError(f"page.{k}: unknown key (known: {', '.join(KEYS)})")
    api = raw.get("api", "openai")
    if api not in APIS:
        raise PageError(f"page.api: expected one of {', '.join(APIS)}, got {_show(api)}")
    model = _text(raw, "model", None, 200)
    if not model:
        raise PageError("page.model: required: the model every request of the page names")
    key_env = raw.get("key_env", KEY_ENV[str(api)])
    if not isinstance(key_env, str) or not _ENV.fullmatch(key_env):
        raise PageError(f"page.key_env: expected an environment variable's name, got {_show(key_env)}")
    params = raw.get("participant_params", ["PROLIFIC_PID", "participant"])
    if isinstance(params, str):
        params = [params]
    if not isinstance(params, list) or not params or \
            not all(isinstance(p, str) and _PARAM.fullmatch(p) for p in params):
        raise PageError(f"page.participant_params: expected URL parameter names, got {_show(params)}")
    tasks_raw = raw.get("tasks")
    if not isinstance(tasks_raw, list) or not tasks_raw:
        raise PageError(f"page.tasks: expected a list of task texts (one conversation each), "
                        f"got {_show(tasks_raw)}")
    tasks, prompts = [], []
    for i, item in enumerate(tasks_raw):
        text, prompt = _task(item, i)
        tasks.append(text)
        prompts.append(prompt)
    completion = raw.get("completion", {}) or {}
    if not isinstance(completion, dict) or set(completion) - {"code", "redirect"}:
        raise PageError(f"page.completion: expected a mapping with code and redirect, got "
                        f"{_show(completion)}")
    code = completion.get("code", "")
    if not isinstance(code, str) or (code and not _CODE.fullmatch(code)):
        raise PageError(f"page.completion.code: expected letters, digits, '_' or '-', got {_show(code)}")
    redirect = completion.get("redirect", "")
    if not isinstance(redirect, str) or (redirect and not redirect.startswith("https://")):
        raise PageError(f"page.completion.redirect: expected an https:// address, got {_show(redirect)}")
    limits_raw = raw.get("limits", {}) or {}
    if not isinstance(limits_raw, dict):
        raise PageError(f"page.limits: expected a mapping with {', '.join(LIMIT_KEYS)}, got "
                        f"{_show(limits_raw)}")
    for k in limits_raw:
        if k not in LIMIT_KEYS:
            raise PageError(f"page.limits.{k}: unknown key (known: {', '.join(LIMIT_KEYS)})")
    limits = Limits(*(_count(limits_raw, k, None, 10**9, "page.limits.") for k in LIMIT_KEYS))
    slow = raw.get("slow_question", False)
    if not isinstance(slow, bool):
        raise PageError(f"page.slow_question: expected true or false, got {_show(slow)}")
    max_tokens = _count(raw, "max_tokens", 1024, 100000)
    fields = TOKEN_FIELDS[str(api)]
    token_field = raw.get("max_tokens_field", fields[0])
    if token_field not in fields:
        raise PageError(f"page.max_tokens_field: expected {' or '.join(fields)} for api "
                        f"{api}, got {_show(token_field)}")
    extra_raw = raw.get("extra_body", {}) or {}
    if not isinstance(extra_raw, dict) or not all(isinstance(k, str) for k in extra_raw):
        raise PageError(f"page.extra_body: expected a mapping of request fields (e.g. "
                        f"reasoning_effort: minimal), got {_show(extra_raw)}")
    if taken := sorted(set(extra_raw) & PAGE_FIELDS):
        raise PageError(f"page.extra_body.{taken[0]}: set by the page itself (model, max_tokens, "
                        "system, the messages and streaming are its own keys)")
    extra = tuple(extra_raw.items())
    turns = _count(raw, "turns", 1, 100)
    assert max_tokens is not None and turns is not None  # they have defaults
    needed = len(tasks) * turns
    if limits.turns is not None and limits.turns < needed:
        raise PageError(f"page.limits.turns: {limits.turns} messages cannot finish the study: "
                        f"page.tasks ({len(tasks)}) x page.turns ({turns}) need at least {needed} "
                        "(more lets a participant ask again after an interrupted reply)")
    return PageSettings(
        model=model, tasks=tuple(tasks), prompts=tuple(prompts), api=str(api), key_env=key_env,
        system=_text(raw, "system", ""), max_tokens=max_tokens, max_tokens_field=str(token_field),
        extra_body=extra, participant_params=tuple(params),
        title=_text(raw, "title", "A study of chat assistants", 200),
        consent=_text(raw, "consent", ""), turns=turns, scales=_scales(raw.get("scales")),
        slow_question=slow, code=code, redirect=redirect, limits=limits)


def upstream_request(settings: PageSettings, history: Sequence[tuple[str, str]]) -> bytes:
    """The body sent upstream for a page turn: the study's model, cap and system prompt, and
    the participant's conversation (`(role, text)`, user first, the new message last)."""
    messages = [{"role": role, "content": text} for role, text in history]
    body: dict[str, object] = dict(settings.extra_body)
    body.update({"model": settings.model, "stream": True,
                 settings.max_tokens_field: settings.max_tokens})
    if settings.api == "anthropic":
        if settings.system:
            body["system"] = settings.system
        body["messages"] = messages
    else:
        system = [{"role": "system", "content": settings.system}] if settings.system else []
        body["messages"] = system + messages
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def reply_text(api: str, body: bytes) -> str:
    """The answer's text in a captured stream of the page's API (what the transcript keeps)."""
    from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
    from retimer.wire.protocols.base import Channel
    from retimer.wire.protocols.openai_chat import OpenAIChatAdapter

    adapter = AnthropicMessagesAdapter() if api == "anthropic" else OpenAIChatAdapter()
    try:
        events = adapter.feed(body) + adapter.end()
    except ValueError:
        return ""
    return "".join(t for e in events for ch, t in e.texts if ch is Channel.TEXT)


def _mac(secret: bytes, participant: str) -> str:
    return hmac.new(secret, participant.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def cookie_value(secret: bytes, participant: str) -> str:
    """The page's cookie for a participant: their id and its MAC, so it cannot name another."""
    return f"{participant}.{_mac(secret, participant)}"


def verify_cookie(secret: bytes, value: str) -> str | None:
    """The participant a cookie names, or None when it was not made with `secret`."""
    participant, _, mac = value.rpartition(".")
    if not participant or not hmac.compare_digest(mac, _mac(secret, participant)):
        return None
    return participant
