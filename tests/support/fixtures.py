"""Fixtures shared by every tier, defined here once (loaded by tests/conftest.py).

A test module says what it needs with markers, not with a fixture of its own:

`fake`: a started FakeLLM (tests/support/upstream.py), set up by the closest
  `@pytest.mark.fake_llm(**options)` (the test's, else its class's, else the module's
  `pytestmark`; none: `FakeLLM()` as is). Options: FakeLLM's keyword arguments (`bursts`,
  `burst_gap`, `per_event_gap`, `first_delay`, `gzip`, `close`, `tls`, `openai_body`,
  `anthropic_body`, ...), and
    openai=TEXT / anthropic=TEXT  the body `make_openai_stream(TEXT)` / `make_anthropic_stream(TEXT)`,
    words_per_chunk=N             ... with N words per chunk (default 3),
    pages={path: html}            pages served on GET (a fake LLM site for browsers),
    scope="module"                one instance per distinct set of options per module, started at its
                                  first use and stopped at the module's end (default "function": one
                                  per test),
    clear=True                    (module scope) forget the requests served before each test.
  An indirect parametrization gives a dict merged over the marker's options:
  `@pytest.mark.parametrize("fake", [{"tls": False}, {"tls": True}], indirect=True)`.

`proxy`: a started RetimerProxy (tests/support/proxy.py), set up by the closest
  `@pytest.mark.retimer_proxy(*args, scope="function"|"module", trust_fake=False, **kwargs)`:
  `args` are the command line's; one may be a callable taking the test's `fake` and returning a
  tuple of arguments (see `intercept_tls_fake`). `trust_fake=True` passes
  `upstream_ca=fake.ca_path`; other keyword arguments go to RetimerProxy (a callable one is given
  `fake` too). Module scope: one proxy per distinct command line per module (one that depends on
  the fake wants a module-scoped fake: a new fake's CA makes a new command line).

`fake_api`: the module's FakeAPI (tests/support/clients/fakeapi.py), set up by the module's
  `@pytest.mark.fake_api(script=FACTORY, **kwargs)`: `FACTORY()` makes its script (none: FakeAPI's
  default), the keyword arguments go to FakeAPI (`bursts`, ...). Module-scoped.

`agent_proxies`: the agent harness's `Proxies` over `fake_api` (module-scoped), for the agent
  CLIs of tests/e2e/test_clients_{agents,ide}.py.

`chromium`: a headless Chromium (Playwright on the system binary), module-scoped.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.proxy import RetimerProxy
from tests.support.stream_bodies import make_anthropic_stream, make_openai_stream
from tests.support.upstream import FakeLLM

if TYPE_CHECKING:
    from tests.support.clients.agent_harness import Proxies
    from tests.support.clients.fakeapi import FakeAPI

SCOPES = ("function", "module")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fake_llm(**options): the `fake` fixture's FakeLLM: its keyword arguments, "
        "openai=/anthropic=TEXT (words_per_chunk=N), pages={path: html}, scope='module', clear=True "
        "(tests/support/fixtures.py)")
    config.addinivalue_line(
        "markers", "retimer_proxy(*args, scope='function', trust_fake=False, **kwargs): the `proxy` "
        "fixture's RetimerProxy; an arg may be a callable of the fake (tests/support/fixtures.py)")
    config.addinivalue_line(
        "markers", "fake_api(script=FACTORY, **kwargs): the module's `fake_api` fixture, a FakeAPI "
        "(tests/support/fixtures.py)")


def intercept_tls_fake(fake: FakeLLM) -> tuple[str, ...]:
    """A `retimer_proxy` argument: intercept the fake's TLS (nothing when it speaks plain HTTP)."""
    return ("--intercept", r"^127\.0\.0\.1:") if fake.tls else ()


class _Pool:
    """Started servers of one module, each with the options it was made from; stopped at the end."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._made: list[tuple[object, Any]] = []

    def get(self, key: object, make: Callable[[], Any]) -> Any:
        for made_key, server in self._made:
            if made_key == key:
                return server
        server = self._stack.enter_context(make())
        self._made.append((key, server))
        return server

    def close(self) -> None:
        self._stack.close()


def _options(request: pytest.FixtureRequest, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    marker = request.node.get_closest_marker(name)
    args, kwargs = (marker.args, dict(marker.kwargs)) if marker else ((), {})
    return args, kwargs


def _scope(kwargs: dict[str, Any], what: str) -> str:
    scope = kwargs.pop("scope", "function")
    if scope not in SCOPES:
        raise pytest.UsageError(f"{what}: scope={scope!r}, not one of {SCOPES}")
    return scope


def _new_fake(options: dict[str, Any]) -> FakeLLM:
    """A FakeLLM (not started) from a `fake_llm` marker's options."""
    options = dict(options)
    per_chunk = options.pop("words_per_chunk", 3)
    if "openai" in options:
        options["openai_body"] = make_openai_stream(options.pop("openai"), words_per_chunk=per_chunk)
    if "anthropic" in options:
        options["anthropic_body"] = make_anthropic_stream(options.pop("anthropic"),
                                                          words_per_chunk=per_chunk)
    pages = options.pop("pages", {})
    fake = FakeLLM(**options)
    fake.pages.update(pages)
    return fake


@pytest.fixture(scope="module")
def _fake_pool() -> Iterator[_Pool]:
    pool = _Pool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def _proxy_pool() -> Iterator[_Pool]:
    pool = _Pool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """A started FakeLLM as the closest `fake_llm` marker says (see the module docstring)."""
    args, options = _options(request, "fake_llm")
    if args:
        raise pytest.UsageError("fake_llm takes keyword arguments only")
    options.update(getattr(request, "param", None) or {})
    scope, clear = _scope(options, "fake_llm"), options.pop("clear", False)
    if scope == "module":
        pool: _Pool = request.getfixturevalue("_fake_pool")
        server = pool.get(options, lambda: _new_fake(options))
        if clear:
            server.clear()
        yield server
        return
    if clear:
        raise pytest.UsageError("fake_llm: clear=True is for scope='module' (a new fake is empty)")
    with _new_fake(options) as server:
        yield server


@pytest.fixture
def proxy(request: pytest.FixtureRequest) -> Iterator[RetimerProxy]:
    """A started RetimerProxy as the closest `retimer_proxy` marker says (see the module docstring)."""
    marker = request.node.get_closest_marker("retimer_proxy")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the `proxy` fixture needs a "
                                "@pytest.mark.retimer_proxy(...) marker")
    kwargs = dict(marker.kwargs)
    scope, trust = _scope(kwargs, "retimer_proxy"), kwargs.pop("trust_fake", False)
    needs_fake = trust or any(callable(x) for x in (*marker.args, *kwargs.values()))
    server = request.getfixturevalue("fake") if needs_fake else None
    args: list[str] = []
    for arg in marker.args:
        args += arg(server) if callable(arg) else [arg]
    kwargs = {k: v(server) if callable(v) else v for k, v in kwargs.items()}
    if trust:
        kwargs["upstream_ca"] = server.ca_path  # type: ignore[union-attr]
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")

    def make() -> RetimerProxy:
        return RetimerProxy(factory.mktemp("proxy"), *args, **kwargs)

    if scope == "module":
        pool: _Pool = request.getfixturevalue("_proxy_pool")
        yield pool.get((args, kwargs), make)
        return
    with make() as started:
        yield started


@pytest.fixture(scope="module")
def fake_api(request: pytest.FixtureRequest) -> Iterator[FakeAPI]:
    """The module's FakeAPI as its `fake_api` marker says (see the module docstring)."""
    from tests.support.clients.fakeapi import FakeAPI

    _, kwargs = _options(request, "fake_api")
    factory = kwargs.pop("script", None)
    with FakeAPI(factory() if factory else None, **kwargs) as api:
        yield api


@pytest.fixture(scope="module")
def agent_proxies(tmp_path_factory: pytest.TempPathFactory, fake_api: FakeAPI) -> Iterator[Proxies]:
    """The agent harness's retimer proxies over `fake_api`, started as the cases ask for them."""
    from tests.support.clients.agent_harness import Proxies

    with Proxies(tmp_path_factory.mktemp("retimer"), fake_api) as p:
        yield p


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium (the system's binary, driven by Playwright), shared by the module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-component-update"])
        try:
            yield browser
        finally:
            browser.close()
