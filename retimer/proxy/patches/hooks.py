"""mitmproxy's hook dispatch (`AddonManager.trigger_event`) at the cost of the addons that have
the hook.

Why (BENCHMARKS.md, "CPU per event"): mitmproxy delivers every hook of a flow (a request is
about ten of them, each followed by an `update` hook) by walking every addon of the chain,
children included (about 40 with retimer's), each inside a `safecall` context manager, a
coroutine and two generators, whether it has the hook or not: some 4,000 Python calls per
request, which is much of what a new stream costs and what a burst of new streams waits on.
Here the addons that have a hook are looked up once per hook and addon set, and only they are
called, each exactly as mitmproxy calls it: the same order, the same `safecall` per top-level
addon (its error is logged and the others run), `AddonHalt` stops the rest, a coroutine result
is awaited, and the handler is looked up on the addon when it is called (a replaced method is
the one called). The addon set is checked on every dispatch: the chain, every registered addon
(`lookup`, which `register` and `remove` keep: scripts loading and reloading) and the children
of every addon that has some (a reordered `scripts` option).
One of retimer's patches (`retimer.proxy.patches`), installed by its `install()`.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from typing import Any

from mitmproxy import exceptions, hooks
from mitmproxy.addonmanager import AddonManager, safecall, traverse


class HookTable:
    """Per hook name, the addons that have it, grouped by their top-level addon, in chain order;
    rebuilt when the addon set changes."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._parents: list[Any] = []  # addons with children, as of the last rebuild
        self._groups: dict[str, list[list[Any]]] = {}

    def _current(self, manager: AddonManager) -> tuple[Any, ...]:
        return (id(manager.chain), len(manager.chain), tuple(map(id, manager.lookup.values())),
                tuple(tuple(map(id, p.addons)) for p in self._parents))

    def groups(self, manager: AddonManager, name: str) -> list[list[Any]]:
        if self._current(manager) != self._key:
            self._parents = [a for a in traverse(manager.chain) if hasattr(a, "addons")]
            self._groups = {}
            self._key = self._current(manager)
        groups = self._groups.get(name)
        if groups is None:
            groups = self._groups[name] = [
                having for top in manager.chain
                if (having := [a for a in traverse([top]) if getattr(a, name, None)])
            ]
        return groups


def handler(addon: Any, name: str) -> Callable[..., Any] | None:
    """The addon's handler of hook `name`, looked up now, as mitmproxy's `_iter_hooks` does it:
    None when it has none (or an imported module of that name); not callable is an error."""
    func = getattr(addon, name, None)
    if not func or isinstance(func, types.ModuleType):
        return None
    if not callable(func):
        raise exceptions.AddonManagerError(f"Addon handler {name} ({addon}) not callable")
    return func


async def invoke_addon(group: list[Any], event: hooks.Hook) -> None:
    """The hook on one top-level addon's addons that have it (`AddonManager.invoke_addon`; the
    name lets mitmproxy's `safecall` cut its frame from a logged traceback, as it cuts that)."""
    for addon in group:
        if (func := handler(addon, event.name)) is None:
            continue
        res = func(*event.args())
        if res is not None and inspect.isawaitable(res):
            await res


def invoke_addon_sync(group: list[Any], event: hooks.Hook) -> None:
    """`invoke_addon` for a synchronous trigger (`AddonManager.invoke_addon_sync`): an async
    handler is an error, as there."""
    for addon in group:
        if (func := handler(addon, event.name)) is None:
            continue
        if inspect.iscoroutinefunction(func):
            raise exceptions.AddonManagerError(
                f"Async handler {event.name} ({addon}) cannot be called from sync context")
        func(*event.args())


mitmproxy_trigger_event: Callable[..., Any] = AddonManager.trigger_event  # for tests to compare with


def install() -> None:
    """Put the table-driven dispatch in place of `AddonManager.trigger_event` (by
    `retimer.proxy.patches.install()`, once per process: a second call changes nothing)."""
    if AddonManager.trigger_event is not mitmproxy_trigger_event:
        return
    tables: weakref.WeakKeyDictionary[AddonManager, HookTable] = weakref.WeakKeyDictionary()

    async def trigger_event(manager: AddonManager, event: hooks.Hook) -> None:
        table = tables.get(manager)
        if table is None:
            table = tables[manager] = HookTable()
        for group in table.groups(manager, event.name):
            try:
                with safecall():
                    await invoke_addon(group, event)
            except exceptions.AddonHalt:
                return

    AddonManager.trigger_event = trigger_event  # type: ignore[method-assign,assignment]


NEEDED = {  # what this module relies on, for the start-up check (None: missing)
    "AddonManager.trigger_event": getattr(AddonManager, "trigger_event", None),
    "AddonManager.invoke_addon": getattr(AddonManager, "invoke_addon", None),
    "AddonManager.chain": "chain" in AddonManager.__init__.__code__.co_names or None,
    "AddonManager.lookup": "lookup" in AddonManager.__init__.__code__.co_names or None,
}
