"""A study's files: the study file with its conditions' profiles, and the roster.

Why apart from the addons: `retimer study STUDY.yaml --plan`, `--status` and `retimer study
analyze --study` read the study file without starting a proxy, so this module imports no
mitmproxy (tests/e2e/test_contracts.py checks that `retimer study analyze` runs without it).
"""

from __future__ import annotations

from pathlib import Path

from retimer.profile.loader import load_profile, read_yaml
from retimer.profile.model import Profile, ProfileError
from retimer.study.design import StudyDesign, StudyError
from retimer.study.participants import ParticipantError, Roster, parse_roster
from retimer.study.study_file import parse_study, resolve_conditions

__all__ = ["load_roster", "load_study"]


def load_study(path: str) -> tuple[StudyDesign, dict[str, Profile]]:
    """The study file's design and each condition's profile; errors are one line."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise StudyError(f"{path}: no such study file")
    try:
        data = read_yaml(file, path)
    except ProfileError as e:
        raise StudyError(str(e)) from None
    design = parse_study(data, path, str(file.parent))
    return design, resolve_conditions(design, path, load_profile)


def load_roster(design: StudyDesign, where: str) -> Roster | None:
    """The study's roster, its keys hashed at once (None without one); errors are one line."""
    path = design.participants.roster_path
    if not path:
        return None
    file = Path(path).expanduser()
    label = f"{where}: participants.roster: {path}"
    if not file.is_file():
        raise StudyError(f"{label}: no such file")
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            return parse_roster("", read_yaml(file, path) or {}, design.roster_secret())
        return parse_roster(file.read_text(encoding="utf-8-sig"), None, design.roster_secret())
    except (ProfileError, ParticipantError, UnicodeDecodeError, OSError) as e:
        raise StudyError(f"{label}: {e}") from None
