"""The nearest known name to a mistyped one: the hint every "unknown X" message ends with.

Pure, and down here because the lowest module that names its choices (a strategy) uses it;
the command line re-uses it for flags, commands and values.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` was most likely a typo of, if any is close enough. Leading dashes
    are left out of the comparison: every flag shares them, so they would make "--bogus"
    look like "--host"."""
    by_name = {c.lstrip("-") or c: c for c in choices}
    found = difflib.get_close_matches(word.lstrip("-") or word, list(by_name), n=1, cutoff=0.6)
    return by_name[found[0]] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """"; did you mean X?" for a near miss, else ""."""
    match = closest(word, choices)
    return f"; did you mean {match}?" if match else ""
