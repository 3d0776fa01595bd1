"""The study addon (`retimer study`, or `--set retimer_study=STUDY.yaml` in mitmdump).

For each request it picks the participant's condition (retimer.study.design) and hands the Retimer
addon that condition's profile and the record fields through `flow.metadata`: the Retimer
addon does the pacing and writes the records, which thereby carry study, participant,
condition and unit. Blinding: nothing here touches a response the participant receives (no
header, no body change); the rating page and the live view say nothing of the condition.

Who: the participant of the proxy (`--participant`), or, when it has none, each request's own
(retimer.study.participants: a header, or the API key looked up in the study's roster). The
header never goes upstream. A request naming nobody is refused with a 403 or passed through
untimed, as the study file says; a malformed id is refused with a 400.

State kept per proxy run and participant (retimer.proxy.study.state): the number of request
units so far, each conversation's position (first-seen order) and the links from ids a response
names (ChatGPT's conversation_id, Responses ids) to the conversation they continue; in memory, or
with `retimer study --workers N` in one sqlite3 file all the run's workers share
(`retimer_study_state`), so a unit's position never depends on which worker took it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader

from retimer.profile.loader import load_profile
from retimer.profile.model import Profile
from retimer.proxy.flows import destination_host, request_body
from retimer.proxy.hooks import PROFILE_KEY, RECORD_KEY, STUDY_LINK_KEY, StreamHandle
from retimer.proxy.study.files import load_roster, load_study
from retimer.proxy.study.rating_page import RatingPage
from retimer.proxy.study.state import (
    MemoryState,
    SharedState,
    StateError,
    StateUnavailable,
    UnitFields,
)
from retimer.proxy.study.stateworker import StateWorker
from retimer.proxy.study.units import Link, following_fields, unit_fields
from retimer.records.notices import INFEASIBLE_CONDITION
from retimer.records.schema import Rating, Record, StreamRecord
from retimer.records.writer import RecordSource, record_line
from retimer.study.conversation import is_unit_request, response_links
from retimer.study.design import StudyDesign, StudyError
from retimer.study.participants import (
    Identified,
    Invalid,
    Roster,
    Unidentified,
    identify,
)
from retimer.study.pilot import RunningFeasibility
from retimer.wire.protocols.base import RequestShape

log = logging.getLogger(__name__)
PAGE_PREFIX = "/study"  # the hosted study page's addresses, when the study has one
WARNED = 20  # distinct refusal reasons logged per run (then silent: no log flood)
WAIT_NOTED_S = 0.05  # a request that waited longer than this for the state says so in its record


class Study:
    """Assigns conditions to flows and serves the rating page.

    The Retimer addon paces each flow with the condition's profile and writes the records; the
    ratings go to `records` (its log); its hooks tell this addon which responses name later
    turns' ids and which streams may be rated."""

    def __init__(self, records: RecordSource) -> None:
        self.records = records
        self.design: StudyDesign | None = None
        self.profiles: dict[str, Profile] = {}
        self.participant = ""  # the proxy's one participant; empty: each request names its own
        self.roster: Roster | None = None
        self.passthrough: Profile | None = None  # for requests naming nobody, policy pass
        self.state: MemoryState | SharedState = MemoryState()
        self.worker = StateWorker(None)  # the state's calls (off the event loop for a database)
        self.instance_seed: int | None = None  # the seed this start draws from, with a shared state
        self.warned: set[str] = set()
        self.feasibility = RunningFeasibility()
        self.rating_page = RatingPage(self)

    def _reset(self, study: str = "") -> None:
        self.worker.close()
        self.state.close()
        self.state, self.worker = MemoryState(), StateWorker(None)
        path = ctx.options.retimer_study_state
        if path and study:
            try:
                self.state = SharedState(path, study)
            except StateError as e:
                raise exceptions.OptionsError(f"--study-state: {e}") from None
            self.worker = StateWorker(self.state.db)

    def done(self) -> None:
        self.worker.close()  # kept writes get a few seconds more
        self.state.close()

    def load(self, loader: Loader) -> None:
        loader.add_option("retimer_study", str, "",
                          "Run the study in this STUDY.yaml.")
        loader.add_option("retimer_participant", str, "",
                          "The participant id of this proxy (empty: each request names its "
                          "participant, by the study's header or roster).")
        loader.add_option("retimer_study_state", str, "",
                          "Where the study's unit positions (and its page's state) live, shared "
                          "by workers and instances: a sqlite3 file or a postgresql:// URL "
                          "(empty: in memory).")

    def configure(self, updated: set[str]) -> None:
        if not updated & {"retimer_study", "retimer_participant", "retimer_study_state"}:
            return
        path, participant = ctx.options.retimer_study, ctx.options.retimer_participant
        self.design, self.profiles, self.participant, self.roster = None, {}, "", None
        self._reset()
        if not path:
            return
        try:
            design, profiles = load_study(path)
            if participant:
                design.check_participant(participant)
            else:
                self.roster = load_roster(design, path)
            self.passthrough = load_profile("passthrough")
        except StudyError as e:
            raise exceptions.OptionsError(str(e)) from None
        self._reset(design.name)
        self.design, self.profiles, self.participant = design, profiles, participant
        self._instance_seed()

    def _instance_seed(self) -> None:
        """With a shared state, each start of an instance or worker draws its own timing: the
        seed becomes the study's seed and a number the state hands out once (the record's
        `seed` says it, so any stream's draw can be made again; a restart draws anew). Without
        one, or with no seed (drawn at random per process), nothing changes."""
        seed = ctx.options.retimer_seed
        if not isinstance(self.state, SharedState) or seed < 0 or seed == self.instance_seed:
            return
        try:
            instance = self.state.next_instance()
        except StateUnavailable as e:
            raise exceptions.OptionsError(f"--study-state: {e}") from None
        digest = hashlib.blake2b(f"{seed}/{instance}".encode(), digest_size=4).digest()
        self.instance_seed = int.from_bytes(digest, "big") & 0x7FFF_FFFF
        ctx.options.update(retimer_seed=self.instance_seed)

    # -- assignment ------------------------------------------------------------------------
    async def request(self, flow: http.HTTPFlow) -> None:
        design = self.design
        if design is None or flow.response is not None:
            return
        if design.ratings and await self.rating_page.serve(flow):
            return
        if PROFILE_KEY in flow.metadata:
            return
        if design.page is not None and flow.request.path.startswith(PAGE_PREFIX):
            return  # the study page's own (retimer.proxy.study.page): it runs assignment()
        participant = self.participant or self._identify(flow, design)
        if participant is not None:
            started = time.monotonic()
            try:
                assigned = await self.worker.call(self.assignment(flow, design, participant),
                                                  "a unit's position")
            except StateUnavailable as e:
                self.unavailable(flow, e)
                return
            self.apply(flow, assigned, time.monotonic() - started)

    def unavailable(self, flow: http.HTTPFlow, error: StateUnavailable) -> None:
        """The state did not answer in time: the request is refused with a "try again" (503)
        and goes nowhere, so no unit passes untimed and the participant's sequence keeps the
        design's order (the API clients retry a 503; the study page does)."""
        self.warn(f"retimer study: the study's state is unavailable, requests are answered "
                  f"503 (try again) ({error})")
        flow.response = _refusal(503, "the study is briefly unavailable: please try again in "
                                 "a moment")
        flow.response.headers["retry-after"] = "2"

    def assignment(self, flow: http.HTTPFlow, design: StudyDesign, participant: str,
                   conversation: str | None = None,
                   ) -> Callable[[], tuple[UnitFields, Link | None]]:
        """The job (for `worker.call`, inside a transaction with anything it is part of) that
        finds the flow's fields: a unit's, or the participant's latest unit's; `conversation`
        names its conversation when the caller knows it (the study page's task)."""
        req = flow.request
        headers = {k.lower(): v for k, v in req.headers.items()}
        if req.stream:
            shape = RequestShape(req.method, destination_host(flow), req.path, headers, b"")
        else:
            shape = RequestShape.of_body(req.method, destination_host(flow), req.path, headers, request_body(flow))
        unit = is_unit_request(shape, req.headers.get("upgrade", "").lower() == "websocket")

        def job() -> tuple[UnitFields, Link | None]:
            with self.state.transaction():  # the position and the latest unit, together
                if not unit:
                    return following_fields(self.state, design, participant), None
                fields, link = unit_fields(self.state, design, shape, participant, conversation, flow.id)
                self.state.set_current(participant, fields)
            return fields, link
        return job

    def apply(self, flow: http.HTTPFlow, assigned: tuple[UnitFields, Link | None],
              waited: float) -> None:
        """Give the flow its condition's profile and record fields (on the event loop)."""
        fields, link = assigned
        condition = fields["condition"]
        assert condition is not None  # an identified participant's fields name one
        if link is not None:
            flow.metadata[STUDY_LINK_KEY] = link
        if waited > WAIT_NOTED_S:
            fields = {**fields, "state_wait_ms": round(waited * 1000.0, 1)}
        flow.metadata[PROFILE_KEY] = self.profiles[condition]
        flow.metadata[RECORD_KEY] = fields

    def _identify(self, flow: http.HTTPFlow, design: StudyDesign) -> str | None:
        """The request's participant; None when it names nobody usable, after refusing it or
        marking it to pass through untimed, as the study's policy says. A hosted study's
        requests outside its page name nobody (the page's cookie does), unless the study
        file's `participants.beside_page` lets a header or roster name them."""
        req = flow.request
        policy = design.participants
        headers = {k.lower(): v for k, v in req.headers.items()}
        if design.page is not None and not policy.beside_page:
            who: Identified | Unidentified | Invalid = Unidentified(
                "a request outside the study page (participants.beside_page is off)")
        else:
            who = identify(policy, self.roster, headers, dict(req.query))
        req.headers.pop(policy.header, None)  # the participant's id never goes upstream
        if isinstance(who, Identified):
            try:
                design.check_participant(who.participant, policy.header)
                return who.participant
            except StudyError as e:
                who = Invalid(str(e))
        self.warn(f"retimer study: a request named no participant ({who.reason})")
        if isinstance(who, Invalid):
            flow.response = _refusal(400, who.reason)
        elif policy.unidentified == "refuse":
            flow.response = _refusal(403, f"{who.reason}: this study serves its participants only")
        else:
            assert self.passthrough is not None  # loaded with the study when there is no --participant
            flow.metadata[PROFILE_KEY] = self.passthrough
            flow.metadata[RECORD_KEY] = {"study": design.name, "participant": None,
                                         "condition": None, "unit": None}
        return None

    def warn(self, message: str) -> None:
        """Each distinct message once (at most WARNED of them: no log flood)."""
        if message not in self.warned and len(self.warned) < WARNED:
            self.warned.add(message)
            log.warning(message)

    async def answered(self, participant: str, unit: object, rating: Rating) -> None:
        """A rating was written: in a staircase study, its answer sets the participant's next
        level (a unit's first answer counts). Stored before the rating is acknowledged, so the
        next unit's level follows it whichever worker or instance takes that unit; kept for
        later if the state does not answer in time (the rating is in the log already)."""
        design = self.design
        if design is None or design.staircase is None or not isinstance(unit, int):
            return
        slow = design.staircase.answer.of(rating)
        if slow is None:
            return
        state = self.state

        def job() -> bool:
            return state.answer(participant, unit, slow)
        try:
            await self.worker.call(job, "a staircase answer")
        except StateUnavailable:
            self.worker.keep(job, "a staircase answer")

    # -- the Retimer addon's hooks (retimer.proxy.hooks) -----------------------------------
    def retimer_stream_start(self, flow: http.HTTPFlow, stream: StreamHandle) -> None:
        if STUDY_LINK_KEY in flow.metadata:
            stream.keep_body()  # the response names the ids later turns carry

    def retimer_stream_done(self, flow: http.HTTPFlow, stream: StreamHandle, record: StreamRecord) -> None:
        link = flow.metadata.get(STUDY_LINK_KEY)
        if link is None:
            return
        kind, key, participant = link
        if (kept := stream.body) is not None:
            body = kept
        elif flow.response is not None and not flow.response.stream:
            body = flow.response.get_content(strict=False) or b""
        else:
            return
        links = list(response_links(kind, body))

        def job() -> None:
            with self.state.transaction():
                for linked in links:
                    self.state.link(participant, linked, key)
        if links:
            self.worker.keep(job, "a conversation's link")

    def retimer_record(self, record: StreamRecord) -> None:
        """A stream finished: into the study's shared view; the latest unit stream is what the
        rating page offers."""
        tags = record.study
        if self.design is None or tags is None or tags.study != self.design.name:
            return
        self.share(record)
        if tags.unit is None or tags.participant is None:
            return
        if tags.condition is not None:
            self._watch_feasible(tags.condition, record.upstream_bound is True)
        entry: dict[str, object] = {
            "id": record.id, "stream": record.stream, "study": tags.study,
            "participant": tags.participant, "condition": tags.condition, "unit": tags.unit,
            "finished": time.strftime("%H:%M:%S"), "host": urlsplit(record.url).hostname or ""}
        participant = tags.participant
        self.worker.keep(lambda: self.state.add_rateable(participant, record.id, entry),
                         "a stream offered for rating")

    def _watch_feasible(self, condition: str, bound: bool) -> None:
        """Say loudly, once, when a condition's units are mostly paced by the upstream: the
        upstream is slower than the condition, which retimer cannot make faster."""
        if (found := self.feasibility.add(condition, bound)) is not None:
            late, units = found
            names = self.design.names if self.design is not None else [condition]
            place = names.index(condition) + 1 if condition in names else 0
            # by its place, not its name: participants may see this console (blinding)
            log.warning(f"retimer study: WARNING: {INFEASIBLE_CONDITION.format(place=place)}, "
                        "not by itself: "
                        f"{late} of its first {units} units were "
                        "upstream-bound (the upstream is slower than the condition); they are "
                        "left out of the analysis. Check it with --pilot N before more "
                        "participants come.")

    def share(self, record: Record) -> None:
        """Keep a study record in the shared state too (with --study-state), so the admin
        view and `--status` of any instance read the whole study (the logs stay as they are)."""
        state = self.state
        if not isinstance(state, SharedState):
            return
        if isinstance(record, StreamRecord):
            key = f"stream {record.id}"
        elif isinstance(record, Rating):
            key = f"rating {record.stream} {record.time}"
        else:
            key = f"participant {record.participant} {record.event} {record.time}"
        line = record_line(record)
        self.worker.keep(lambda: state.add_record(key, line), "a record for the study's view")

    async def shared_records(self) -> list[str] | None:
        """Every instance's study records as log lines (None: the state is this process's)."""
        state = self.state
        if not isinstance(state, SharedState):
            return None
        return await self.worker.call(state.record_lines, "the study's records")


def _refusal(status: int, message: str) -> http.Response:
    """An API-shaped error (OpenAI's and Anthropic's clients show `error.message`)."""
    body = json.dumps({"type": "error", "error": {"type": "retimer_study", "message":
                                                  f"retimer study: {message}"}})
    return http.Response.make(status, body.encode("utf-8"), {
        "content-type": "application/json", "cache-control": "no-store"})
