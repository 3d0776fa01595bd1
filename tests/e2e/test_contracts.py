"""Each import-linter contract in .importlinter catches what it is there for.

For every contract a case adds one violating import to a copy of the package and runs lint-imports
on the copy (PYTHONPATH and the working directory are the copy, so it is the copy that is
analysed): the unmodified copy keeps every contract, the modified one breaks that contract and
keeps the others. The contracts are read from .importlinter, so a new contract without a case
here fails.

Also here, what import-linter cannot express for the sans-io core: the imports a forbidden
contract ignores are the harmless submodules the comment beside them names, and no core module
imports through `__import__`, `eval` or `exec`.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.source_scan import file_io_calls

CONFIG = ROOT / ".importlinter"
TOOL = Path(sys.executable).with_name("lint-imports")
SECTION = "importlinter:contract:"

# contract id -> (file to edit, import to add): each one breaks exactly that contract
VIOLATIONS: dict[str, tuple[str, str]] = {
    # the core's own layers inverted: wire may not import timing (no I/O involved, so only
    # the layers contract can see it)
    "layers": ("retimer/wire/sse.py", "import retimer.timing.metrics"),
    "core-no-concurrency": ("retimer/timing/pacer.py", "import asyncio"),
    "core-no-network": ("retimer/timing/metrics.py", "import socket"),
    "core-no-database": ("retimer/cache/entry.py", "import sqlite3"),
    "core-no-dynamic-imports": ("retimer/profile/loader.py", "import importlib.resources"),
    # the study file's loader, which `study analyze --study` imports, taking the proxy's in
    "analysis-no-mitmproxy": ("retimer/proxy/study/files.py", "import mitmproxy.http"),
    "addons-see-no-pacer": ("retimer/proxy/cache_addon.py", "from retimer.timing.pacer import StreamPacer"),
}

# ignored imports of a whole external package (import-linter sees only top-level names): what
# may be imported from it
HARMLESS = {"urllib": {"urllib.parse"}, "http": {"http"}}
# builtins that import or run code a contract cannot see
HIDDEN_IMPORTS = {"__import__", "eval", "exec", "__builtins__"}


def contracts() -> dict[str, configparser.SectionProxy]:
    config = configparser.ConfigParser()
    config.read(CONFIG, encoding="utf-8")
    return {s.removeprefix(SECTION): config[s] for s in config.sections() if s.startswith(SECTION)}


def contract_names() -> dict[str, str]:
    return {cid: " ".join(section["name"].split()) for cid, section in contracts().items()}


def copy_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "retimer", tmp_path / "retimer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    return tmp_path


def lint(copy: Path) -> tuple[int, str]:
    """lint-imports on the copy; its exit status and its report with whitespace collapsed (it
    wraps long contract names)."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    result = subprocess.run([str(TOOL), "--no-logo", "--no-cache", str(copy / ".importlinter")], cwd=copy,
                            env=env, capture_output=True, text=True, timeout=120)
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def test_every_contract_has_a_violation_case() -> None:
    ids = set(contracts())
    assert "layers" in ids and len(ids) > 1, ids  # .importlinter was really read
    assert ids - VIOLATIONS.keys() == set(), "a contract with no case in VIOLATIONS proving it breaks"
    assert VIOLATIONS.keys() - ids == set(), "a case in VIOLATIONS for a contract .importlinter no longer has"


def test_the_unmodified_copy_keeps_every_contract(tmp_path: Path) -> None:
    code, report = lint(copy_package(tmp_path))
    assert code == 0, report[-3000:]
    for name in contract_names().values():
        assert f"{name} KEPT" in report, name


@pytest.mark.parametrize("contract", sorted(VIOLATIONS))
def test_a_violating_import_breaks_the_contract(tmp_path: Path, contract: str) -> None:
    names = contract_names()
    assert contract in names, f"{contract} is not in .importlinter"
    file, line = VIOLATIONS[contract]
    copy = copy_package(tmp_path)
    target = copy / file
    target.write_text(target.read_text(encoding="utf-8").rstrip("\n") + f"\n{line}\n", encoding="utf-8")
    assert (ROOT / file).read_text(encoding="utf-8").count(line) == 0, "the case must add a new import"

    code, report = lint(copy)

    assert code != 0, report[-3000:]
    assert f"{names[contract]} BROKEN" in report, report[-3000:]
    for other, name in names.items():
        if other != contract:
            assert f"{name} KEPT" in report, f"{line} in {file} also broke {other}: {report[-3000:]}"
    imported = line.split()[1]
    assert imported.split(".")[0] in report or imported in report, report[-3000:]


def module_file(module: str) -> Path:
    path = ROOT / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # the parent is not a package
        return False


def imports_from(tree: ast.AST, package: str) -> set[str]:
    """The modules of `package` (itself included) a tree imports; `from pkg import name` counts as
    `pkg.name` when that is a module, else as `pkg`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if is_module(sub) else node.module)
    return {name for name in found if name == package or name.startswith(f"{package}.")}


def ignored_imports() -> list[tuple[str, str, str]]:
    """(contract, importer, imported) for every ignore_imports line."""
    return [(cid, *(side.strip() for side in line.split("->")))  # type: ignore[misc]
            for cid, section in contracts().items()
            for line in section.get("ignore_imports", "").strip().splitlines() if line.strip()]


def test_ignored_imports_are_only_the_harmless_submodules() -> None:
    ignored = ignored_imports()
    assert ignored, "no ignore_imports read from .importlinter"
    for contract, importer, imported in ignored:
        assert imported in HARMLESS, f"{contract}: ignoring {importer} -> {imported}, which HARMLESS does not name"
        path = module_file(importer)
        used = imports_from(ast.parse(path.read_text(encoding="utf-8")), imported)
        assert used, f"{contract}: {importer} does not import {imported}; drop the ignore"
        assert used <= HARMLESS[imported], f"{importer} imports {used - HARMLESS[imported]}, not only {HARMLESS[imported]}"


def core_sources() -> list[Path]:
    """The source modules of the core's forbidden contracts, as files."""
    modules = {m.strip() for cid, section in contracts().items()
               if section.get("type") == "forbidden" and cid.startswith("core-")
               for m in section.get("source_modules", "").split() if m.startswith("retimer")}
    assert {"retimer.wire", "retimer.timing", "retimer.profile"} <= modules, modules
    files: set[Path] = set()
    for module in modules:
        path = ROOT / Path(*module.split("."))
        files |= set(path.rglob("*.py")) if path.is_dir() else {path.with_suffix(".py")}
    return sorted(files)


def hidden_imports(source: str) -> list[str]:
    return sorted((f"line {node.lineno}: {node.id}" for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Name) and node.id in HIDDEN_IMPORTS), key=lambda hit: int(hit.split()[1][:-1]))


def test_hidden_import_finder_sees_one() -> None:
    assert hidden_imports("m = __import__('socket')\nexec('import ssl')\nx = eval\n") == [
        "line 1: __import__", "line 2: exec", "line 3: eval"]
    assert hidden_imports("import re\nre.compile('x')\n") == []


def test_the_core_imports_nothing_by_name_at_run_time() -> None:
    """`__import__`, `eval` and `exec` would import past every contract above."""
    files = core_sources()
    assert len(files) > 30, files
    found = {str(p.relative_to(ROOT)): hits for p in files if (hits := hidden_imports(p.read_text(encoding="utf-8")))}
    assert found == {}


# the one module outside wire, timing and profile that the forbidden contracts hold and that
# does file I/O: `retimer report --png DIR` makes DIR and has matplotlib write the PNG files
# (tests/unit/test_architecture.py holds wire, timing and profile to one loader)
FEATURE_FILE_WRITERS = {"retimer/report/png.py"}


def test_the_features_held_to_the_core_rule_touch_files_only_in_report_png() -> None:
    """study, cache.entry and report (but png) are pure, as docs/architecture.md says."""
    features = [p for p in core_sources() if p.relative_to(ROOT).parts[1] not in ("wire", "timing", "profile")]
    assert any(p.name == "entry.py" for p in features) and any(p.parent.name == "study" for p in features)
    found = {rel: lines for p in features
             if (lines := file_io_calls(ast.parse(p.read_text(encoding="utf-8")))) and (rel := str(p.relative_to(ROOT)))}
    assert found.keys() == FEATURE_FILE_WRITERS, found
