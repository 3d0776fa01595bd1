"""Studies: the design a STUDY.yaml describes and who sees which condition. Pure: no I/O, no mitmproxy.

Why a keyed hash: the condition of a unit is a pure function of (seed, participant, unit), so
proxies on several machines agree with no shared state, and re-running a study with the same
seed reproduces every assignment. The hash is BLAKE2b keyed with the seed (`_key`), so the
order cannot be guessed from the participant id without the study file.

The study file's schema, and its checks, are `retimer.study.study_file`'s.

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
from dataclasses import dataclass

from retimer.study.page import PageSettings
from retimer.study.participants import ParticipantPolicy
from retimer.study.staircase import StaircaseSettings

__all__ = ["Condition", "StudyDesign", "StudyError", "participant_number", "shown", "williams_square"]

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


def shown(value: object) -> str:
    """`value` as an error message quotes it: on one line, at most 60 characters."""
    text = " ".join((repr(value) if isinstance(value, str) else str(value)).split())
    return text if len(text) <= 60 else text[:57] + "..."


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
                             f"(at most 64), got {shown(participant)}")
        if self.participant_ids == "numbered" and participant_number(participant) is None:
            raise StudyError(f"{where}: study '{self.name}' has participant_ids: numbered; "
                             f"expected an id ending in a number like P07, got {shown(participant)}")

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
