"""`retimer ARGS` in the test's own process, for options refused before anything starts: the
one-line error without the second of CPU a `python -m retimer` subprocess costs. The installed
command's own output is held by the tests that run it (tests/e2e/test_cli.py)."""

from __future__ import annotations

import pytest


def refused(args: list[str], capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> tuple[object, str]:
    """(exit code, stderr) of `retimer ARGS`; a test fails if retimer goes on to build a proxy."""
    from retimer.cli.main import main
    from retimer.cli.proxy import runner as proxy_runner

    def built(*_: object, **__: object) -> None:
        raise AssertionError(f"retimer {args} went on to build the proxy")

    monkeypatch.setattr(proxy_runner, "build_proxy", built)
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    return exited.value.code, capsys.readouterr().err
