"""retimer installed as its users install it, run from outside the checkout.

- The README's first command, `scripts/retimer`, installs it as a tool (uv tool, pipx, or a venv
  of its own) with its runtime dependencies only, and reinstalls when the clone's code changed.
- The built wheel (from the sdist, as `uv build` makes it) in a clean venv: `--version`,
  `profiles`, the banner and one stream re-timed through the installed proxy, `mitmdump -s` with
  the installed addon script, and mitmproxy-addon-launcher finding it by its entry point.
Install sizes and times are printed after the results ("figures measured").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import retimer
from tests.conftest import FIGURES
from tests.support.paths import ROOT
from tests.support.proxy import RetimerProxy, free_port, post_through_proxy, stop_process, wait_for_log
from tests.support.sdk_views import openai_view
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

VENV_BIN = Path(sys.executable).parent  # the test venv: uv and pipx live here
TEST_EXTRAS = ("pytest", "hypothesis", "litellm", "playwright", "matplotlib", "mypy", "openai",
               "anthropic", "google.genai")
TEXT = "Installed like a tool: the same bytes, only later. Ünïcödé and 数字 12,345 stay. " * 3
PACED = ("--ttft", "300ms", "--tps", "200", "--jitter", "0", "--profile", "o3")
INSTALLED = re.compile(r"installed in (\d+) s: (\S+) in (\S+); the command is (\S+)")


def base_python() -> str:
    """The Python >= 3.12 that scripts/retimer itself would pick (not the test venv's)."""
    return subprocess.run([str(ROOT / "scripts" / "find-python")], capture_output=True, text=True,
                          check=True).stdout.strip()


def copy_clone(dest: Path) -> Path:
    """The clone as it stands, uncommitted work included, in a folder of its own."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the test venv: no PYTHONPATH, no active venv, no .venv/bin."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != VENV_BIN.resolve())
    env.update(extra)
    return env


def importable(python: Path, names: tuple[str, ...]) -> list[str]:
    """Which of `names` the interpreter `python` can import."""
    code = ("import importlib.util, sys\n"
            "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n.split('.')[0])"
            " and importlib.util.find_spec(n)))")
    out = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True,
                         check=True, cwd="/")
    return out.stdout.split()


def figure(config: pytest.Config, line: str) -> None:
    config.stash[FIGURES].append(line)


# -- the README's first command ------------------------------------------------------------------
def run_script(clone: Path, tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(clone / "scripts" / "retimer"), *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("installer", ["venv", "uv", "pipx"])
def test_the_first_command_installs_a_tool_with_runtime_dependencies_only(
        tmp_path: Path, installer: str, pytestconfig: pytest.Config) -> None:
    clone = copy_clone(tmp_path / "clone")
    home = tmp_path / "home"
    dirs = {"XDG_DATA_HOME": str(home / "data"), "XDG_BIN_HOME": str(home / "bin"),
            "UV_TOOL_DIR": str(home / "uv-tools"), "UV_TOOL_BIN_DIR": str(home / "bin"),
            "PIPX_HOME": str(home / "pipx"), "PIPX_BIN_DIR": str(home / "bin")}
    env = clean_env(**dirs)
    if installer != "venv":  # a user who has uv or pipx on PATH
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env['PATH']}"
    if installer == "pipx":
        env["RETIMER_INSTALLER"] = "pipx"  # uv is on PATH too, and would be picked first

    first = run_script(clone, tmp_path, env, "--version")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"retimer {retimer.__version__} (mitmproxy 12."), first.stdout
    assert f"with {installer} (runtime dependencies only)" in first.stderr
    found = INSTALLED.search(first.stderr)
    assert found, first.stderr
    seconds, size, env_dir, exe = found.groups()
    assert Path(exe) == home / "bin" / "retimer" and Path(exe).exists()
    assert Path(env_dir).is_relative_to(home)
    python = Path(env_dir) / "bin" / "python"
    assert importable(python, ("mitmproxy", "numpy", "yaml", "rich", "retimer")) == \
        ["mitmproxy", "numpy", "yaml", "rich", "retimer"]
    assert importable(python, TEST_EXTRAS) == []
    figure(pytestconfig, f"scripts/retimer with {installer}: {size} in the tool's environment, "
                         f"installed in {seconds} s")

    again = run_script(clone, tmp_path, env, "profiles")  # installed: runs at once
    assert again.returncode == 0 and "cerebras" in again.stdout, again.stderr
    assert "installing" not in again.stderr

    if installer == "uv":  # a changed clone is installed anew
        init = clone / "retimer" / "__init__.py"
        init.write_text(init.read_text().replace(retimer.__version__, "9.9.9"))
        changed = run_script(clone, tmp_path, env, "--version")
        assert changed.returncode == 0, changed.stderr
        assert "installing retimer 9.9.9" in changed.stderr
        assert changed.stdout.startswith("retimer 9.9.9 ")


def test_the_first_command_names_a_bad_installer_in_one_line(tmp_path: Path) -> None:
    clone = copy_clone(tmp_path / "clone")
    env = clean_env(XDG_DATA_HOME=str(tmp_path / "data"), RETIMER_INSTALLER="conda")
    result = run_script(clone, tmp_path, env, "--version")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == \
        "retimer: error: RETIMER_INSTALLER=conda: use uv, pipx or venv"


# -- the built wheel in a clean venv ---------------------------------------------------------------
@dataclass(frozen=True)
class Installed:
    wheel: Path
    sdist: Path
    venv: Path
    cwd: Path  # outside the checkout

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self) -> dict[str, str]:
        env = clean_env()
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}"
        return env

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=self.cwd, env=self.env(), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    clone = copy_clone(tmp / "clone")
    uv = [sys.executable, "-m", "uv"]
    built = subprocess.run([*uv, "build", "--out-dir", str(tmp / "dist"), str(clone)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("retimer-*.whl")
    (sdist,) = (tmp / "dist").glob("retimer-*.tar.gz")
    venv = tmp / "venv"
    subprocess.run([*uv, "venv", "-q", "-p", base_python(), str(venv)], check=True, timeout=120)
    start = time.monotonic()
    done = subprocess.run([*uv, "pip", "install", "-q", "-p", str(venv / "bin" / "python"), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    size = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True).stdout.split()[0]
    figure(pytestconfig, f"the wheel ({wheel.stat().st_size // 1024} KB; sdist "
                         f"{sdist.stat().st_size // 1024} KB) in a clean venv: {size} MB, "
                         f"installed in {took:.0f} s")
    cwd = tmp / "elsewhere"
    cwd.mkdir()
    return Installed(wheel, sdist, venv, cwd)


def test_the_wheel_is_named_for_the_version_and_holds_the_profiles_and_entry_points(
        installed: Installed) -> None:
    assert installed.wheel.name == f"retimer-{retimer.__version__}-py3-none-any.whl"
    assert installed.sdist.name == f"retimer-{retimer.__version__}.tar.gz"
    with zipfile.ZipFile(installed.wheel) as whl:
        names = whl.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entries = whl.read(entry_points).decode()
    shipped = sorted(Path(n).name for n in names if n.startswith("retimer/profiles/"))
    assert shipped == sorted(p.name for p in (ROOT / "profiles").iterdir() if p.is_file())
    assert "retimer/addon_script.py" in names
    assert "retimer/py.typed" in names  # PEP 561: type checkers read retimer's annotations
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    assert "retimer = retimer.cli.main:main" in entries
    assert "[mitmproxy_addon_launcher.addon_script]\nretimer = retimer.addon_script" in entries


def test_the_installed_command_answers_from_outside_the_checkout(installed: Installed) -> None:
    assert importable(installed.venv / "bin" / "python", TEST_EXTRAS) == []
    version = installed.run(installed.bin("retimer"), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"retimer {retimer.__version__} (mitmproxy 12.")
    profiles = installed.run(installed.bin("retimer"), "profiles")
    assert profiles.returncode == 0, profiles.stderr
    assert "cerebras" in profiles.stdout and "human-reading" in profiles.stdout
    addon = installed.run(installed.bin("retimer"), "addon")
    assert addon.returncode == 0, addon.stderr
    assert Path(addon.stdout.strip()).is_relative_to(installed.venv)  # the package, not the clone
    assert Path(addon.stdout.strip()).name == "addon_script.py"


def test_the_installed_proxy_retimes_a_stream(installed: Installed, tmp_path: Path) -> None:
    with FakeLLM(make_openai_stream(TEXT), bursts=2) as fake:
        with RetimerProxy(tmp_path, "--upstream", fake.url, *PACED, command=[installed.bin("retimer")],
                          cwd=installed.cwd, env=installed.env()) as proxy:
            with httpx.Client() as client:
                with client.stream("POST", proxy.url + "/v1/chat/completions", json={}) as r:
                    body = r.read()
            (record,) = proxy.records(1)
            banner = proxy.stdout()
    assert openai_view(body) == openai_view(make_openai_stream(TEXT))  # the same text, re-split
    assert body.count(b"data: ") > make_openai_stream(TEXT).count(b"data: ")
    assert banner.startswith(f"retimer listening on {proxy.url}\n")
    assert "  profile  " in banner and f"OPENAI_BASE_URL={proxy.url}/v1" in banner
    assert record["outcome"] == "complete"
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 20
    assert "Traceback" not in proxy.stderr()


def mitmdump_retimes(installed: Installed, tmp: Path, argv: list[str]) -> str:
    """Run a mitmproxy tool from the installed venv as a forward proxy with retimer's addon, send
    one stream through it, and return its record line."""
    port = free_port()
    log = tmp / "records.jsonl"
    proc = subprocess.Popen(
        [*argv, "-q", "--listen-host", "127.0.0.1", "-p", str(port), "--set", f"confdir={tmp}",
         "--set", "retimer_profile=groq", "--set", "retimer_jitter=0", "--set", f"retimer_log={log}"],
        cwd=installed.cwd, env=installed.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    try:
        with FakeLLM(make_openai_stream(TEXT), bursts=2) as fake:
            body = post_through_proxy(port, fake.url + "/v1/chat/completions", lambda: proc.poll() is None)
        records = wait_for_log(log)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
        stop_process(proc)
    assert openai_view(body) == openai_view(make_openai_stream(TEXT))
    assert b"Traceback" not in err, err.decode(errors="replace")
    return records


def test_mitmdump_loads_the_installed_addon_script(installed: Installed, tmp_path: Path) -> None:
    script = installed.run(installed.bin("retimer"), "addon").stdout.strip()
    record = mitmdump_retimes(installed, tmp_path, [installed.bin("mitmdump"), "-s", script])
    assert '"profile":"groq-llama-3.3-70b"' in record


@pytest.fixture
def launcher(installed: Installed) -> Iterator[str]:
    """mitmproxy-addon-launcher installed beside retimer, as `uv tool install --with` would."""
    done = subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "-p",
                           installed.bin("python"), "mitmproxy-addon-launcher"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    yield installed.bin("mitmdump-addon-launcher")


def test_mitmproxy_addon_launcher_finds_retimer_by_its_entry_point(
        installed: Installed, launcher: str, tmp_path: Path) -> None:
    record = mitmdump_retimes(installed, tmp_path, [launcher])
    assert '"profile":"groq-llama-3.3-70b"' in record


def test_the_changelog_starts_with_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    (first,) = re.findall(r"^## (\S+)", changelog, re.M)[:1]
    assert first == retimer.__version__
