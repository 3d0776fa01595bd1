"""scripts/setup-system, the first step of the README's test command: on a bare Debian or
Ubuntu machine it names every system package the tests need, installs them with apt-get as
root, and without root or sudo stops before pytest with the one command to run. apt-get here is
a stand-in on PATH that records its arguments: the machine's packages are never touched."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SETUP = ROOT / "scripts" / "setup-system"
BASH = shutil.which("bash") or "/bin/bash"
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def os_release() -> str:
    text = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    return "ubuntu" if "ubuntu" in text.lower() else "debian"


def expected_packages() -> list[str]:
    browsers = ["chromium-browser", "firefox"] if os_release() == "ubuntu" else ["chromium", "firefox-esr"]
    # HAProxy's Debian package puts it in /usr/sbin, which the script looks in beside PATH
    haproxy = [] if os.access("/usr/sbin/haproxy", os.X_OK) else ["haproxy"]
    # and PostgreSQL's server in its versioned folder, found by path as well
    postgres = [] if list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")) else ["postgresql"]
    # and the Kerberos headers (code-server's native modules) by their file
    krb5 = [] if Path("/usr/include/gssapi/gssapi.h").exists() else ["libkrb5-dev"]
    return ["curl", "openssl", *browsers, "libnss3-tools", "nodejs", "npm", *krb5, "tmux", *haproxy,
            *postgres]


@pytest.fixture
def bare() -> Iterator[Path]:
    """A world-readable folder: bin/ holds nothing but bash, a recording apt-get, stand-in
    Pythons (and sudo when a test adds it); calls/ takes the records, writable by anyone."""
    top = Path(tempfile.mkdtemp(prefix="bare-"))
    (top / "bin").mkdir()
    (top / "calls").mkdir()
    fake = top / "bin" / "apt-get"
    fake.write_text(f'#!{BASH}\necho "$EUID $*" >> {top}/calls/apt-get\n')
    # Pythons that answer the version and venv checks yes (3.12+) or no (older)
    (top / "bin" / "python-new").write_text(f"#!{BASH}\nexit 0\n")
    (top / "bin" / "python-old").write_text(f"#!{BASH}\nexit 1\n")
    (top / "bin" / "bash").symlink_to(BASH)  # every machine has a bash on PATH
    for path in (p for p in top.glob("**/*") if not p.is_symlink()):
        path.chmod(0o777 if path.name == "calls" else 0o755)
    top.chmod(0o755)
    yield top
    shutil.rmtree(top)


def run(argv: list[str], bare: Path, *, as_nobody: bool = False,
        python: str = "python-new") -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bare / "bin"), "HOME": "/nonexistent", "RETIMER_PYTHON": str(bare / "bin" / python)}
    prefix = [SETPRIV, "--reuid", "65534", "--regid", "65534", "--clear-groups"] if as_nobody else []
    return subprocess.run([*prefix, BASH, *argv], env=env, capture_output=True, text=True, timeout=60,
                          cwd="/", stdin=subprocess.DEVNULL)


def as_nobody_sees(bare: Path, *names: str) -> Path:
    """The scripts `names` copied into `bare`, readable by anyone: a clone may sit where the
    unprivileged user cannot reach it (a private temporary folder, a home directory)."""
    scripts = bare / "clone" / "scripts"
    scripts.mkdir(parents=True)
    for name in names:
        shutil.copy2(ROOT / "scripts" / name, scripts / name)
    for path in (bare / "clone", scripts, *scripts.iterdir()):
        path.chmod(0o755)
    return scripts


def apt_calls(bare: Path) -> list[str]:
    calls = bare / "calls" / "apt-get"
    return calls.read_text().splitlines() if calls.exists() else []


def test_check_names_every_missing_package(bare: Path) -> None:
    result = run([str(SETUP), "--check"], bare)
    assert result.returncode == 1
    assert f"setup-system: missing: {' '.join(expected_packages())}" in result.stderr.splitlines()
    assert apt_calls(bare) == []


def test_check_on_this_machine_after_the_test_command_set_it_up() -> None:
    """The suite runs after scripts/test installed what it needs: nothing is missing."""
    result = subprocess.run([str(SETUP), "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "setup-system: nothing missing"


def test_as_root_it_installs_them_with_apt_get(bare: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("run the suite as root to check the install path (CI does)")
    result = run([str(SETUP)], bare)
    assert result.returncode == 0, result.stderr
    assert apt_calls(bare) == ["0 update -qq", f"0 install -y -qq {' '.join(expected_packages())}"]


def test_without_root_or_sudo_the_test_command_stops_with_the_one_command(bare: Path) -> None:
    """scripts/test as an unprivileged user: it stops before pytest and says what to run."""
    if not os.access(SETPRIV, os.X_OK) or os.geteuid() != 0:
        pytest.fail("needs root and setpriv (util-linux) to become an unprivileged user")
    script = ROOT / "scripts" / "test"
    mode = script.stat().st_mode
    assert mode & stat.S_IXOTH and mode & stat.S_IROTH
    copied = as_nobody_sees(bare, "test", "setup-system", "find-python")
    result = run([str(copied / "test"), "--co", "-q"], bare, as_nobody=True)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-2] == ("setup-system: error: the tests need "
                         f"{' '.join(expected_packages())}; install them, then run scripts/test again:")
    assert lines[-1] == f"sudo sh -c 'apt-get update && apt-get install -y {' '.join(expected_packages())}'"
    assert "collected" not in result.stdout + result.stderr  # pytest never started
    assert apt_calls(bare) == []


def test_with_passwordless_sudo_it_installs_through_sudo(bare: Path) -> None:
    if not os.access(SETPRIV, os.X_OK) or os.geteuid() != 0:
        pytest.fail("needs root and setpriv (util-linux) to become an unprivileged user")
    sudo = bare / "bin" / "sudo"  # `sudo -n CMD...`: runs CMD, as a sudo that needs no password would
    sudo.write_text(f'#!{BASH}\n[ "$1" = -n ] || exit 1\nshift\n"$@"\n')
    sudo.chmod(0o755)
    result = run([str(as_nobody_sees(bare, "setup-system", "find-python") / "setup-system")], bare, as_nobody=True)
    assert result.returncode == 0, result.stderr
    assert apt_calls(bare) == ["65534 update -qq", f"65534 install -y -qq {' '.join(expected_packages())}"]


def os_version() -> int:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_ID="):
            return int(line.split("=", 1)[1].strip('"').split(".")[0])
    return 0


def test_no_python_3_12_is_installed_or_named(bare: Path) -> None:
    """Where this release's python3 is 3.12 or newer (Debian 13, Ubuntu 24.04) it joins the
    packages to install; where it is older (Debian 12) one line says what to do instead."""
    result = run([str(SETUP), "--check"], bare, python="python-old")
    assert result.returncode == 1
    new_enough = os_version() >= (24 if os_release() == "ubuntu" else 13)
    if new_enough:
        assert f"setup-system: missing: {' '.join(expected_packages())} python3 python3-venv" in result.stderr
    else:
        assert result.stderr.splitlines()[0] == (
            "setup-system: error: no Python >= 3.12: this release's python3 is older; install one "
            "(pyenv, uv python install, or your distribution's backports) and set RETIMER_PYTHON "
            "if it is not on PATH")
