"""Trusting retimer's CA system-wide: the OS's own steps, which `retimer ca` prints and runs
with --install (and undoes with --uninstall).

System-wide trust is the last resort (certs/README.md): every program on the machine then
trusts the CA for every site. The steps are a pure function of the platform, the certificate
and the Linux distribution, so every OS's steps are checked on any machine; `run_steps` does
the I/O. The macOS and Windows steps are tested with the platform faked, never on a real Mac
or Windows machine.
"""

from __future__ import annotations

import ntpath
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from retimer.cli.cmdline import fail
from retimer.cli.launch.browser import OsFamily, os_family, running_as_root
from retimer.proxy.certs import CA_FILE

Distro = Literal["debian", "fedora"]
DISTROS: tuple[Distro, ...] = ("debian", "fedora")
PLATFORMS: tuple[OsFamily, ...] = ("linux", "darwin", "win32")
CER_FILE = "mitmproxy-ca-cert.cer"  # the same PEM, under the extension Windows opens as a cert
DEBIAN_ANCHOR = "/usr/local/share/ca-certificates/retimer.crt"
FEDORA_ANCHOR = "/etc/pki/ca-trust/source/anchors/retimer.pem"
MAC_KEYCHAIN = "/Library/Keychains/System.keychain"
MAC_LOGIN_KEYCHAIN = "~/Library/Keychains/login.keychain-db"
OS_RELEASE = (Path("/etc/os-release"), Path("/usr/lib/os-release"))

Step = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TrustPlan:
    """One OS's steps for `cert`: `install` and `remove` are what --install and --uninstall
    run, in order; `others` are other ways, printed only; `note` what a reader must know."""

    platform: OsFamily
    cert: Path
    store: str
    install: tuple[Step, ...]
    remove: tuple[Step, ...]
    others: tuple[str, ...] = ()
    note: str = ""


def ca_cert(confdir: Path, platform: OsFamily) -> Path:
    """The certificate file the steps name: the PEM retimer writes (mitmproxy's .cer copy of it
    on Windows, whose tools go by the extension)."""
    return confdir / (CER_FILE if platform == "win32" else CA_FILE)


def thumbprint(cert_pem: Path) -> str:
    """The SHA-1 fingerprint in hex: how the macOS keychain and Windows' stores name a
    certificate to delete (its name, "mitmproxy", could be another mitmproxy's CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    return x509.load_pem_x509_certificate(cert_pem.read_bytes()).fingerprint(hashes.SHA1()).hex().upper()


def distro_of(os_release: str) -> Distro | None:
    """The trust-store family of an /etc/os-release text: ID and ID_LIKE (Ubuntu is like
    debian, Rocky like rhel and fedora); None for any other Linux."""
    fields: dict[str, str] = {}
    for line in os_release.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    ids = {fields.get("ID", ""), *fields.get("ID_LIKE", "").split()}
    if ids & {"debian", "ubuntu"}:
        return "debian"
    if ids & {"fedora", "rhel", "centos"}:
        return "fedora"
    return None


def this_distro() -> Distro | None:
    for path in OS_RELEASE:
        try:
            return distro_of(path.read_text())
        except OSError:
            continue
    return None


def trust_plans(platform: OsFamily, cert: Path, distro: Distro | None, thumb: str, *,
                root: bool = False, system_root: str = "C:\\Windows") -> list[TrustPlan]:
    """The steps for `platform`; on Linux those of `distro`, or of each known one when it is
    None. `root`: no sudo in front; `system_root` is %SYSTEMROOT%, where Windows' own
    certutil.exe lives (the certutil on PATH may be NSS's, which knows no Windows store)."""
    sudo: Step = () if root else ("sudo",)
    if platform == "darwin":
        login = f"-k {MAC_LOGIN_KEYCHAIN} {shlex.quote(str(cert))}"
        return [TrustPlan(
            platform, cert, "the macOS System keychain",
            install=((*sudo, "security", "add-trusted-cert", "-d", "-r", "trustRoot", "-k", MAC_KEYCHAIN,
                      str(cert)),),
            remove=((*sudo, "security", "remove-trusted-cert", "-d", str(cert)),
                    (*sudo, "security", "delete-certificate", "-Z", thumb, MAC_KEYCHAIN)),
            others=(f"for you alone, no sudo (macOS asks for your password): "
                    f"security add-trusted-cert -r trustRoot {login}",
                    f"undone by: security remove-trusted-cert {shlex.quote(str(cert))} && "
                    f"security delete-certificate -Z {thumb} {MAC_LOGIN_KEYCHAIN}"),
        )]
    if platform == "win32":
        certutil = ntpath.join(system_root, "System32", "certutil.exe")
        return [TrustPlan(
            platform, cert, "your Windows user's Root store",
            install=((certutil, "-user", "-addstore", "Root", str(cert)),),
            remove=((certutil, "-user", "-delstore", "Root", thumb),),
            others=(f'PowerShell: Import-Certificate -FilePath "{cert}" '
                    "-CertStoreLocation Cert:\\CurrentUser\\Root",
                    f"undone by: Remove-Item Cert:\\CurrentUser\\Root\\{thumb}"),
            note="Windows asks you to confirm the new root; the user's store needs no administrator",
        )]
    return [_linux_plan(d, cert, sudo) for d in ((distro,) if distro else DISTROS)]


def _linux_plan(distro: Distro, cert: Path, sudo: Step) -> TrustPlan:
    if distro == "debian":
        return TrustPlan(
            "linux", cert, "the Debian/Ubuntu system store",
            install=((*sudo, "cp", str(cert), DEBIAN_ANCHOR), (*sudo, "update-ca-certificates")),
            remove=((*sudo, "rm", "-f", DEBIAN_ANCHOR), (*sudo, "update-ca-certificates", "--fresh")),
            note="update-ca-certificates takes only files ending in .crt from that folder: "
                 "the copy is named retimer.crt (the same PEM)",
        )
    return TrustPlan(
        "linux", cert, "the Fedora/RHEL system store",
        install=((*sudo, "cp", str(cert), FEDORA_ANCHOR), (*sudo, "update-ca-trust")),
        remove=((*sudo, "rm", "-f", FEDORA_ANCHOR), (*sudo, "update-ca-trust")),
        others=(f"or with p11-kit: sudo trust anchor --store {shlex.quote(str(cert))}, "
                f"undone by sudo trust anchor --remove {shlex.quote(str(cert))}",),
    )


def machine_plans(confdir: Path, platform: str | None = None,
                  distro: Distro | None = None) -> tuple[list[TrustPlan], bool]:
    """The plans for `platform` (default: this machine's) and the CA in `confdir`, and whether
    they are this machine's: only those may run. On this Linux, `distro` defaults to its own."""
    family = os_family(platform or sys.platform)
    here = family == os_family(sys.platform)
    if family == "linux" and here and distro is None:
        distro = this_distro()
    plans = trust_plans(family, ca_cert(confdir, family), distro, thumbprint(confdir / CA_FILE),
                        root=here and running_as_root(),
                        system_root=os.environ.get("SYSTEMROOT", "C:\\Windows"))
    return plans, here


def apply_plan(plans: Sequence[TrustPlan], here: bool, flag: str) -> str:
    """--install or --uninstall: run this machine's one plan (or say in one line why not);
    the line to print when it is done."""
    if not here:
        fail(f"{flag} runs this machine's steps; --platform only prints another OS's")
    if len(plans) != 1:
        fail(f"{flag}: cannot tell from /etc/os-release whether this Linux is like Debian or Fedora; "
             "pass --distro debian or --distro fedora, or follow certs/README.md")
    (plan,) = plans
    if flag == "--uninstall":
        run_steps(plan.remove, plan.platform, flag)
        return f"retimer: {plan.store} no longer trusts retimer's CA"
    if not plan.cert.is_file():
        fail(f"{flag}: {plan.cert} is missing; remove the confdir's mitmproxy-ca* files so the CA "
             "is made anew", 1)
    run_steps(plan.install, plan.platform, flag)
    return f"retimer: {plan.store} trusts retimer's CA; `retimer ca --uninstall` undoes it"


def shown(step: Sequence[str], platform: OsFamily) -> str:
    """A step as the platform's shell takes it, to copy and paste."""
    return subprocess.list2cmdline(step) if platform == "win32" else shlex.join(step)


def plan_lines(plans: Sequence[TrustPlan], here: bool = True) -> list[str]:
    """What `retimer ca` prints about trusting the CA system-wide, under its other lines;
    `here`: the steps are this machine's (not another OS's, asked for with --platform)."""
    lines = ["trust   system-wide only if you must: `retimer run`, `retimer env` and "
             "`retimer browser` need none of this"]
    for plan in plans:
        lines.append(f"store   {plan.store}"
                     + (" (choose with --distro)" if len(plans) > 1 else ""))
        for label, steps in (("install", plan.install), ("remove", plan.remove)):
            lines.append(f"{label:8}" + " && ".join(shown(step, plan.platform) for step in steps))
        lines += [f"{'or' if i == 0 else '':8}{other}" for i, other in enumerate(plan.others)]
        if plan.note:
            lines.append(f"note    {plan.note}")
    if here:
        lines.append("        `retimer ca --install` runs the install steps, `retimer ca --uninstall` the remove steps")
    return lines


def run_steps(steps: Sequence[Step], platform: OsFamily, flag: str) -> None:
    """Run each step as shown, its output and prompts (sudo's password) on this terminal;
    stop at the first that fails, in one line. Nothing runs unless every program is found."""
    found: list[list[str]] = []
    for step in steps:
        exe = shutil.which(step[0])
        if exe is None:
            fail(f"{flag}: {step[0]} not found; nothing was changed (`retimer ca` prints the steps)", 1)
        found.append([exe, *step[1:]])
    for step, argv in zip(steps, found):
        print(f"$ {shown(step, platform)}", flush=True)
        try:
            code = subprocess.run(argv, check=False).returncode
        except OSError as e:
            fail(f"{flag}: cannot run {step[0]}: {e.strerror}", 1)
        except KeyboardInterrupt:
            fail(f"{flag}: interrupted at `{shown(step, platform)}`", 130)
        if code != 0:
            fail(f"{flag}: `{shown(step, platform)}` failed with exit code {code}; "
                 "the steps after it were not run", 1)
