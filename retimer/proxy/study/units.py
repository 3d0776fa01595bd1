"""Which unit a study request is, and so its condition: the record fields a flow is given.

Why a module of its own: the study addon (retimer.proxy.study.addon) decides who a request is
and when to ask; this decides, from the run's state (retimer.proxy.study.state), what the
request is: a unit (the participant's next request, or a conversation's next turn, by the
study's `unit`) with its position, condition, staircase level and arrival place, or a request
that follows the participant's latest unit. Called inside the state's transaction (the
addon's `assignment` job), so a unit's position never depends on which worker took it.
"""

from __future__ import annotations

from retimer.proxy.study.state import MemoryState, SharedState, UnitFields
from retimer.study.conversation import conversation_key
from retimer.study.design import StudyDesign
from retimer.study.staircase import position_after
from retimer.wire.protocols.base import RequestShape

Link = tuple[str, str, str]  # STUDY_LINK_KEY: (link kind, conversation key, participant)
State = MemoryState | SharedState


def arrival(state: State, design: StudyDesign, participant: str) -> int | None:
    """The participant's place in arrival order, when the study assigns by it."""
    return state.arrival(participant) if design.participant_ids == "arrival" else None


def following_fields(state: State, design: StudyDesign, participant: str) -> UnitFields:
    """A request that is not a unit: the condition of the participant's latest unit."""
    if (current := state.current(participant)) is not None:
        fields: UnitFields = {**current, "unit": None}
        fields.pop("conversation", None)
        return fields
    place = arrival(state, design, participant)
    fields = {"study": design.name, "participant": participant,
              "condition": design.condition(participant, 0, arrival=place).name, "unit": None}
    if place is not None:
        fields["arrival"] = place
    return fields


def unit_fields(
    state: State, design: StudyDesign, shape: RequestShape, participant: str, known: str | None = None,
    request: str | None = None,
) -> tuple[UnitFields, Link | None]:
    """A unit's fields, and the link to keep when its response names ids later turns carry;
    `known`: its conversation, when the caller knows it (the study page's task); `request`:
    the flow's id (a request unit counts once however often it is asked)."""
    key: str | None = None
    conversation: str | None = None
    link: Link | None = None
    if design.unit == "participant":
        index = 0
    elif design.unit == "request":
        index = state.next_request(participant, request)
    else:
        ident = conversation_key(shape)
        key = known or state.alias_of(participant, ident.key)
        index = state.conversation(participant, key)
        if ident.links and known is None:
            link = (ident.links, key, participant)
        conversation = design.short_hash(key)
    stairs = design.staircase
    place = arrival(state, design, participant)
    if stairs is None:
        condition = design.condition(participant, index, key, place)
    else:
        condition = design.conditions[state.unit_level(
            participant, index, lambda answered: position_after(stairs, answered).level)]
    fields: UnitFields = {"study": design.name, "participant": participant,
                          "condition": condition.name, "unit": index}
    if conversation is not None:
        fields["conversation"] = conversation
    if place is not None:
        fields["arrival"] = place
    if stairs is not None:
        fields["level"] = stairs.levels[design.names.index(condition.name)]
        fields["staircase"] = stairs.describe()
    return fields, link
