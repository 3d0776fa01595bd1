"""Studies: the design in STUDY.yaml and who sees which condition. Pure: no I/O, no mitmproxy.

Why a keyed hash: the condition of a unit is a pure function of (seed, participant, unit), so
proxies on several machines agree with no shared state, and re-running a study with the same
seed reproduces every assignment. The hash is BLAKE2b keyed with the seed (`_key`), so the
order cannot be guessed from the participant id without the study file.

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

How units map to conditions (`StudyDesign.assign`):
- unit participant: one condition per participant (between subjects). Numbered ids cycle
  through the conditions in a seeded order, so participants 1..n cover each once; other ids
  hash to a condition (balanced in expectation).
- unit conversation / request (within subjects): unit k of a participant belongs to block
  k // block_size. With latin-square, the participant's row of a Williams square gives the
  order of conditions over blocks (cycling after n blocks). With none, each block draws its
  condition from the hash; a conversation with block_size 1 draws from its key instead of its
  position, so it keeps its condition across proxy restarts and machines.
- staircase: the conditions are the levels, and a unit's level follows the participant's
  answers (retimer.study.staircase.position_after, with the answers the proxy's state keeps); `assign`
  gives the starting level, which is all a design alone can know.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from retimer.profile.model import EXPLICIT_SPEED_BASE, Profile
from retimer.study.page import PageError, PageSettings, parse_page
from retimer.study.participants import ParticipantError, ParticipantPolicy, parse_participants
from retimer.study.ratings import SCALES
from retimer.study.staircase import StaircaseError, StaircaseSettings, parse_staircase

__all__ = ["COUNTERBALANCING", "Condition", "OVERRIDE_KEYS", "StudyDesign", "StudyError",
           "UNITS", "participant_number", "parse_study", "resolve_conditions", "williams_square"]

UNITS = ("participant", "conversation", "request")
COUNTERBALANCING = ("none", "latin-square")
PARTICIPANT_IDS = ("any", "numbered", "arrival")
OVERRIDE_KEYS = ("ttft", "tps", "jitter", "speed", "thinking")
TOP_KEYS = ("name", "description", "seed", "unit", "counterbalancing", "block_size",
            "participant_ids", "ratings", "participants", "page", "staircase", "conditions")
CONDITION_KEYS = ("name", "profile", *OVERRIDE_KEYS)
DEFAULT_BASE = EXPLICIT_SPEED_BASE  # a condition given only by ttft and tps: as on the CLI
_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PARTICIPANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_NUMBERED = re.compile(r"[A-Za-z._-]*?(\d{1,9})")


class StudyError(ValueError):
    """A study file or a participant id is unusable; str() is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


@dataclass(frozen=True)
class Condition:
    name: str
    profile: str  # a built-in name/alias or a path (already made relative to the study file)
    overrides: tuple[tuple[str, str], ...] = ()  # (key, value) for ttft/tps/jitter/speed/thinking


def williams_square(n: int) -> list[list[int]]:
    """A balanced Latin square of orders of 0..n-1 (Williams design).

    Each condition once per row and once per position; each ordered pair of conditions is
    adjacent exactly once over the rows (carry-over balance). For odd n no n-row square has
    that property, so the n rows are followed by their mirror images: 2n rows, each ordered
    pair adjacent twice, each condition twice per position."""
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def participant_number(participant: str) -> int | None:
    """The number an id ends in (P07 -> 7, 12 -> 12), or None."""
    m = _NUMBERED.fullmatch(participant)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class StudyDesign:
    name: str
    seed: int | str
    conditions: tuple[Condition, ...]
    unit: str = "conversation"
    counterbalancing: str = "none"
    block_size: int = 1
    participant_ids: str = "any"
    ratings: bool = False
    description: str = ""
    participants: ParticipantPolicy = ParticipantPolicy()  # a many-participant proxy's rules
    page: PageSettings | None = None  # the hosted study page (retimer.study.page)
    staircase: StaircaseSettings | None = None  # a threshold design: conditions are its levels

    # -- the keyed hash ------------------------------------------------------------------
    def _key(self) -> bytes:
        return hashlib.blake2b(str(self.seed).encode("utf-8"), digest_size=32,
                               person=b"retimer-study").digest()

    def _hash(self, *parts: object) -> int:
        msg = "\x1f".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.blake2b(msg, key=self._key(), digest_size=8).digest(), "big")

    def _order(self, tag: str, n: int) -> list[int]:
        """A seeded permutation of 0..n-1."""
        return sorted(range(n), key=lambda i: (self._hash("order", tag, i), i))

    # -- design --------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [c.name for c in self.conditions]

    def square(self) -> list[list[int]]:
        """The Williams square with conditions relabelled and rows reordered by the seed."""
        n = len(self.conditions)
        base = williams_square(n)
        label = self._order("conditions", n)
        return [[label[x] for x in base[r]] for r in self._order("rows", len(base))]

    def check_participant(self, participant: str, where: str = "--participant") -> None:
        if not _PARTICIPANT.fullmatch(participant):
            raise StudyError(f"{where}: expected letters, digits, '.', '_' or '-' "
                             f"(at most 64), got {_show(participant)}")
        if self.participant_ids == "numbered" and participant_number(participant) is None:
            raise StudyError(f"{where}: study '{self.name}' has participant_ids: numbered; "
                             f"expected an id ending in a number like P07, got {_show(participant)}")

    def roster_secret(self) -> bytes:
        """The key of the roster's digests (retimer.study.participants.Roster)."""
        return hashlib.blake2b(self._key(), digest_size=32, person=b"retimer-roster").digest()

    def _slot(self, participant: str, tag: str, size: int, arrival: int | None = None) -> int:
        """The participant's place among `size` (rows or conditions): numbered ids in turn,
        with `participant_ids: arrival` the participants in the order they came (`arrival`,
        0-based, kept by the study's state), else by the keyed hash of the id."""
        if self.participant_ids == "arrival" and arrival is not None:
            return arrival % size
        number = participant_number(participant) if self.participant_ids == "numbered" else None
        if number is not None:
            return (number - 1) % size
        return self._hash(tag, participant) % size

    def row(self, participant: str, arrival: int | None = None) -> int:
        return self._slot(participant, "row", len(williams_square(len(self.conditions))), arrival)

    def assign(self, participant: str, index: int = 0, key: str | None = None,
               arrival: int | None = None) -> int:
        """The condition (its index) of the participant's unit `index` (0-based); `key` is the
        conversation's key for unit conversation; `arrival` the participant's place in arrival
        order (`participant_ids: arrival`)."""
        n = len(self.conditions)
        if self.staircase is not None:
            return self.staircase.start  # the next levels follow the answers (the proxy's state)
        if self.unit == "participant":
            return self._order("conditions", n)[self._slot(participant, "participant", n, arrival)]
        block = index // self.block_size
        if self.counterbalancing == "latin-square":
            return self.square()[self.row(participant, arrival)][block % n]
        if self.unit == "conversation" and self.block_size == 1 and key is not None:
            return self._hash("conversation", participant, key) % n
        return self._hash(self.unit, participant, block) % n

    def condition(self, participant: str, index: int = 0, key: str | None = None,
                  arrival: int | None = None) -> Condition:
        return self.conditions[self.assign(participant, index, key, arrival)]

    def timing_seed(self, participant: str) -> int:
        """The timing model's seed for a participant when --seed is not given: reproducible,
        and different between participants."""
        return self._hash("timing", participant) % 2**31

    def short_hash(self, text: str) -> str:
        """A 12-hex keyed digest (conversation keys in records: no message text leaks)."""
        return f"{self._hash('key', text):016x}"[:12]


# ---------------------------------------------------------------- parsing


def _slug(value: object, key: str) -> str:
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise StudyError(f"{key}: expected a name of letters, digits, '.', '_' or '-' "
                         f"(at most 64), got {_show(value)}")
    return value


def _show(value: object) -> str:
    text = " ".join((repr(value) if isinstance(value, str) else str(value)).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _choice(
    data: Mapping[str, object], key: str, choices: tuple[str, ...], default: str | None
) -> str:
    value = data.get(key, default)
    if value is None:
        raise StudyError(f"{key}: required, one of {', '.join(choices)}")
    if value not in choices:
        raise StudyError(f"{key}: expected one of {', '.join(choices)}, got {_show(value)}")
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
        raise StudyError(f"seed: expected a whole number >= 0 or a word, got {_show(seed)}")
    if isinstance(seed, int) and seed < 0:
        raise StudyError(f"seed: expected a whole number >= 0, got {seed}")
    if isinstance(seed, str) and not 0 < len(seed.strip()) <= 64:
        raise StudyError(f"seed: expected a word of 1 to 64 characters, got {_show(seed)}")
    return seed


def _override(value: object, key: str) -> str:
    if key.endswith(".thinking") and isinstance(value, bool):
        return "on" if value else "off"  # YAML reads a bare off/on as a boolean
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise StudyError(f"{key}: expected a number or a string like 400ms, got {_show(value)}")
    return str(value)


def _condition(raw: object, i: int, base_dir: str) -> Condition:
    where = f"conditions[{i}]"
    if isinstance(raw, str):
        raw = {"name": raw, "profile": raw}
    if not isinstance(raw, dict):
        raise StudyError(f"{where}: expected a mapping with name and profile, got {_show(raw)}")
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
                         f"{_show(profile)}")
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
        raise StudyError(f"description: expected text, got {_show(description)}")
    seed = _seed(data)
    unit = _choice(data, "unit", UNITS, None)
    counter = _choice(data, "counterbalancing", COUNTERBALANCING, "none")
    ids = _choice(data, "participant_ids", PARTICIPANT_IDS, "any")
    block = data.get("block_size", 1)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise StudyError(f"block_size: expected a whole number >= 1, got {_show(block)}")
    if unit == "participant" and block != 1:
        raise StudyError("block_size: applies to unit conversation or request only")
    if unit == "participant" and counter != "none":
        raise StudyError("counterbalancing: latin-square orders conditions within a "
                         "participant; with unit participant each sees one condition (use none)")
    ratings = data.get("ratings", False)
    if not isinstance(ratings, bool):
        raise StudyError(f"ratings: expected true or false, got {_show(ratings)}")
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
                         f"{_show(raw)}")
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
