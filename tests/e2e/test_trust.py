"""`retimer ca`'s system-wide trust steps (retimer/cli/proxy/trust.py), for every OS on this one.

The steps are checked as data with the platform faked: macOS and Windows never ran them here,
on a real Mac or Windows machine or otherwise. `--install` and `--uninstall` run for real, but
against fake `sudo`, `cp` and `update-ca-certificates` on a PATH of their own that only record
their arguments, so the machine's trust store is never touched. Last, the CA lock's Windows
branch (msvcrt, as Windows has no fcntl), without which `retimer ca` could not run there.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from retimer.cli.launch.run import print_ca
from retimer.cli.proxy import trust
from retimer.cli.proxy.trust import ca_cert, distro_of, plan_lines, shown, thumbprint, trust_plans
from retimer.proxy.certs import ca_lock, ensure_ca

CERT = Path("/home/a/.retimer/mitmproxy-ca-cert.pem")
THUMB = "0A1B2C"


def steps(plan: trust.TrustPlan, which: str) -> list[str]:
    return [shown(step, plan.platform) for step in getattr(plan, which)]


@pytest.mark.parametrize("platform, distro, install, remove", [
    ("linux", "debian",
     [f"sudo cp {CERT} /usr/local/share/ca-certificates/retimer.crt", "sudo update-ca-certificates"],
     ["sudo rm -f /usr/local/share/ca-certificates/retimer.crt", "sudo update-ca-certificates --fresh"]),
    ("linux", "fedora",
     [f"sudo cp {CERT} /etc/pki/ca-trust/source/anchors/retimer.pem", "sudo update-ca-trust"],
     ["sudo rm -f /etc/pki/ca-trust/source/anchors/retimer.pem", "sudo update-ca-trust"]),
    ("darwin", None,
     [f"sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain {CERT}"],
     [f"sudo security remove-trusted-cert -d {CERT}",
      f"sudo security delete-certificate -Z {THUMB} /Library/Keychains/System.keychain"]),
    ("win32", None,
     [rf"C:\Windows\System32\certutil.exe -user -addstore Root {CERT}"],
     [rf"C:\Windows\System32\certutil.exe -user -delstore Root {THUMB}"]),
])
def test_each_platforms_steps(platform, distro, install, remove):
    (plan,) = trust_plans(platform, CERT, distro, THUMB)
    assert (steps(plan, "install"), steps(plan, "remove")) == (install, remove)
    assert plan.cert == CERT


def test_as_root_no_sudo_and_windows_own_certutil_from_systemroot():
    (debian,) = trust_plans("linux", CERT, "debian", THUMB, root=True)
    assert steps(debian, "install") == [f"cp {CERT} /usr/local/share/ca-certificates/retimer.crt",
                                        "update-ca-certificates"]
    (mac,) = trust_plans("darwin", CERT, None, THUMB, root=True)
    assert mac.install[0][:2] == ("security", "add-trusted-cert")
    (windows,) = trust_plans("win32", Path("C:/Users/a b/x.cer"), None, THUMB, system_root="D:\\Win")
    assert windows.install[0][0] == "D:\\Win\\System32\\certutil.exe"
    assert steps(windows, "install") == ['D:\\Win\\System32\\certutil.exe -user -addstore Root "C:/Users/a b/x.cer"']


def test_the_other_ways_and_the_crt_note_are_printed():
    lines = "\n".join(plan_lines(trust_plans("win32", CERT, None, THUMB)))
    assert f'Import-Certificate -FilePath "{CERT}" -CertStoreLocation Cert:\\CurrentUser\\Root' in lines
    assert f"Remove-Item Cert:\\CurrentUser\\Root\\{THUMB}" in lines
    lines = "\n".join(plan_lines(trust_plans("darwin", CERT, None, THUMB)))
    assert f"security add-trusted-cert -r trustRoot -k ~/Library/Keychains/login.keychain-db {CERT}" in lines
    lines = "\n".join(plan_lines(trust_plans("linux", CERT, "debian", THUMB)))
    assert f"install sudo cp {CERT} /usr/local/share/ca-certificates/retimer.crt && sudo update-ca-certificates" \
        in lines.splitlines()
    assert "only files ending in .crt" in lines
    assert "`retimer ca --install` runs the install steps" in lines
    assert "--install" not in "\n".join(plan_lines(trust_plans("linux", CERT, "debian", THUMB), here=False))


def test_an_unknown_linux_gets_both_families_steps():
    plans = trust_plans("linux", CERT, None, THUMB)
    assert [p.store for p in plans] == ["the Debian/Ubuntu system store", "the Fedora/RHEL system store"]
    assert "(choose with --distro)" in plan_lines(plans)[1]


@pytest.mark.parametrize("os_release, expected", [
    ('ID=debian\nVERSION_ID="12"', "debian"),
    ("ID=ubuntu\nID_LIKE=debian", "debian"),
    ('ID=linuxmint\nID_LIKE="ubuntu debian"', "debian"),
    ("ID=fedora", "fedora"),
    ('ID="rocky"\nID_LIKE="rhel centos fedora"', "fedora"),
    ('ID="amzn"\nID_LIKE="centos rhel fedora"', "fedora"),
    ("ID=alpine", None),
    ("ID=arch", None),
    ("", None),
])
def test_distro_from_os_release(os_release, expected):
    assert distro_of(os_release) == expected


def test_the_certificate_named_is_the_one_retimer_writes(tmp_path: Path):
    pem = ensure_ca(tmp_path)
    assert ca_cert(tmp_path, "linux") == ca_cert(tmp_path, "darwin") == pem
    cer = ca_cert(tmp_path, "win32")
    assert cer.name == "mitmproxy-ca-cert.cer" and cer.read_bytes() == pem.read_bytes()
    openssl = subprocess.run(["openssl", "x509", "-in", str(pem), "-noout", "-fingerprint", "-sha1"],
                             capture_output=True, text=True, check=True).stdout
    assert thumbprint(pem) == openssl.strip().split("=", 1)[1].replace(":", "")


def test_ca_prints_another_platforms_steps(tmp_path: Path, capsys):
    print_ca(["--set", f"confdir={tmp_path}", "--platform", "darwin"])
    out = capsys.readouterr().out
    pem = tmp_path / "mitmproxy-ca-cert.pem"
    assert f"install sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain {pem}\n" in out
    assert f"delete-certificate -Z {thumbprint(pem)} /Library/Keychains/System.keychain" in out
    assert "--install" not in out  # not this machine's steps: nothing to run
    with pytest.raises(SystemExit) as e:
        print_ca(["--set", f"confdir={tmp_path}", "--platform", "win32", "--install"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("retimer: error: --install runs this machine's steps; --platform only "
                                       "prints another OS's\n")


# --- running them, against fake commands -----------------------------------------------------

def fake_commands(folder: Path, log: Path, *names: str, failing: str = "") -> None:
    """Scripts that append their name and arguments to `log`; the one whose first argument
    (after sudo) or name is `failing` exits 3."""
    folder.mkdir(exist_ok=True)
    for name in names:
        script = folder / name
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "${{0##*/}}${{1:+ }}$*" >> {shlex.quote(str(log))}\n'
                          f'case "${{0##*/}} $1" in *{failing or "-never-"}*) exit 3;; esac\nexit 0\n')
        script.chmod(0o755)


@pytest.fixture
def sudo_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Not root (so every step starts with sudo), and a PATH holding only the fakes' folder."""
    monkeypatch.setattr(trust, "running_as_root", lambda: False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path / "commands.log"


def test_install_and_uninstall_run_each_step_shown(tmp_path: Path, sudo_user: Path, capsys):
    fake_commands(tmp_path / "bin", sudo_user, "sudo")
    confdir = tmp_path / "conf"
    print_ca(["--set", f"confdir={confdir}", "--install", "--distro", "debian"])
    pem = confdir / "mitmproxy-ca-cert.pem"
    ran = [f"sudo cp {pem} /usr/local/share/ca-certificates/retimer.crt", "sudo update-ca-certificates"]
    assert sudo_user.read_text().splitlines() == ran
    out = capsys.readouterr().out.splitlines()
    assert out == [f"$ {line}" for line in ran] + [
        "retimer: the Debian/Ubuntu system store trusts retimer's CA; `retimer ca --uninstall` undoes it"]
    sudo_user.unlink()
    print_ca(["--set", f"confdir={confdir}", "--uninstall", "--distro", "fedora"])
    assert sudo_user.read_text().splitlines() == ["sudo rm -f /etc/pki/ca-trust/source/anchors/retimer.pem",
                                                  "sudo update-ca-trust"]
    assert capsys.readouterr().out.endswith("retimer: the Fedora/RHEL system store no longer trusts retimer's CA\n")


def test_install_on_a_faked_mac_runs_security_through_sudo(tmp_path: Path, sudo_user: Path, capsys,
                                                           monkeypatch: pytest.MonkeyPatch):
    fake_commands(tmp_path / "bin", sudo_user, "sudo")
    confdir = tmp_path / "conf"
    ensure_ca(confdir)
    monkeypatch.setattr(sys, "platform", "darwin")
    print_ca(["--set", f"confdir={confdir}", "--install"])
    assert sudo_user.read_text().splitlines() == [
        "sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain "
        f"{confdir / 'mitmproxy-ca-cert.pem'}"]
    assert "the macOS System keychain trusts retimer's CA" in capsys.readouterr().out


def test_a_failing_step_stops_the_rest_in_one_line(tmp_path: Path, sudo_user: Path, capsys):
    fake_commands(tmp_path / "bin", sudo_user, "sudo", failing="update-ca-certificates")
    with pytest.raises(SystemExit) as e:
        print_ca(["--set", f"confdir={tmp_path / 'conf'}", "--uninstall", "--distro", "debian"])
    assert e.value.code == 1
    assert capsys.readouterr().err == ("retimer: error: --uninstall: `sudo update-ca-certificates --fresh` failed "
                                       "with exit code 3; the steps after it were not run\n")
    assert sudo_user.read_text().splitlines() == ["sudo rm -f /usr/local/share/ca-certificates/retimer.crt",
                                                  "sudo update-ca-certificates --fresh"]


def test_a_missing_command_changes_nothing(tmp_path: Path, sudo_user: Path, capsys):
    (tmp_path / "bin").mkdir()
    with pytest.raises(SystemExit) as e:
        print_ca(["--set", f"confdir={tmp_path / 'conf'}", "--install", "--distro", "fedora"])
    assert e.value.code == 1
    assert capsys.readouterr().err == ("retimer: error: --install: sudo not found; nothing was changed "
                                       "(`retimer ca` prints the steps)\n")
    assert not sudo_user.exists()


def test_an_unknown_linux_must_be_named_to_install(tmp_path: Path, sudo_user: Path, capsys,
                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(trust, "this_distro", lambda: None)
    with pytest.raises(SystemExit) as e:
        print_ca(["--set", f"confdir={tmp_path / 'conf'}", "--install"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --distro debian or --distro fedora" in err


def test_the_real_command_runs_the_steps(tmp_path: Path):
    """`retimer ca --install` as a user runs it: a process of its own, as root or not."""
    log = tmp_path / "commands.log"
    fake_commands(tmp_path / "bin", log, "sudo", "cp", "update-ca-certificates")
    confdir = tmp_path / "conf"
    done = subprocess.run([sys.executable, "-m", "retimer", "ca", "--install", "--distro", "debian",
                           "--set", f"confdir={confdir}"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PATH": str(tmp_path / "bin")})
    assert done.returncode == 0, done.stderr
    (plan,) = trust_plans("linux", confdir / "mitmproxy-ca-cert.pem", "debian", "", root=os.geteuid() == 0)
    assert log.read_text().splitlines() == steps(plan, "install")
    assert done.stdout.splitlines()[:2] == [f"$ {line}" for line in steps(plan, "install")]


def test_the_ca_lock_uses_msvcrt_on_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Windows has no fcntl; the lock there is msvcrt's (a stand-in records the calls)."""
    calls: list[tuple[int, int]] = []

    class Msvcrt:
        LK_LOCK, LK_UNLCK = 1, 0

        @staticmethod
        def locking(fd: int, mode: int, nbytes: int) -> None:
            assert nbytes == 1 and os.lseek(fd, 0, os.SEEK_CUR) == 0
            calls.append((fd, mode))

    monkeypatch.setitem(sys.modules, "msvcrt", Msvcrt)
    with ca_lock(tmp_path, platform="win32"):
        assert [mode for _, mode in calls] == [Msvcrt.LK_LOCK]
    assert [mode for _, mode in calls] == [Msvcrt.LK_LOCK, Msvcrt.LK_UNLCK]
    assert calls[0][0] == calls[1][0]


def test_run_child_without_posix_signals_or_process_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows has no SIGHUP, no process groups, and an event loop without signal handlers:
    `retimer run` still runs the command and returns its exit code (faked here on Linux)."""
    import asyncio
    import signal

    from retimer.cli.launch import run as launch

    monkeypatch.delattr(signal, "SIGHUP")
    monkeypatch.delattr(os, "tcgetpgrp")
    assert launch.terminal_interrupt() is False
    code = asyncio.run(launch.run_child([sys.executable, "-c", "raise SystemExit(7)"], dict(os.environ)))
    assert code == 7
