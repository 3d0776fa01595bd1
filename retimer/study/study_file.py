"""A study file (STUDY.yaml), checked: the `StudyDesign` it describes and its conditions' profiles.

Pure: the caller reads the YAML and the profiles (retimer.proxy.study.files); this checks every
key and says what is wrong in one line that names it (`StudyError`), before a proxy starts.

Schema (one-line errors name the key)::

    name: reading-speed            # required: slug (a-z A-Z 0-9 . _ -)
    description: ...               # optional
    seed: 2026                     # required: a whole number >= 0 or a word (<= 64 chars)
    unit: conversation             # required: participant | conversation | request
    counterbalancing: latin-square # optional: none (default) | latin-square
    block_size: 2                  # optional: units per condition before switching (default 1)
    participant_ids: numbered      # optional: any (default) | numbered | arrival
    ratings: true                  # optional: serve the rating page /rate (default false)
    participants:                  # optional: one proxy, many participants (participants.py)
      header: X-Retimer-Participant
      roster: roster.csv
      unidentified: refuse         # refuse | pass
    page: {model: ..., tasks: [...]}   # optional: the hosted study page (page.py)
    staircase: {vary: ttft, levels: [...]}  # instead of conditions: a threshold design (staircase.py)
    conditions:                    # required: at least two, names unique
      - name: fast                 # slug
        profile: cerebras          # a built-in name/alias or a YAML path (relative to the study)
      - name: slow
        profile: gpt-5
        ttft: 2s                   # optional overrides, as on the command line
        tps: 20
        jitter: 0.5
        speed: 1x
        thinking: medium           # off | low | medium | high | a number of hidden tokens
      - frontier                   # shorthand: a profile name that is also the condition name
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from retimer.profile.model import EXPLICIT_SPEED_BASE, Profile
from retimer.study.design import Condition, StudyDesign, StudyError, shown
from retimer.study.page import PageError, PageSettings, parse_page
from retimer.study.participants import ParticipantError, parse_participants
from retimer.study.ratings import SCALES
from retimer.study.staircase import StaircaseError, StaircaseSettings, parse_staircase

__all__ = ["COUNTERBALANCING", "OVERRIDE_KEYS", "UNITS", "parse_study", "resolve_conditions"]

UNITS = ("participant", "conversation", "request")
COUNTERBALANCING = ("none", "latin-square")
PARTICIPANT_IDS = ("any", "numbered", "arrival")
OVERRIDE_KEYS = ("ttft", "tps", "jitter", "speed", "thinking")
TOP_KEYS = ("name", "description", "seed", "unit", "counterbalancing", "block_size",
            "participant_ids", "ratings", "participants", "page", "staircase", "conditions")
CONDITION_KEYS = ("name", "profile", *OVERRIDE_KEYS)
DEFAULT_BASE = EXPLICIT_SPEED_BASE  # a condition given only by ttft and tps: as on the CLI
_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _slug(value: object, key: str) -> str:
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise StudyError(f"{key}: expected a name of letters, digits, '.', '_' or '-' "
                         f"(at most 64), got {shown(value)}")
    return value


def _choice(
    data: Mapping[str, object], key: str, choices: tuple[str, ...], default: str | None
) -> str:
    value = data.get(key, default)
    if value is None:
        raise StudyError(f"{key}: required, one of {', '.join(choices)}")
    if value not in choices:
        raise StudyError(f"{key}: expected one of {', '.join(choices)}, got {shown(value)}")
    return str(value)


def _unknown(keys: Iterable[object], known: tuple[str, ...], where: str) -> None:
    for k in keys:
        if k not in known:
            raise StudyError(f"{where}{k}: unknown key (known: {', '.join(known)})")


def _seed(data: Mapping[str, object]) -> int | str:
    if "seed" not in data:
        raise StudyError("seed: required: a whole number or a word; it fixes every assignment")
    seed = data["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int | str):
        raise StudyError(f"seed: expected a whole number >= 0 or a word, got {shown(seed)}")
    if isinstance(seed, int) and seed < 0:
        raise StudyError(f"seed: expected a whole number >= 0, got {seed}")
    if isinstance(seed, str) and not 0 < len(seed.strip()) <= 64:
        raise StudyError(f"seed: expected a word of 1 to 64 characters, got {shown(seed)}")
    return seed


def _override(value: object, key: str) -> str:
    if key.endswith(".thinking") and isinstance(value, bool):
        return "on" if value else "off"  # YAML reads a bare off/on as a boolean
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise StudyError(f"{key}: expected a number or a string like 400ms, got {shown(value)}")
    return str(value)


def _condition(raw: object, i: int, base_dir: str) -> Condition:
    where = f"conditions[{i}]"
    if isinstance(raw, str):
        raw = {"name": raw, "profile": raw}
    if not isinstance(raw, dict):
        raise StudyError(f"{where}: expected a mapping with name and profile, got {shown(raw)}")
    _unknown(raw, CONDITION_KEYS, f"{where}.")
    if "name" not in raw:
        raise StudyError(f"{where}.name: required")
    name = _slug(raw["name"], f"{where}.name")
    overrides = tuple((k, _override(raw[k], f"{where}.{k}")) for k in OVERRIDE_KEYS if k in raw)
    profile = raw.get("profile")
    if profile is None:
        given = {k for k, _ in overrides}
        if not {"ttft", "tps"} <= given:
            raise StudyError(f"{where}.profile: required unless both ttft and tps are given")
        profile = DEFAULT_BASE
    if not isinstance(profile, str) or not profile.strip():
        raise StudyError(f"{where}.profile: expected a profile name or a YAML path, got "
                         f"{shown(profile)}")
    profile = profile.strip()
    looks_like_path = profile.lower().endswith((".yaml", ".yml")) or "/" in profile
    if looks_like_path and not profile.startswith(("/", "~")) and base_dir:
        profile = f"{base_dir.rstrip('/')}/{profile}"  # relative to the study file
    return Condition(name, profile, overrides)


def parse_study(data: object, where: str, base_dir: str = "") -> StudyDesign:
    """The design in a parsed STUDY.yaml; `where` prefixes errors, `base_dir` anchors
    relative profile paths."""
    try:
        return _parse(data, base_dir)
    except StudyError as e:
        raise StudyError(f"{where}: {e}") from None


def _parse(data: object, base_dir: str) -> StudyDesign:
    if not isinstance(data, dict):
        raise StudyError("expected a mapping with name, seed, unit and conditions")
    _unknown(data, TOP_KEYS, "")
    if "name" not in data:
        raise StudyError("name: required")
    name = _slug(data["name"], "name")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise StudyError(f"description: expected text, got {shown(description)}")
    seed = _seed(data)
    unit = _choice(data, "unit", UNITS, None)
    counter = _choice(data, "counterbalancing", COUNTERBALANCING, "none")
    ids = _choice(data, "participant_ids", PARTICIPANT_IDS, "any")
    block = data.get("block_size", 1)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise StudyError(f"block_size: expected a whole number >= 1, got {shown(block)}")
    if unit == "participant" and block != 1:
        raise StudyError("block_size: applies to unit conversation or request only")
    if unit == "participant" and counter != "none":
        raise StudyError("counterbalancing: latin-square orders conditions within a "
                         "participant; with unit participant each sees one condition (use none)")
    ratings = data.get("ratings", False)
    if not isinstance(ratings, bool):
        raise StudyError(f"ratings: expected true or false, got {shown(ratings)}")
    try:
        participants = parse_participants(data.get("participants"), base_dir)
        page = parse_page(data.get("page"))
    except (ParticipantError, PageError) as e:
        raise StudyError(str(e)) from None
    if participants.beside_page and page is None:
        raise StudyError("participants.beside_page: applies to a hosted study (page:) only")
    staircase: StaircaseSettings | None = None
    if "staircase" in data:
        staircase = _staircase(data, unit, counter, block, ratings, page)
        raw: object = [{"name": name, "profile": staircase.profile, **dict(staircase.fixed),
                        **dict([staircase.override(i)])} for i, name in enumerate(staircase.names())]
    else:
        raw = data.get("conditions")
    if not isinstance(raw, list) or len(raw) < 2:
        raise StudyError(f"conditions: expected a list of at least two conditions, got "
                         f"{shown(raw)}")
    conditions = tuple(_condition(c, i, base_dir) for i, c in enumerate(raw))
    seen: set[str] = set()
    for i, c in enumerate(conditions):
        if c.name in seen:
            raise StudyError(f"conditions[{i}].name: '{c.name}' is used twice")
        seen.add(c.name)
    return StudyDesign(name=name, seed=seed, conditions=conditions, unit=unit,
                       counterbalancing=counter, block_size=block, participant_ids=ids,
                       ratings=ratings, description=description, participants=participants, page=page,
                       staircase=staircase)


def _staircase(data: Mapping[str, object], unit: str, counter: str, block: int, ratings: bool,
               page: PageSettings | None) -> StaircaseSettings:
    """The staircase block, checked against the rest of the study."""
    if "conditions" in data:
        raise StudyError("conditions: a staircase study's conditions are its levels: give "
                         "staircase.levels instead")
    if unit == "participant" or counter != "none" or block != 1:
        raise StudyError("staircase: each unit's level follows the last answer: use unit "
                         "conversation or request, no counterbalancing, block_size 1")
    if page is None and not ratings:
        raise StudyError("staircase: the levels follow the participant's answers: serve the "
                         "rating page (ratings: true) or the study page (page:)")
    scales = [s.name for s in page.scales] if page is not None else list(SCALES)
    raw = data["staircase"]
    fixed = {}
    if isinstance(raw, dict):
        fixed = {k: _override(raw[k], f"staircase.{k}") for k in OVERRIDE_KEYS if k in raw}
    try:
        settings = parse_staircase(raw, scales, fixed)
    except StaircaseError as e:
        raise StudyError(str(e)) from None
    if page is not None and not settings.answer.scale and not page.slow_question:
        raise StudyError("staircase.answer: slow is the page's yes/no question: set "
                         "page.slow_question: true, or answer by a scale ('speed <= 3')")
    return settings


def resolve_conditions(
    design: StudyDesign, where: str, load: Callable[[str], Profile]
) -> dict[str, Profile]:
    """Each condition's profile with its overrides (`load` reads a profile by name or path);
    errors name the condition's key."""
    out: dict[str, Profile] = {}
    stairs = design.staircase
    for i, c in enumerate(design.conditions):
        def label(key: str = "", i: int = i) -> str:
            if stairs is None:
                return f"conditions[{i}]" + (f".{key}" if key else "")
            return "staircase." + ("levels" if key == stairs.vary else key or "levels")
        try:
            profile = load(c.profile)
        except ValueError as e:
            raise StudyError(f"{where}: {label('profile')}: {e}") from None
        for key, value in c.overrides:  # each alone first, so an error names its key
            try:
                profile.with_overrides(**{key: value})
            except ValueError as e:
                message = str(e).replace(f"--{key}", key)
                raise StudyError(f"{where}: {label(key)}: {message}") from None
        try:
            out[c.name] = profile.with_overrides(**dict(c.overrides))
        except ValueError as e:
            raise StudyError(f"{where}: {label()}: {e}") from None
    return out
