"""`retimer study STUDY.yaml --pilot N --upstream URL`: is each condition feasible?

Sends N of the study page's own calls (its model, system prompt, max_tokens and each task's
text in turn, with the researcher's key) straight to the upstream, one after another, times
every token's arrival, and prints per condition how many replies would have been upstream-bound
(retimer.study.pilot) with the upstream's own TTFT and rate. Costs N real calls.
"""

from __future__ import annotations

import http.client
import os
import ssl
import sys
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

from retimer.cache.entry import CacheEntry, cache_key, new_entry
from retimer.cache.store import CacheStore
from retimer.profile.model import Profile
from retimer.study.design import StudyDesign, StudyError
from retimer.study.page import PageSettings, upstream_request
from retimer.study.page_api import upstream_headers
from retimer.study.pilot import ConditionVerdict, PilotReply, judge, median
from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.tokenizer import count_tokens

TIMEOUT_S = 120.0


def measure(upstream: str, settings: PageSettings, key: str, message: str,
            ) -> tuple[PilotReply, tuple[str, CacheEntry] | None]:
    """One page call to the upstream (a task's first message), every token's arrival timed
    from the send; and, for a whole reply, its response cache entry under the key the proxy
    computes for the same call from the study page (the same request, whoever sends it)."""
    parts = urlsplit(upstream)
    host = parts.hostname or ""
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=TIMEOUT_S,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=TIMEOUT_S)
    path = parts.path.rstrip("/") + settings.path
    body = upstream_request(settings, [("user", message)])
    headers = upstream_headers(settings, key, None)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    adapter = AnthropicMessagesAdapter() if settings.api == "anthropic" else OpenAIChatAdapter()
    arrivals: list[float] = []
    whole = bytearray()
    try:
        sent = time.monotonic()
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        if response.status != 200:
            return PilotReply((), error=f"HTTP {response.status}"), None
        while chunk := response.read1(65536):
            at = time.monotonic() - sent
            whole += chunk
            for event in adapter.feed(chunk):
                arrivals += [at] * sum(count_tokens(text) for _, text in event.texts)
        for event in adapter.end():
            arrivals += [time.monotonic() - sent] * sum(count_tokens(t) for _, t in event.texts)
    except (OSError, http.client.HTTPException) as e:
        return PilotReply(tuple(arrivals), error=" ".join(str(e).split()) or type(e).__name__), None
    finally:
        conn.close()
    if not arrivals or adapter.api_error or adapter.anomaly is not None \
            or response.getheader("content-encoding"):
        return PilotReply(tuple(arrivals)), None
    key_ = cache_key("POST", parts.scheme, host, port, path, {k.lower(): v for k, v in headers.items()},
                     body)
    entry = new_entry(200, response.reason, response.getheaders(), bytes(whole),
                      url=f"{parts.scheme}://{host}:{port}{path}", method="POST",
                      protocol=adapter.name, created=datetime.now(UTC).isoformat(timespec="seconds"))
    return PilotReply(tuple(arrivals)), (key_, entry)


def report(verdicts: list[ConditionVerdict], replies: list[PilotReply]) -> list[str]:
    """The pilot's lines: the upstream's own timing, then each condition's verdict."""
    good = [r for r in replies if r.error is None and r.arrivals]
    failed = [r.error for r in replies if r.error is not None or not r.arrivals]
    ttft = median([r.ttft_s for r in good if r.ttft_s is not None])
    rate = median([r.tps for r in good if r.tps is not None])
    lines = [f"upstream: {len(good)} of {len(replies)} replies whole; median TTFT "
             f"{'-' if ttft is None else f'{ttft * 1000:.0f} ms'}, median rate "
             f"{'-' if rate is None else f'{rate:.0f} tok/s'}"]
    if failed:
        lines.append(f"  failed: {', '.join(str(f or 'no tokens') for f in failed[:5])}")
    for v in verdicts:
        if v.ttft_s is None or v.tps is None:
            lines.append(f"{v.name}: passthrough (the upstream's own pace)")
            continue
        what = "feasible" if v.feasible else "INFEASIBLE: slower upstream than the condition"
        lines.append(f"{v.name} (TTFT {v.ttft_s * 1000:.0f} ms, {v.tps:g} tok/s): {v.bound} of "
                     f"{v.replies} replies upstream-bound: {what}")
    if any(not v.feasible for v in verdicts if v.ttft_s is not None):
        lines.append("an infeasible condition's units are paced by the upstream, not the "
                     "condition, and left out of the analysis: slow the condition down, or use a "
                     "faster upstream")
    return lines


def run_pilot(design: StudyDesign, profiles: dict[str, Profile], upstream: str, count: int,
              cache: str = "") -> int:
    """--pilot: measure `count` replies, print the verdicts; 1 when a condition is infeasible."""
    settings = design.page
    if settings is None:
        raise StudyError("--pilot: sends the study page's calls (its model and tasks): the "
                         "study has no page:")
    if count < 1:
        raise StudyError(f"--pilot: expected a number of calls >= 1, got {count}")
    if not upstream:
        raise StudyError("--pilot: give --upstream URL (the model API the study will use)")
    key = os.environ.get(settings.key_env, "")
    if not key:
        raise StudyError(f"page.key_env: {settings.key_env} is not set: the pilot sends the "
                         "researcher's API key upstream")
    replies = []
    store = CacheStore(cache) if cache else None
    stored: set[str | None] = set()
    for i in range(count):
        print(f"pilot: call {i + 1} of {count}...", file=sys.stderr, flush=True)
        task = i % len(settings.tasks)
        reply, kept = measure(upstream, settings, key, settings.first_message(task))
        replies.append(reply)
        if store is not None and settings.prompt(task) is not None and kept is not None \
                and settings.prompt(task) not in stored:
            store.put(*kept)  # a fixed message's reply: every participant will get this one
            stored.add(settings.prompt(task))
    verdicts = judge([(c.name, profiles[c.name]) for c in design.conditions], replies)
    for line in report(verdicts, replies):
        print(line)
    if stored:
        print(f"cache: the replies to {len(stored)} fixed first message(s) kept in {cache}: "
              "start the study with --cache there, and every participant gets them")
    return 0 if all(v.feasible for v in verdicts) else 1
