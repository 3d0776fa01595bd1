"""Warnings a run gives once, however many worker processes serve it.

Each worker of `retimer --workers N` judges only its own streams, so each would give these
warnings once; the parent (retimer.cli.proxy.workers) shows a worker's line that carries one of
them only the first time its key comes. Pure: text in, a key out.
"""

from __future__ import annotations

import re

__all__ = ["INFEASIBLE_CONDITION", "UPSTREAM_BOUND", "once_per_run"]

UPSTREAM_BOUND = "a live stream cannot be made faster than it arrives"
INFEASIBLE_CONDITION = "condition #{place} of the study file is paced by the upstream"

_KEYS = (re.compile(re.escape(UPSTREAM_BOUND)),
         re.compile(re.escape(INFEASIBLE_CONDITION).replace(re.escape("{place}"), r"\d+")))


def once_per_run(line: str) -> str | None:
    """The warning's key when `line` gives one of the once-per-run warnings, else None."""
    for key in _KEYS:
        if found := key.search(line):
            return found.group(0)
    return None
