"""Who a request belongs to, when one proxy serves many participants. Pure: no I/O, no mitmproxy.

Why: a hosted study runs one retimer (or several behind a load balancer) for everyone, so the
participant is a property of each request, not of the proxy. It comes, first rule that applies,
from a header the study's front end sets (`X-Retimer-Participant` unless the study file renames
it), or from the API key the request carries, looked up in a roster the researcher wrote. A
roster's keys are kept only as keyed hashes (`Roster`): no key is held in the clear after the
file is read, and none is ever written. A request naming nobody gets the study's policy:
`refuse` (a 403 with one line) or `pass` (untimed, recorded with `participant: null`).

Study file section (every key optional)::

    participants:
      header: X-Retimer-Participant   # the header naming a request's participant
      roster: roster.csv              # participant,key rows (or a YAML mapping participant: key)
      unidentified: refuse            # refuse | pass
      beside_page: false              # with `page:`, also take requests named by header or roster

A hosted study (`page:`) takes its participants from the page's signed cookie only: its other
requests name nobody, whatever header or key they carry (anyone on the internet can set a
header), unless `beside_page: true` lets a front end of the researcher's own name them too.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_HEADER", "Identified", "Invalid", "ParticipantPolicy", "Roster",
           "Unidentified", "api_key", "identify", "parse_participants", "parse_roster"]

DEFAULT_HEADER = "X-Retimer-Participant"
POLICIES = ("refuse", "pass")
KEYS = ("header", "roster", "unidentified", "beside_page")
_HEADER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_BEARER = re.compile(r"\s*(?:bearer|token)\s+(\S+)\s*", re.IGNORECASE)
KEY_HEADERS = ("x-api-key", "x-goog-api-key", "api-key")  # Anthropic, Gemini, Azure OpenAI
KEY_PARAMS = ("key",)  # Gemini's ?key=


class ParticipantError(ValueError):
    """A participants section or roster that cannot be used; str() is one line."""


@dataclass(frozen=True)
class Roster:
    """API keys to participant ids, the keys kept only as BLAKE2b digests keyed by `secret`."""

    secret: bytes
    digests: Mapping[bytes, str] = field(default_factory=dict)

    @staticmethod
    def digest(secret: bytes, key: str) -> bytes:
        return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), key=secret, digest_size=32,
                               person=b"retimer-roster").digest()

    def participant(self, key: str) -> str | None:
        return self.digests.get(self.digest(self.secret, key))

    def __len__(self) -> int:
        return len(self.digests)


@dataclass(frozen=True)
class ParticipantPolicy:
    """How a request of a many-participant study names its participant."""

    header: str = DEFAULT_HEADER
    roster_path: str = ""  # as written in the study file, made relative to it
    unidentified: str = "refuse"
    beside_page: bool = False  # with a page: requests outside it may name their participant


@dataclass(frozen=True)
class Identified:
    participant: str
    via: str  # "header" or "roster": how the request named them


@dataclass(frozen=True)
class Unidentified:
    """The request names nobody (or a key the roster does not know): the policy applies."""

    reason: str


@dataclass(frozen=True)
class Invalid:
    """The request names a participant in a form no study id can take: refused whatever the policy."""

    reason: str


def _show(value: object) -> str:
    text = " ".join((repr(value) if isinstance(value, str) else str(value)).split())
    return text if len(text) <= 60 else text[:57] + "..."


def parse_participants(raw: object, base_dir: str = "") -> ParticipantPolicy:
    """The `participants:` section (errors name the key, without the file's name)."""
    if raw is None:
        return ParticipantPolicy()
    if not isinstance(raw, dict):
        raise ParticipantError(f"participants: expected a mapping with {', '.join(KEYS)}, "
                               f"got {_show(raw)}")
    for k in raw:
        if k not in KEYS:
            raise ParticipantError(f"participants.{k}: unknown key (known: {', '.join(KEYS)})")
    header = raw.get("header", DEFAULT_HEADER)
    if not isinstance(header, str) or not _HEADER.fullmatch(header):
        raise ParticipantError(f"participants.header: expected a header name of letters, digits "
                               f"and '-', got {_show(header)}")
    unidentified = raw.get("unidentified", "refuse")
    if unidentified not in POLICIES:
        raise ParticipantError(f"participants.unidentified: expected one of "
                               f"{', '.join(POLICIES)}, got {_show(unidentified)}")
    roster = raw.get("roster", "")
    if not isinstance(roster, str):
        raise ParticipantError(f"participants.roster: expected a file's path, got {_show(roster)}")
    roster = roster.strip()
    if roster and not roster.startswith(("/", "~")) and base_dir:
        roster = f"{base_dir.rstrip('/')}/{roster}"
    beside_page = raw.get("beside_page", False)
    if not isinstance(beside_page, bool):
        raise ParticipantError(f"participants.beside_page: expected true or false, got "
                               f"{_show(beside_page)}")
    return ParticipantPolicy(header=header, roster_path=roster, unidentified=str(unidentified),
                             beside_page=beside_page)


def parse_roster(text: str, yaml_data: object | None, secret: bytes) -> Roster:
    """A roster from a CSV text (header row `participant,key`) or, when `yaml_data` is given,
    a parsed YAML mapping participant -> key. Errors name the row or the participant."""
    pairs: list[tuple[str, object, str]] = []
    if yaml_data is not None:
        if not isinstance(yaml_data, dict) or not yaml_data:
            raise ParticipantError("expected a mapping of participant ids to API keys")
        pairs = [(str(p), k, f"participant {_show(str(p))}") for p, k in yaml_data.items()]
    else:
        rows = list(csv.reader(io.StringIO(text)))
        rows = [r for r in rows if any(cell.strip() for cell in r)]
        if not rows or [c.strip().lower() for c in rows[0]] != ["participant", "key"]:
            raise ParticipantError("expected a first row `participant,key`, then one row per "
                                   "participant")
        for n, row in enumerate(rows[1:], start=2):
            if len(row) != 2:
                raise ParticipantError(f"row {n}: expected two cells (participant,key), "
                                       f"got {len(row)}")
            pairs.append((row[0].strip(), row[1].strip(), f"row {n}"))
        if not pairs:
            raise ParticipantError("no participants: add rows `participant,key`")
    digests: dict[bytes, str] = {}
    seen: set[str] = set()
    for participant, key, where in pairs:
        if not _ID.fullmatch(participant):
            raise ParticipantError(f"{where}: a participant id is letters, digits, '.', '_' or "
                                   f"'-' (at most 64), got {_show(participant)}")
        if not isinstance(key, str) or len(key.strip()) < 8:
            raise ParticipantError(f"{where}: expected an API key of at least 8 characters")
        if participant in seen:
            raise ParticipantError(f"{where}: participant {participant} is listed twice")
        digest = Roster.digest(secret, key.strip())
        if digest in digests:
            raise ParticipantError(f"{where}: that key is also {digests[digest]}'s: "
                                   f"each participant needs a key of their own")
        seen.add(participant)
        digests[digest] = participant
    return Roster(secret, digests)


def api_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The API key a request carries, wherever its API puts it (headers lower-cased)."""
    auth = headers.get("authorization", "")
    if m := _BEARER.fullmatch(auth):
        return m.group(1)
    for name in KEY_HEADERS:
        if value := headers.get(name, "").strip():
            return value
    for name in KEY_PARAMS:
        if value := query.get(name, "").strip():
            return value
    return None


def identify(
    policy: ParticipantPolicy,
    roster: Roster | None,
    headers: Mapping[str, str],
    query: Mapping[str, str],
) -> Identified | Unidentified | Invalid:
    """The request's participant (headers lower-cased): the header first, then the roster."""
    named = headers.get(policy.header.lower())
    if named is not None:
        named = named.strip()
        if not _ID.fullmatch(named):
            return Invalid(f"{policy.header}: a participant id is letters, digits, '.', '_' or "
                           f"'-' (at most 64), got {_show(named)}")
        return Identified(named, "header")
    if roster is not None:
        key = api_key(headers, query)
        if key is None:
            return Unidentified(f"no {policy.header} header and no API key for the roster")
        participant = roster.participant(key)
        if participant is None:
            return Unidentified("the request's API key is not in the study's roster")
        return Identified(participant, "roster")
    return Unidentified(f"no {policy.header} header")
