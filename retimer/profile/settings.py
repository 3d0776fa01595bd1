"""A run's choice of profile, as the command line and the proxy's options give it.

`ProfileSettings` carries the profile's name (or YAML path) and the overrides as the user typed
them (empty: not set), from the command line to the addon's options and back; `build()` makes
the `Profile` they describe, with errors naming the option at fault. One rule for the CLI, the
addon, the demo and the benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

from retimer.profile.loader import load_profile
from retimer.profile.model import Profile, base_profile_name

__all__ = ["ProfileSettings"]


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    """A profile name or path and its overrides (--ttft, --tps, --jitter, --speed, --thinking),
    each as typed ("400ms", "40", "2x"; "" leaves the profile's own)."""

    name: str = ""
    ttft: str = ""
    tps: str = ""
    jitter: str = ""
    speed: str = ""
    thinking: str = ""

    def build(self) -> Profile:
        """The active profile with the overrides (ProfileError names the option at fault). No
        name: cerebras, or frontier's shape when --ttft/--tps set the speed (as in studies)."""
        return load_profile(base_profile_name(self.name, self.ttft, self.tps)).with_overrides(
            ttft=self.ttft or None, tps=self.tps or None, jitter=self.jitter or None,
            speed=self.speed or None, thinking=self.thinking or None,
        )
