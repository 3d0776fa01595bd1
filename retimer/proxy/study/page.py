"""The hosted study page (`page:` in the study file, reverse mode): `/study/` on the proxy.

A participant opens `https://STUDY-HOST/study/?PROLIFIC_PID=...`; the id goes into a signed
cookie (retimer.study.page.cookie_value) and out of the address. The page's API:

    GET  /study/api/state     the participant's progress (consent, task, turns)
    POST /study/api/consent   they agreed
    POST /study/api/chat      {"text": ...}: rewritten here into the study's own upstream call
                              (model, cap, system prompt, server-kept history, the researcher's
                              key) and then handled like any other request: the Study addon
                              gives it the participant's condition, the Retimer addon paces it
    POST /study/api/rate      {"turn", "scores", "slow"}: stored once, written to the log
    POST /study/api/next      on to the next task, or the completion code

The state (retimer.proxy.study.page_state) lives in the study's state database, so any worker or
instance can answer any request of any participant. What a request may do is decided by the
pure rules of retimer.study.page_api; this routes, keeps the state and writes the records.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import time
from datetime import UTC, datetime

from mitmproxy import ctx, exceptions, http

from retimer.proxy.hooks import PAGE_TURN_KEY, StreamHandle
from retimer.proxy.study.addon import Study
from retimer.proxy.study.page_keys import (
    ADMIN_ENV,
    ADMIN_FILE,
    SECRET_ENV,
    SECRET_FILE,
    admin_token,
    kept_secret,
)
from retimer.proxy.study.page_responses import (
    headers,
    html_response,
    json_response,
    read_assets,
    redirect,
)
from retimer.proxy.study.page_state import PageState, Progress
from retimer.proxy.study.state import SharedState, UnitFields
from retimer.proxy.study.statedb import StateError, StateUnavailable
from retimer.proxy.study.stateworker import StateWorker
from retimer.proxy.study.units import Link
from retimer.records.reader import LogError, read_lines, read_logs
from retimer.records.schema import ParticipantEvent, Rating, Record, StreamRecord
from retimer.records.writer import RecordSource
from retimer.study.design import StudyDesign, StudyError
from retimer.study.page import PageSettings, cookie_value, reply_text, upstream_request, verify_cookie
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
from retimer.study.page_app import admin_page, app_page, message_page
from retimer.study.status import IDLE_S, IdleParticipant, status_lines, summarize

PREFIX = "/study/"
COOKIE = "retimer_study"
TURN_HEADER = "x-study-turn"


class StudyPage:
    """Serves the study page and turns its messages into the study's upstream calls."""

    def __init__(self, study: Study, records: RecordSource) -> None:
        self.study = study
        self.records = records  # the records log: ratings and milestones go there
        self.settings: PageSettings | None = None
        self.state: PageState | None = None
        self.worker = StateWorker(None)  # the study's, when the page's state is in its database
        self.secret = b""
        self.admin = b""  # the admin view's token
        self.key = ""
        self.assets: dict[str, tuple[bytes, str]] = {}

    def configure(self, updated: set[str]) -> None:
        if not updated & {"retimer_study", "retimer_participant", "retimer_study_state"}:
            return
        self._close()
        self.settings, self.state = None, None
        design = self.study.design
        if design is None or design.page is None:
            return
        settings = design.page
        try:
            if ctx.options.retimer_participant:
                raise StudyError("page: a hosted study takes each participant from their link; "
                                 "start it without --participant")
            if not any(str(m).startswith("reverse:") for m in ctx.options.mode):
                raise StudyError("page: the study page sends the study's requests to the model "
                                 "API: start it with --upstream URL")
            key = os.environ.get(settings.key_env, "")
            if not key:
                raise StudyError(f"page.key_env: {settings.key_env} is not set: the page sends "
                                 "the researcher's API key upstream (set it to any text for a "
                                 "server that needs none)")
            self.secret = kept_secret(ctx.options.confdir, SECRET_ENV, SECRET_FILE)
            self.admin = admin_token(self.secret, design.name, ctx.options.confdir)
            self.assets = read_assets()
        except StudyError as e:
            raise exceptions.OptionsError(str(e)) from None
        shared = self.study.state
        try:  # in the positions' database, with its worker: a turn and its unit commit together
            state = PageState(shared.db if isinstance(shared, SharedState) else ":memory:",
                              design.name)
            fingerprint = hashlib.blake2b(self.secret, digest_size=16,
                                          person=b"retimer-page-key").hexdigest()
            if isinstance(shared, SharedState) and not state.same_secret(fingerprint):
                state.close()
                raise exceptions.OptionsError(
                    f"--study-state: the other instances of this study sign their cookies with "
                    f"another secret: give every instance the same {SECRET_ENV} (or confdir), "
                    "or participants moving between instances lose their session")
        except StateError as e:
            raise exceptions.OptionsError(f"--study-state: {e}") from None
        self.worker = self.study.worker if isinstance(shared, SharedState) else StateWorker(None)
        self.key, self.settings, self.state = key, settings, state

    def done(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.state is not None:
            self.state.close()  # the study's own database stays open: the study closes it

    # -- routing ---------------------------------------------------------------------------
    async def request(self, flow: http.HTTPFlow) -> None:
        settings, design = self.settings, self.study.design
        if settings is None or design is None or flow.response is not None:
            return
        path = flow.request.path.split("?", 1)[0]
        if path == PREFIX.rstrip("/"):
            flow.response = redirect(PREFIX + _query(flow))
            return
        if not path.startswith(PREFIX):
            return
        route = path[len(PREFIX):]
        if route == "":
            self._front(flow, settings, design)
            return
        if route in self.assets and flow.request.method == "GET":
            body, ctype = self.assets[route]
            flow.response = http.Response.make(200, body, {**headers(ctype),
                                                           "cache-control": "max-age=3600"})
            return
        if route in ("admin", "admin.json") and flow.request.method == "GET":
            flow.response = await self._admin(flow, design, route == "admin.json")
            return
        participant = self._cookie(flow)
        if participant is None:
            flow.response = json_response(401, {"error": "Open the study from the link you were "
                                                "given (your session is missing or not valid)."})
            return
        method = flow.request.method
        if method == "POST" and not self._same_origin(flow):
            flow.response = json_response(403, {"error": "This page's actions come from the page "
                                                "only."})
            return
        state = self.state
        assert state is not None  # configured with the settings
        try:
            if route == "api/state" and method == "GET":
                progress = await self.worker.call(lambda: state.progress(participant), "the page's state")
                flow.response = json_response(200, self._progress(progress, settings))
            elif route == "api/consent" and method == "POST":
                newcomers = settings.limits.new_participants_per_minute
                if await self.worker.call(lambda: state.consent(participant, time.time(), newcomers),
                                          "a consent"):
                    self._note(design, participant, "consented")
                flow.response = json_response(200, {"ok": True})
            elif route == "api/chat" and method == "POST":
                await self._chat(flow, participant, settings, state)
            elif route == "api/rate" and method == "POST":
                flow.response = await self._rate(flow, participant, design, state)
            elif route == "api/next" and method == "POST":
                turns, tasks = settings.turns, len(settings.tasks)
                if await self.worker.call(lambda: state.next_task(participant, turns, tasks, time.time()),
                                          "a move to the next task"):
                    self._note(design, participant, "finished")
                flow.response = json_response(200, {"ok": True})
            else:
                flow.response = json_response(404, {"error": f"no such page: {route}"})
        except PageRefused as e:
            flow.response = json_response(e.status, {"error": str(e)})
        except StateUnavailable as e:  # nothing acknowledged, nothing sent upstream
            self.study.warn(f"retimer study: the study page's state is unavailable, the page is "
                            f"answered 503 and retries ({e})")
            flow.response = json_response(503, {"error": "The study is briefly unavailable: "
                                                "please try again in a moment."})
            flow.response.headers["retry-after"] = "2"

    def _front(self, flow: http.HTTPFlow, settings: PageSettings, design: StudyDesign) -> None:
        """`/study/`: from a link with the participant's id, set the cookie and drop the id
        from the address; with a valid cookie, the page; else a one-line page."""
        query = flow.request.query
        named = next((query[p] for p in settings.participant_params if query.get(p)), None)
        if named is not None:
            try:
                design.check_participant(named.strip(), "participant")
            except StudyError:
                flow.response = html_response(400, message_page(
                    settings.title, "This link's participant id is not valid: please use the "
                    "link from your invitation as it was given."))
                return
            flow.response = redirect(PREFIX)
            secure = "; Secure" if _https(flow) else ""
            flow.response.headers["set-cookie"] = (
                f"{COOKIE}={cookie_value(self.secret, named.strip())}; Path={PREFIX}; HttpOnly; "
                f"SameSite=Strict; Max-Age=604800{secure}")
            return
        if self._cookie(flow) is None:
            flow.response = html_response(400, message_page(
                settings.title, "Please open this study from the link you were given."))
            return
        flow.response = html_response(200, app_page(settings.title))

    def _cookie(self, flow: http.HTTPFlow) -> str | None:
        value = flow.request.cookies.get(COOKIE)
        return verify_cookie(self.secret, value) if value else None

    @staticmethod
    def _same_origin(flow: http.HTTPFlow) -> bool:
        """A POST from the page itself (page_api.same_origin); in reverse mode mitmproxy has put
        the upstream in Host, so the front end's X-Forwarded-Host counts too."""
        req = flow.request
        return same_origin(req.headers.get("content-type", ""), req.headers.get("sec-fetch-site"),
                           req.headers.get("origin"),
                           (req.host_header or "", req.headers.get("x-forwarded-host", "")))

    @staticmethod
    def _progress(p: Progress, settings: PageSettings) -> dict[str, object]:
        return progress_json(settings, p.consented, p.task, p.finished, [
            TurnView(t.turn, t.task, t.message, t.reply, t.status, t.rated) for t in p.turns])

    # -- a message: the study's own upstream call --------------------------------------------
    async def _chat(self, flow: http.HTTPFlow, participant: str, settings: PageSettings,
                    state: PageState) -> None:
        """Begin the turn and its unit in one job (one transaction when they share a
        database: a turn never starts without its unit, nor a unit without its turn), then
        send the study's own upstream call."""
        text = chat_text(json_body(flow.request.get_content(strict=False) or b""))
        limits, design, study = settings.limits, self.study.design, self.study
        assert design is not None  # the page runs only in a study
        req = flow.request
        sent = upstream_headers(settings, self.key, req.host_header)
        now = time.time()

        def job() -> tuple[int, tuple[UnitFields, Link | None]]:
            with state.db.transaction():
                # a task's fixed first message, whatever the page sent (content-controlled)
                message = state.fixed_message(participant, settings.prompts) or text
                task = state.start_turn(participant, flow.id, message, now, len(settings.tasks),
                                        limits.turns, limits.output_tokens,
                                        limits.requests_per_minute,
                                        study_per_hour=limits.study_requests_per_hour,
                                        study_tokens_per_hour=limits.study_output_tokens_per_hour)
                req.headers.clear()  # nothing of the browser's goes upstream: no cookie, no origin
                for name, value in sent.items():
                    req.headers[name] = value
                req.method, req.path = "POST", settings.path
                req.content = upstream_request(settings, [*state.history(participant, task),
                                                          ("user", message)])
                return task, study.assignment(flow, design, participant, f"study page task {task}")()

        started = time.monotonic()
        turn = flow.id
        _, assigned = await self.worker.call(  # the page resends it: this turn is then broken
            job, "a message's turn and unit", undo=lambda _: state.finish_turn(turn, "", False, 0))
        flow.metadata[PAGE_TURN_KEY] = flow.id
        study.apply(flow, assigned, time.monotonic() - started)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if PAGE_TURN_KEY in flow.metadata and flow.response is not None:
            flow.response.headers[TURN_HEADER] = flow.id  # the page rates the turn by it
            flow.response.headers["cache-control"] = "no-store"

    def retimer_stream_start(self, flow: http.HTTPFlow, stream: StreamHandle) -> None:
        if PAGE_TURN_KEY in flow.metadata:
            stream.keep_body()  # the reply's text joins the server-kept history

    def retimer_stream_done(self, flow: http.HTTPFlow, stream: StreamHandle, record: StreamRecord) -> None:
        if PAGE_TURN_KEY not in flow.metadata or self.settings is None or self.state is None:
            return
        body = stream.body or b""
        tokens = record.emitted.tokens if record.emitted is not None else None
        self._finish(flow.id, reply_text(self.settings.api, body), record.outcome == "complete",
                     tokens or 0, record.condition, record.unit)

    def _finish(self, turn: str, reply: str, ok: bool, tokens: int = 0,
                condition: str | None = None, unit: int | None = None) -> None:
        """The turn is over: kept until the database takes it (the page polls till then)."""
        state = self.state
        assert state is not None
        now = time.time()
        self.worker.keep(lambda: state.finish_turn(turn, reply, ok, tokens, condition, unit, now),
                         "a reply's end")

    def response(self, flow: http.HTTPFlow) -> None:
        """A turn that got no stream (an upstream error) is over: the page may send again."""
        if PAGE_TURN_KEY in flow.metadata and self.state is not None and flow.response is not None \
                and not flow.response.stream:
            self._finish(flow.id, "", False)

    def error(self, flow: http.HTTPFlow) -> None:
        if PAGE_TURN_KEY in flow.metadata and self.state is not None:
            self._finish(flow.id, "", False)

    # -- ratings -----------------------------------------------------------------------------
    async def _rate(self, flow: http.HTTPFlow, participant: str, design: StudyDesign,
                    state: PageState) -> http.Response:
        assert self.settings is not None
        rating = page_rating(json_body(flow.request.get_content(strict=False) or b""), self.settings)
        turn = rating.turn
        log_file = self.records()
        if log_file is None:
            raise PageRefused(503, "Ratings cannot be saved: the study has no records log.")
        found = await self.worker.call(lambda: state.rate(participant, turn), "a rating",
                                       undo=lambda _: state.unrate(participant, turn))
        record = Rating(stream=turn, time=datetime.now(UTC).isoformat(timespec="milliseconds"),
                        scores=rating.scores, slow=rating.slow, study=design.name,
                        participant=participant, condition=found.condition, unit=found.unit,
                        task=found.task)
        if not log_file.write(record):  # acknowledged only once it is in the log
            self.worker.keep(lambda: state.unrate(participant, turn), "a rating taken back")
            raise PageRefused(503, "The rating could not be saved: please try again.")
        self.study.share(record)
        await self.study.answered(participant, found.unit, record)
        return json_response(200, {"ok": True})

    async def _admin(self, flow: http.HTTPFlow, design: StudyDesign, as_json: bool) -> http.Response:
        """The experimenter's view (retimer.study.status), for the bearer of the admin token
        (`Authorization: Bearer` or `?token=`): of the whole study in the shared state (with
        --study-state: the same figures from any instance), else of this instance's log."""
        auth = flow.request.headers.get("authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else \
            flow.request.query.get("token", "")
        if not given or not hmac.compare_digest(given.encode("utf-8"), self.admin):
            return json_response(401, {"error": f"the admin view needs its token ({ADMIN_ENV}, "
                                                f"or the confdir's {ADMIN_FILE})"})
        records: list[Record] = []
        try:
            shared = await self.study.shared_records()
        except StateUnavailable:
            return json_response(503, {"error": "the study's state is briefly unavailable: "
                                                "reload in a moment"})
        if shared is not None:
            records = read_lines(shared, "the study's state").records
        elif (log_file := self.records()) is not None:
            with contextlib.suppress(LogError):
                records = read_logs([log_file.path]).records
        status = summarize(design, records)
        state = self.state
        if state is not None:
            with contextlib.suppress(StateUnavailable):
                status.idle = [IdleParticipant(i.participant, i.task, i.waiting, i.idle_s)
                               for i in await self.worker.call(
                                   lambda: state.idle(time.time(), IDLE_S), "who is idle")]
        if as_json:
            return json_response(200, status.as_json())
        return html_response(200, admin_page(design.name, status_lines(design, status)))

    def _note(self, design: StudyDesign, participant: str, event: str) -> None:
        """A participant's milestone in the records log (for `--status`)."""
        record = ParticipantEvent(design.name, participant, event,
                                  datetime.now(UTC).isoformat(timespec="milliseconds"))
        if (log_file := self.records()) is not None:
            log_file.write(record)
        self.study.share(record)


def _query(flow: http.HTTPFlow) -> str:
    _, _, query = flow.request.path.partition("?")
    return f"?{query}" if query else ""


def _https(flow: http.HTTPFlow) -> bool:
    return flow.request.scheme == "https" or \
        flow.request.headers.get("x-forwarded-proto", "").lower() == "https"
