"""The rating page of a study proxy in forward mode: `http://<proxy>/rate` (`ratings: true`).

The participant rates the latest response they got, on speed and quality (retimer.study.ratings
draws the page and reads the form). With one participant per proxy the page is theirs; a proxy
of many participants takes the id from the address (`/rate?participant=P7`), and a page never
rates another participant's response.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import urlencode, urlsplit

from mitmproxy import http

from retimer.proxy.pac import addressed_to_proxy
from retimer.proxy.study.state import MemoryState, SharedState
from retimer.proxy.study.statedb import StateUnavailable
from retimer.proxy.study.stateworker import StateWorker
from retimer.records.schema import Rating
from retimer.records.writer import RecordSource
from retimer.study.design import StudyDesign, StudyError
from retimer.study.ratings import (
    PATH,
    RatingError,
    latest_json,
    parse_rating,
    rating_page,
    rating_record,
)


class RatedStudy(Protocol):
    """What the page needs of the Study addon (retimer.proxy.study.addon.Study)."""

    participant: str  # the proxy's one participant, or "" when each request names its own
    design: StudyDesign | None
    state: MemoryState | SharedState
    worker: StateWorker  # runs the state's calls
    records: RecordSource  # the records log, which takes the ratings

    def share(self, record: Rating) -> None:
        """Keep the rating in the study's shared view too."""

    async def answered(self, participant: str, unit: object, rating: Rating) -> None:
        """A rating was written (a staircase study steps on its answer)."""


class RatingPage:
    """Serves `/rate` for the Study addon, from its state and into its records log."""

    def __init__(self, study: RatedStudy) -> None:
        self.study = study

    async def serve(self, flow: http.HTTPFlow) -> bool:
        """Answer GET/POST http://<proxy>/rate; False for any other request."""
        try:
            return await self._page(flow)
        except StateUnavailable:
            flow.response = _response(503, _json_error("the study's state is unavailable: "
                                                       "try again in a moment"), json_body=True)
            return True

    async def _latest(self, participant: str) -> dict[str, object] | None:
        state = self.study.state
        return await self.study.worker.call(lambda: state.latest(participant), "the latest stream")

    async def _page(self, flow: http.HTTPFlow) -> bool:
        from mitmproxy.proxy.mode_specs import RegularMode

        req = flow.request
        if req.path.split("?", 1)[0] != PATH or req.method not in ("GET", "POST"):
            return False
        sockname = flow.client_conn.sockname
        if not isinstance(flow.client_conn.proxy_mode, RegularMode) or not sockname:
            return False
        if not addressed_to_proxy(req.host, req.port, sockname):
            return False
        study = self.study
        assert study.design is not None  # the page is served in a study only
        stairs = study.design.staircase
        ask = stairs is not None and not stairs.answer.scale  # the staircase's yes/no question
        wants_json = "json" in req.headers.get("accept", "")
        participant, query = study.participant, ""
        if not participant:  # many participants: the page's address names one
            participant = req.query.get("participant", "")
            query = urlencode({"participant": participant})
            try:
                study.design.check_participant(participant, "participant")
            except StudyError as e:
                message = f"{e}: open {PATH}?participant=ID" if not participant else str(e)
                flow.response = _response(400, _json_error(message) if wants_json else
                                          rating_page(None, message, True, ask_slow=ask),
                                          json_body=wants_json)
                return True
        if req.method == "GET":
            latest = await self._latest(participant)
            if "latest" in req.query:
                flow.response = _response(200, latest_json(latest), json_body=True)
            else:
                flow.response = _response(200, rating_page(latest, query=query, ask_slow=ask))
            return True
        status, message = await self._rate(flow, participant)
        if wants_json:
            body = '{"ok": true}' if status == 200 else _json_error(message)
            flow.response = _response(status, body, json_body=True)
        else:
            page = rating_page(await self._latest(participant), message, status != 200, query, ask)
            flow.response = _response(status, page)
        return True

    async def _rate(self, flow: http.HTTPFlow, participant: str) -> tuple[int, str]:
        req = flow.request
        origin = req.headers.get("origin")
        if origin and urlsplit(origin).netloc.lower() != (req.host_header or "").lower():
            return 403, "ratings are taken from this page only"
        log_file = self.study.records()
        if log_file is None:
            return 503, "ratings need a records log (--log)"
        try:
            stream_id, scores = parse_rating(req.get_content(strict=False) or b"",
                                             req.headers.get("content-type", ""))
        except RatingError as e:
            return 400, str(e)
        state = self.study.state
        stream = await self.study.worker.call(lambda: state.rateable_stream(participant, stream_id),
                                              "a stream to rate")
        if stream is None:
            return 409, "that response is no longer known: reload the page"
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        record = rating_record(stream, scores, now)
        if not log_file.write(record):
            return 503, "the rating could not be written down: try again"
        self.study.share(record)
        await self.study.answered(participant, stream.get("unit"), record)
        return 200, "Saved. Thank you."


def _json_error(message: str) -> str:
    return json.dumps({"ok": False, "error": message})


def _response(status: int, body: str, json_body: bool = False) -> http.Response:
    ctype = "application/json" if json_body else "text/html; charset=utf-8"
    return http.Response.make(status, body.encode("utf-8"), {
        "content-type": ctype,
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; connect-src 'self'; form-action 'self'",
    })
