"""The architecture's rules (docs/architecture.md), checked on the source itself.

import-linter (.importlinter) holds the layers and the sans-io core; ruff and mypy run in .ci/run
(scripts/lint). These tests hold what neither can express: no import cycle between modules
(function-level imports count), no private name crossing a module, only two packages (the
pacing bridge and the patches) touching mitmproxy's internals, and file reads in the core in one
loader.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.source_scan import file_io_calls

PACKAGE = ROOT / "retimer"
CORE = ("wire", "timing", "profile")
# mitmproxy's proxy-layer machinery and servers: private API, used by two packages alone
MITMPROXY_INTERNALS = ("mitmproxy.proxy.layer", "mitmproxy.proxy.layers", "mitmproxy.proxy.commands",
                       "mitmproxy.proxy.events", "mitmproxy.proxy.server", "mitmproxy.proxy.context",
                       "mitmproxy.proxy.tunnel", "mitmproxy.proxy.mode_servers")
INTERNALS_PACKAGES = ("retimer.proxy.bridge", "retimer.proxy.patches")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)


def imports_of(tree: ast.AST, module: str, is_package: bool) -> Iterable[tuple[str, int]]:
    """(imported name, line) for every import in the tree, function-level ones included: each
    `from base import name` yields `base.name` (a module or not), plain imports the module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def retimer_graph() -> dict[str, set[str]]:
    """Module -> the retimer modules it imports (`from pkg import mod` imports mod; `from mod
    import name` imports mod)."""
    files = {module_name(p): p for p in sources("retimer")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        for target, _ in imports_of(tree, mod, path.name == "__init__.py"):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != mod:
                graph[mod].add(target)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    graph = retimer_graph()
    assert len(graph) > 40 and any(graph.values())  # the graph was really read
    assert cycles(graph) == []


def private_crossings(path: Path, source: str) -> list[str]:
    """`from retimer.x import _name` and `module._name` on an imported retimer module."""
    tree = ast.parse(source, str(path))
    found: list[str] = []
    modules: set[str] = set()  # local names bound to retimer modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("retimer"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {alias.name}")
                target = f"{node.module}.{alias.name}"
                if (ROOT / (target.replace(".", "/") + ".py")).exists() or (ROOT / target.replace(".", "/")).is_dir():
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("retimer"):
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_private_crossing_finder_sees_one(tmp_path: Path) -> None:
    probe = ROOT / "tests" / "probe.py"
    source = ("from retimer.proxy import bridge\nfrom retimer.timing.pacer import _x\n"
              "bridge._draining = False\n")
    assert len(private_crossings(probe, source)) == 2


@pytest.mark.parametrize("folder", ["retimer", "tests", "bench", "addons"])
def test_no_private_name_crosses_a_module(folder: str) -> None:
    found = [hit for p in sources(folder) for hit in private_crossings(p, p.read_text())]
    assert found == []


def internals_users(files: Iterable[tuple[str, str, bool]]) -> dict[str, list[str]]:
    """Module -> its imports of mitmproxy's internals, from (module, source, is package)."""
    users: dict[str, list[str]] = {}
    for mod, source, is_package in files:
        for target, line in imports_of(ast.parse(source), mod, is_package):
            private = any(part.startswith("_") and not part.startswith("__") for part in target.split("."))
            if target.startswith(MITMPROXY_INTERNALS) or (target.startswith("mitmproxy.") and private):
                users.setdefault(mod, []).append(f"{target} (line {line})")
    return users


def outside_internals_packages(users: Mapping[str, list[str]]) -> set[str]:
    return {m for m in users if not any(m == p or m.startswith(p + ".") for p in INTERNALS_PACKAGES)}


def test_internals_check_sees_a_module_outside_the_two_packages() -> None:
    users = internals_users([
        ("retimer.proxy.addon", "from mitmproxy.proxy.layers import http\n", False),
        ("retimer.proxy.bridge_x", "from mitmproxy.proxy import events\n", False),  # a prefix is no package
        ("retimer.proxy.bridge.driver", "from mitmproxy.proxy import events\n", False),
        ("retimer.proxy.patches", "from mitmproxy.addonmanager import _x\n", True),
    ])
    assert outside_internals_packages(users) == {"retimer.proxy.addon", "retimer.proxy.bridge_x"}


def test_only_the_bridge_and_the_patches_touch_mitmproxy_internals() -> None:
    users = internals_users(
        (module_name(p), p.read_text(), p.name == "__init__.py") for p in sources("retimer"))
    assert {m.rsplit(".", 1)[0] for m in users} >= set(INTERNALS_PACKAGES), "the check reads imports"
    assert outside_internals_packages(users) == set(), users


def test_the_proxy_has_no_flat_bridge_modules() -> None:
    """The bridge is one package; no `bridge_*` module beside it names itself part of it."""
    assert sorted(p.name for p in (PACKAGE / "proxy").glob("bridge_*.py")) == []
    assert (PACKAGE / "proxy" / "bridge" / "__init__.py").is_file()


# what drives a stream's pacer: the core's playouts (retimer.timing.playout, .turns, .whole) do it
PACER_DRIVING = {"feed", "finish", "receive", "tally", "abort", "flush", "pop_due", "pop_all", "idle",
                 "prepare", "next_due", "cap_reached", "sent"}


def pacer_driving_calls(tree: ast.AST) -> list[str]:
    """`<something named pacer>.<driving method>(...)` calls."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in PACER_DRIVING and "pacer" in ast.unparse(node.func.value).lower()):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return found


def test_pacer_driving_finder_sees_one() -> None:
    tree = ast.parse("turn.pacer.pop_due(now)\nself.playout.step(now, None)\npacer.stats.emitted()\n")
    assert pacer_driving_calls(tree) == ["line 1: turn.pacer.pop_due"]


def test_the_shell_drives_pacers_only_through_the_core() -> None:
    """The shell feeds playouts and asks them one question per wake; no shell module calls a
    pacer's driving methods itself."""
    found = {module_name(p): calls for p in sources("retimer/proxy", "retimer/cli")
             if (calls := pacer_driving_calls(ast.parse(p.read_text())))}
    assert found == {}


SHELL = ("retimer/proxy", "retimer/cli", "retimer/report", "retimer/study", "retimer/cache", "retimer/records")
# `Any` in the shell, counted: only where a library's own types force it (mitmproxy's option
# loader, master and hook arguments, a command generator's send type, JSON records, the rows of
# the study's state database: retimer.proxy.study.statedb.Row). A new one must raise this on purpose,
# with its reason in the code.
SHELL_ANY_BUDGET = 37


def any_count(tree: ast.AST) -> int:
    return sum(1 for n in ast.walk(tree) if (isinstance(n, ast.Name) and n.id == "Any")
               or (isinstance(n, ast.Attribute) and n.attr == "Any"))


def test_any_counter_counts_names_and_attributes() -> None:
    assert any_count(ast.parse("from typing import Any\nx: Any\ny: typing.Any\nz: dict[str, Any]\n")) == 3


def test_the_shell_keeps_its_any_budget() -> None:
    counts = {module_name(p): n for p in sources(*SHELL) if (n := any_count(ast.parse(p.read_text())))}
    assert sum(counts.values()) <= SHELL_ANY_BUDGET, sorted(counts.items(), key=lambda kv: -kv[1])


def test_core_reads_files_in_one_loader() -> None:
    readers = {}
    for pkg in CORE:
        for path in sources(f"retimer/{pkg}"):
            calls = file_io_calls(ast.parse(path.read_text()))
            if calls:
                readers[module_name(path)] = calls
    assert len(readers) == 1, f"file access in the core outside one loader module: {readers}"
    assert next(iter(readers)).startswith("retimer.profile."), readers


def test_lint_imports_contracts_are_kept() -> None:
    """The layers and the sans-io core, as .importlinter declares them."""
    tool = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(tool), "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert "BROKEN" not in result.stdout and result.returncode == 0, result.stdout[-3000:]
    assert "KEPT" in result.stdout


# The modules that parse JSON, and what each parses: none of it is a records log. A log line is
# read by retimer.records.reader alone (docs/records.md), so a new JSON parser is either added
# here with what it reads, or it reads a log and belongs in retimer.records.
JSON_PARSERS = {
    "retimer.records.reader": "records logs",
    "retimer.cache.entry": "a cache entry's metadata",
    "retimer.cassette.format": "a cassette's index",
    "retimer.cli.proxy.worker_main": "the main process's messages to a worker",
    "retimer.cli.proxy.workers": "a worker's messages to the main process",
    "retimer.proxy.study.state": "the study state database's JSON columns",
    "retimer.study.page_api": "a study page's request bodies",
    "retimer.study.ratings": "a rating form's JSON body",
}


def test_only_the_records_reader_parses_a_log_line() -> None:
    parsers = {module_name(p) for p in sources("retimer") if "json.load" in p.read_text()}
    outside_wire = {m for m in parsers if not m.startswith("retimer.wire.")}  # API bodies
    assert outside_wire == set(JSON_PARSERS)


def documented_modules() -> set[str]:
    """The modules docs/architecture.md's "Packages and modules" tables name, by their package
    (a `### \\`retimer.x\\`` heading or a `\\`retimer.x.y\\`:` line above the table)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    part = text.split("## Packages and modules", 1)[1].split("\n## ", 1)[0]
    found: set[str] = set()
    package = ""
    for line in part.splitlines():
        if m := re.match(r"^### `(retimer\.[a-z_.]+)`|^`(retimer\.[a-z_.]+)`:", line):
            package = m.group(1) or m.group(2)
        elif (m := re.match(r"^\| `([a-z_0-9]+)/?` \|", line)) and package:
            found.add(f"{package}.{m.group(1)}")
    return found


def test_every_module_is_in_the_architecture_tables() -> None:
    modules = {module_name(p) for p in sources("retimer")}
    packages = {module_name(p) for p in sources("retimer") if p.name == "__init__.py"}
    documented = documented_modules()
    top = {"retimer", "retimer.__main__", "retimer.addon_script"}  # the text below the tables
    assert sorted(modules - packages - top - documented) == [], "modules missing from the tables"
    assert sorted(documented - modules) == [], "rows naming no module"
