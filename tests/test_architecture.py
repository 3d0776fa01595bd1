"""The architecture's rules (docs/architecture.md), checked on the source itself.

import-linter (.importlinter) holds the layers and the sans-io core; ruff and mypy run in .ci/run
(scripts/lint). These tests hold what neither can express: no import cycle between modules
(function-level imports count), no private name crossing a module, only the bridge touching
mitmproxy's internals, and file reads in the core in one loader.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "retimer"
CORE = ("wire", "timing", "profile")
# mitmproxy's proxy-layer machinery: private API, used by the pacing bridge alone
MITMPROXY_INTERNALS = ("mitmproxy.proxy.layer", "mitmproxy.proxy.layers", "mitmproxy.proxy.commands",
                       "mitmproxy.proxy.events", "mitmproxy.proxy.server", "mitmproxy.proxy.context",
                       "mitmproxy.proxy.tunnel")
FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "glob", "rglob", "iterdir",
              "is_file", "is_dir", "exists", "stat", "listdir", "scandir", "walk"}


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


def test_only_the_bridge_touches_mitmproxy_internals() -> None:
    users: dict[str, list[str]] = {}
    for path in sources("retimer"):
        mod = module_name(path)
        for target, line in imports_of(ast.parse(path.read_text()), mod, path.name == "__init__.py"):
            private = any(part.startswith("_") and not part.startswith("__") for part in target.split("."))
            if target.startswith(MITMPROXY_INTERNALS) or (target.startswith("mitmproxy.") and private):
                users.setdefault(mod, []).append(f"{target} (line {line})")
    assert users, "the bridge itself must show up: the check reads imports"
    assert {m for m in users if not m.startswith("retimer.proxy.bridge")} == set(), users


def file_io_calls(tree: ast.AST) -> list[int]:
    """Lines that call a file-system function (`open`, `Path.read_text`, `glob`, ...)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in FILE_CALLS:
                lines.append(node.lineno)
    return lines


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
