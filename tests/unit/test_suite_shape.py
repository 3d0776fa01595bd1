"""The suite's shape, kept: every fixture is defined in one file (the shared ones once, in
tests/support/fixtures.py, set up by markers), no module imports a test module (what two tiers
share lives in tests/support), and every test module lives in a tier's folder.

Read with `ast` from the source of every .py under tests/ (tests/fixtures holds data, not tests).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath

import pytest

from tests.support.paths import FIXTURES, TESTS

TIERS = ("unit", "proxy", "e2e")


def suite_sources() -> dict[str, str]:
    """tests/**/*.py but tests/fixtures: path (from the checkout, with "/") -> source."""
    return {p.relative_to(TESTS.parent).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(TESTS.rglob("*.py")) if not p.is_relative_to(FIXTURES)}


def _fixture_decorator(dec: ast.expr) -> ast.expr | None:
    """The decorator if it makes a fixture: `@pytest.fixture`, `@pytest.fixture(...)`, `@fixture`,
    `@fixture(...)` (any module's `fixture`, pytest_asyncio's too)."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(target, ast.Name) and target.id == "fixture":
        return dec
    if isinstance(target, ast.Attribute) and target.attr == "fixture":
        return dec
    return None


def fixture_names(source: str) -> set[str]:
    """The fixtures a module defines (at any depth: classes too), by the name tests ask for."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for dec in node.decorator_list:
            if _fixture_decorator(dec) is None:
                continue
            name = node.name
            if isinstance(dec, ast.Call):  # @pytest.fixture(name="other")
                for kw in dec.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        name = kw.value.value
            names.add(name)
    return names


def duplicated_fixtures(sources: Mapping[str, str]) -> dict[str, list[str]]:
    """Fixture name -> the files defining it, for each name defined in more than one file."""
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path, source in sources.items():
        for name in fixture_names(source):
            where[name].append(path)
    return {name: sorted(paths) for name, paths in sorted(where.items()) if len(paths) > 1}


def _is_test_module(module: str) -> bool:
    """tests.<tier>[.<package>...].test_<name> (or a module inside such a package)."""
    parts = module.split(".")
    return (len(parts) >= 3 and parts[0] == "tests" and parts[1] in TIERS
            and any(p.startswith("test_") for p in parts[2:]))


def _imported(path: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module or module.name) for each import in a file, relative ones resolved."""
    package = list(PurePosixPath(path).with_suffix("").parts)[:-1]  # the file's package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def imports_of_test_modules(sources: Mapping[str, str]) -> list[str]:
    """`path:line imports module` for each import of a test module."""
    found = []
    for path, source in sources.items():
        for line, module in _imported(path, ast.parse(source)):
            if _is_test_module(module):
                found.append(f"{path}:{line} imports {module}")
    return sorted(set(found))



def misplaced_test_modules(paths: list[str]) -> list[str]:
    """Test modules (test_*.py, *_test.py) outside tests/<tier>/."""
    out = []
    for path in paths:
        p = PurePosixPath(path)
        if not (p.name.startswith("test_") or p.name.endswith("_test.py")):
            continue
        parts = p.parts
        if not (len(parts) >= 3 and parts[0] == "tests" and parts[1] in TIERS):
            out.append(path)
    return sorted(out)


# --------------------------------------------------------------------------- the suite itself


def test_no_fixture_is_defined_in_more_than_one_file() -> None:
    dupes = duplicated_fixtures(suite_sources())
    assert not dupes, "fixtures defined in more than one file (share one in tests/support/fixtures.py " \
        "set up by a marker, or give each its own name):\n" + "\n".join(
            f"  {name}: {', '.join(paths)}" for name, paths in dupes.items())


def test_no_module_imports_a_test_module() -> None:
    found = imports_of_test_modules(suite_sources())
    assert not found, "test modules imported (move what they share to tests/support):\n" + "\n".join(
        f"  {x}" for x in found)


def test_every_test_module_is_in_a_tier() -> None:
    sources = suite_sources()
    assert any(p.startswith("tests/unit/test_") for p in sources)  # the scan sees the suite
    misplaced = misplaced_test_modules(list(sources))
    assert not misplaced, f"test modules outside tests/{{{','.join(TIERS)}}}: {misplaced}"


# --------------------------------------------------------------------------- the checks catch


@pytest.mark.parametrize("decorator", [
    "@pytest.fixture", "@pytest.fixture()", "@pytest.fixture(scope='module')", "@fixture",
    "@fixture(autouse=True)", "@pytest_asyncio.fixture"])
def test_a_fixture_in_two_files_is_found_whatever_its_decorator(decorator: str) -> None:
    one = f"import pytest\n\n{decorator}\ndef fake():\n    return 1\n"
    other = "import pytest\n\nclass TestX:\n    @pytest.fixture\n    def fake(self):\n        return 2\n"
    sources = {"tests/e2e/test_a.py": one, "tests/proxy/test_b.py": other,
               "tests/unit/test_c.py": "def fake():\n    return 3\n"}  # not a fixture
    assert duplicated_fixtures(sources) == {"fake": ["tests/e2e/test_a.py", "tests/proxy/test_b.py"]}


def test_a_fixture_is_known_by_the_name_it_is_given() -> None:
    source = "import pytest\n\n@pytest.fixture(name='proxy')\ndef _proxy():\n    return 1\n"
    assert fixture_names(source) == {"proxy"}
    assert duplicated_fixtures({"tests/a.py": source, "tests/b.py": "@fixture\ndef proxy(): ...\n"}) == {
        "proxy": ["tests/a.py", "tests/b.py"]}


@pytest.mark.parametrize(("path", "line"), [
    ("tests/e2e/test_a.py", "import tests.unit.test_sse"),
    ("tests/e2e/test_a.py", "import tests.unit.test_sse as sse"),
    ("tests/support/x.py", "from tests.e2e.test_browser import PAGE"),
    ("tests/support/x.py", "from tests.proxy import test_upstream"),
    ("tests/e2e/test_a.py", "from .test_b import helper"),
    ("tests/e2e/test_a.py", "from . import test_b"),
    ("tests/support/clients/x.py", "from ...e2e.test_b import helper"),
    ("tests/e2e/test_a.py", "def f():\n    from tests.e2e.test_b import helper\n"),
])
def test_an_import_of_a_test_module_is_found(path: str, line: str) -> None:
    assert imports_of_test_modules({path: line + "\n"}), line


@pytest.mark.parametrize("line", [
    "import tests.support.upstream", "from tests.support import fixtures",
    "from tests.support.study import TEXT", "from . import conftest", "import test_something_else",
    "from tests.e2e import conftest"])
def test_other_imports_pass(line: str) -> None:
    assert imports_of_test_modules({"tests/e2e/test_a.py": line + "\n"}) == []


def test_a_test_module_outside_the_tiers_is_found() -> None:
    paths = ["tests/unit/test_a.py", "tests/e2e/sub/test_b.py", "tests/support/fixtures.py",
             "tests/test_top.py", "tests/support/test_helper.py", "tests/unit/c_test.py",
             "tests/other/d_test.py"]
    assert misplaced_test_modules(paths) == ["tests/other/d_test.py", "tests/support/test_helper.py",
                                             "tests/test_top.py"]
