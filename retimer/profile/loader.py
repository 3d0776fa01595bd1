"""Profiles from files: the built-ins shipped in profiles/, or a YAML file by path.

The one module of the core that touches the file system. A file is read strictly (YAML that
repeats a key is an error, not a silent last-one-wins) and checked by retimer.profile.schema;
every problem is one line naming the file.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import Any

import yaml

from retimer.profile.model import Profile
from retimer.profile.schema import parse_document
from retimer.profile.units import ProfileError, show

__all__ = ["OVERRIDE_KEYS", "builtin_dir", "builtin_profiles", "load_profile", "load_profile_spec",
           "parse_profile_spec", "profile_specs", "read_yaml"]

OVERRIDE_KEYS = ("ttft", "tps", "jitter", "speed", "thinking")  # Profile.with_overrides


def read_yaml(path: Path, where: str) -> object:
    """The parsed document; duplicate keys and YAML syntax errors are one-line errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{where}: cannot read the file ({type(e).__name__}: {e})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ProfileError as e:
        raise ProfileError(f"{where}: {e}") from None
    except RecursionError:
        raise ProfileError(f"{where}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ProfileError(f"{where}: invalid YAML{at}: {problem}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (plain PyYAML silently keeps the last one)."""


def _construct_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ProfileError(f"duplicate key {show(key)} at line {key_node.start_mark.line + 1}")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_file(path: Path, where: str) -> Profile:
    return Profile(**parse_document(read_yaml(path, where), where), path=path)


def builtin_dir() -> Path:
    """profiles/ inside the installed package, else the source checkout's top-level one."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "profiles"
    return packaged if packaged.is_dir() else package.parent / "profiles"


@functools.cache
def _builtins(directory: Path) -> tuple[Profile, ...]:
    profiles: list[Profile] = []
    owner: dict[str, str] = {}
    for file in sorted(directory.glob("*.yaml")):
        where = f"{directory.name}/{file.name}"
        p = _load_file(file, where)
        for key in (p.name, *p.aliases):
            if key in owner:
                raise ProfileError(f"{where}: name or alias '{key}' is also in {owner[key]}")
            owner[key] = where
        profiles.append(p)
    return tuple(profiles)


def builtin_profiles() -> list[Profile]:
    """Every built-in profile: table rows in table order, then the others by file name."""
    return list(_builtins(builtin_dir()))


def load_profile(name_or_path: str) -> Profile:
    """A built-in by name or alias (any case), or a YAML file by path.

    A value ending in .yaml/.yml or containing a slash is a path; otherwise it is looked up
    among the built-ins first and then tried as a file.
    """
    raw = name_or_path.strip()
    looks_like_path = raw.lower().endswith((".yaml", ".yml")) or "/" in raw or "\\" in raw
    if not looks_like_path:
        key = raw.lower()
        known: list[str] = []
        for p in builtin_profiles():
            if key == p.name or key in p.aliases:
                return p
            known += [p.name, *p.aliases]
        if not Path(raw).is_file():
            hint = difflib.get_close_matches(key, known, n=1)
            near = f"did you mean '{hint[0]}'? " if hint else ""
            raise ProfileError(f"unknown profile '{raw}' ({near}try: retimer profiles)")
    path = Path(raw).expanduser()
    if not path.is_file():
        raise ProfileError(f"{raw}: no such profile file")
    return _load_file(path, raw)


def profile_specs(text: str) -> list[str]:
    """A comma-separated list of profile specs (`cerebras,gpt-5:tps=40:thinking=high,o3`); an
    item with `=` and no `:` is one more override of the spec before it, so
    `gpt-5:tps=40,thinking=high` reads as one spec too."""
    specs: list[str] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if specs and "=" in item and ":" not in item:
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def parse_profile_spec(spec: str) -> tuple[str, dict[str, str]]:
    """`NAME_OR_PATH[:key=value...]` as (name, overrides); overrides are separated by `:` or
    `,` (`o3:thinking=high:ttft=2s`, `gpt-5:tps=40,thinking=high`), keys as the --ttft ...
    options. A bad key or an empty value raises ProfileError naming the spec."""
    name, sep, rest = spec.strip().partition(":")
    if not sep:
        return name, {}
    overrides: dict[str, str] = {}
    for item in (x.strip() for x in rest.replace(":", ",").split(",")):
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in OVERRIDE_KEYS or not value.strip():
            hint = difflib.get_close_matches(key, OVERRIDE_KEYS, n=1)
            near = f"did you mean '{hint[0]}'? " if hint else ""
            raise ProfileError(f"{spec}: bad override {item!r} ({near}give key=value with "
                               f"key one of {', '.join(OVERRIDE_KEYS)})")
        overrides[key] = value.strip()
    return name.strip(), overrides


def load_profile_spec(spec: str) -> Profile:
    """A profile with overrides (`parse_profile_spec`): `gpt-5:tps=40`, `o3:thinking=high`."""
    name, overrides = parse_profile_spec(spec)
    if not overrides:
        return load_profile(name)
    try:
        return load_profile(name).with_overrides(**overrides)
    except ProfileError as e:
        raise ProfileError(f"{spec}: {e}") from None
