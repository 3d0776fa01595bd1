"""Launch Chrome, Edge, Chromium or Firefox through retimer with a throwaway profile.

Why a throwaway profile: the browser then trusts retimer's CA and uses the proxy without
touching the system trust store or the user's own profile, and a fresh profile cannot be
swallowed by an already running browser ("Opening in existing browser session").
Chromium (Chrome and Edge are Chromium too) trusts the CA by its key (every leaf retimer mints
reuses the CA's key); Firefox gets the CA in the profile's own NSS database. The finding and
argument/prefs building are pure so they can be tested without a browser; `prepare_launch` and
`run_browser` do the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ntpath
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

OsFamily = Literal["linux", "darwin", "win32"]
Kind = Literal["chrome", "edge", "chromium", "firefox"]
KINDS: tuple[Kind, ...] = ("chrome", "edge", "chromium", "firefox")
LABELS: dict[Kind, str] = {"chrome": "Google Chrome", "edge": "Microsoft Edge", "chromium": "Chromium",
                           "firefox": "Firefox"}

_NAMES: dict[Kind, tuple[str, ...]] = {
    "chrome": ("google-chrome", "google-chrome-stable", "chrome"),
    "edge": ("microsoft-edge", "microsoft-edge-stable"),
    "chromium": ("chromium", "chromium-browser"),
    "firefox": ("firefox", "firefox-esr"),
}
_LINUX_PATHS: dict[Kind, tuple[str, ...]] = {
    "chrome": ("/opt/google/chrome/chrome",),
    "edge": ("/opt/microsoft/msedge/msedge",),
    "chromium": ("/usr/lib/chromium/chromium", "/snap/bin/chromium"),
    "firefox": ("/usr/lib/firefox/firefox", "/usr/lib/firefox-esr/firefox-esr",
                "/snap/bin/firefox"),
}
_MAC_BUNDLES: dict[Kind, tuple[str, ...]] = {
    "chrome": ("Google Chrome.app/Contents/MacOS/Google Chrome",),
    "edge": ("Microsoft Edge.app/Contents/MacOS/Microsoft Edge",),
    "chromium": ("Chromium.app/Contents/MacOS/Chromium",),
    "firefox": ("Firefox.app/Contents/MacOS/firefox",),
}
_WINDOWS_PATHS: dict[Kind, tuple[str, ...]] = {
    "chrome": (r"Google\Chrome\Application\chrome.exe",),
    "edge": (r"Microsoft\Edge\Application\msedge.exe",),
    "chromium": (r"Chromium\Application\chrome.exe",),
    "firefox": (r"Mozilla Firefox\firefox.exe",),
}
_INSTALL: dict[str, dict[Kind, str]] = {
    "linux": {"chrome": "install Google Chrome from https://www.google.com/chrome/ "
                        "(or use `retimer browser chromium`)",
              "edge": "install it from https://www.microsoft.com/edge (the microsoft-edge-stable "
                      "package), or use `retimer browser chromium`",
              "chromium": "install it: `sudo apt install chromium` (Debian/Ubuntu) "
                          "or `sudo dnf install chromium` (Fedora)",
              "firefox": "install it: `sudo apt install firefox-esr` (Debian), "
                         "`sudo apt install firefox` (Ubuntu) or `sudo dnf install firefox`"},
    "darwin": {"chrome": "install it: `brew install --cask google-chrome`",
               "edge": "install it: `brew install --cask microsoft-edge`",
               "chromium": "install it: `brew install --cask chromium`",
               "firefox": "install it: `brew install --cask firefox`"},
    "win32": {"chrome": "install it: `winget install Google.Chrome`",
              "edge": "install it: `winget install Microsoft.Edge`",
              "chromium": "install it: `winget install Hibbiki.Chromium`",
              "firefox": "install it: `winget install Mozilla.Firefox`"},
}
_CERTUTIL_INSTALL = {
    "linux": "`sudo apt install libnss3-tools` (Debian/Ubuntu) or `sudo dnf install nss-tools`",
    "darwin": "`brew install nss`",
    "win32": "NSS's certutil (not Windows' own certutil.exe) on PATH",
}


class BrowserError(Exception):
    """A browser or tool is missing or failed; str() is one line that says what to do."""


def os_family(platform: str) -> OsFamily:
    """sys.platform as the three families whose install places and commands differ."""
    return "win32" if platform.startswith("win") else "darwin" if platform == "darwin" else "linux"


def candidates(kind: Kind, platform: str = sys.platform,
               env: Mapping[str, str] | None = None) -> list[str]:
    """Where `kind` may be installed, in search order: names to look up on PATH, then paths."""
    env = os.environ if env is None else env
    plat = os_family(platform)
    if plat == "darwin":
        home = env.get("HOME", "")
        roots = ["/Applications", *([f"{home}/Applications"] if home else [])]
        return [*_NAMES[kind], *(f"{r}/{b}" for r in roots for b in _MAC_BUNDLES[kind])]
    if plat == "win32":
        roots = [env[v] for v in ("PROGRAMFILES", "PROGRAMFILES(X86)", "LOCALAPPDATA")
                 if env.get(v)]
        names = {"chrome": ["chrome"], "edge": ["msedge"], "chromium": [], "firefox": ["firefox"]}[kind]
        return [*names, *(ntpath.join(r, p) for r in roots for p in _WINDOWS_PATHS[kind])]
    return [*_NAMES[kind], *_LINUX_PATHS[kind]]


def install_hint(kind: Kind, platform: str = sys.platform) -> str:
    """One line: no `kind` was found, and how to install it (or point at it)."""
    how = _INSTALL[os_family(platform)][kind]
    return f"no {LABELS[kind]} found; {how}, or pass --browser-path"


def find_browser(kind: Kind, override: str | None = None, *, platform: str = sys.platform,
                 env: Mapping[str, str] | None = None,
                 which: Callable[[str], str | None] = shutil.which,
                 is_file: Callable[[str], bool] = os.path.isfile) -> str:
    """The executable to run for `kind`; `override` (--browser-path) wins when it exists."""
    if override:
        found = override if is_file(override) else which(override)
        if not found:
            raise BrowserError(f"--browser-path: {override} is not a file or a program on PATH")
        return found
    for c in candidates(kind, platform, env):
        absolute = c.startswith(("/", "\\")) or c[1:3] in (":\\", ":/")  # POSIX, UNC or drive path
        found = (c if is_file(c) else None) if absolute else which(c)
        if found:
            return found
    raise BrowserError(install_hint(kind, platform))


def find_certutil(platform: str = sys.platform,
                  which: Callable[[str], str | None] = shutil.which,
                  env: Mapping[str, str] | None = None) -> str:
    """NSS's certutil, which imports the CA into a Firefox profile; never Windows' own."""
    env = os.environ if env is None else env
    found = which("certutil")
    if found and os_family(platform) == "win32":
        system_root = env.get("SYSTEMROOT", r"C:\Windows").lower()
        if found.lower().startswith(system_root):
            found = None
    if not found:
        raise BrowserError("Firefox needs NSS's certutil to trust retimer's CA in its profile; "
                           f"install {_CERTUTIL_INSTALL[os_family(platform)]}")
    return found


def is_chromium(kind: Kind) -> bool:
    return kind in ("chrome", "edge", "chromium")


def chromium_flags(proxy: str, spki: str, *, as_root: bool = False) -> list[str]:
    """Flags that route Chromium through retimer and trust the CA's key, and only in this profile.

    `<-loopback>` removes Chromium's implicit localhost bypass, so local LLM servers
    (Ollama, vLLM, llama.cpp) are re-timed too. As root Chromium will not start sandboxed.
    """
    flags = [
        f"--proxy-server={proxy}",
        "--proxy-bypass-list=<-loopback>",
        f"--ignore-certificate-errors-spki-list={spki}",
        "--no-first-run",
        "--no-default-browser-check",
    ]
    return [*flags, "--no-sandbox"] if as_root else flags


def chromium_argv(exe: str, profile: Path, flags: Sequence[str], url: str | None,
                  headless: bool = False) -> list[str]:
    return [exe, f"--user-data-dir={profile}", *flags, *(["--headless"] if headless else []),
            *([url] if url else [])]


def firefox_prefs(proxy: str) -> dict[str, bool | int | str]:
    """user.js prefs: everything through the proxy (loopback too), and no background chatter.

    DNS over HTTPS and the captive-portal/connectivity probes are off so the browser does not
    reach around or past the proxy on its own.
    """
    parts = urlsplit(proxy)
    host, port = parts.hostname or "127.0.0.1", parts.port or 8080
    return {
        "network.proxy.type": 1,
        "network.proxy.http": host,
        "network.proxy.http_port": port,
        "network.proxy.ssl": host,
        "network.proxy.ssl_port": port,
        "network.proxy.share_proxy_settings": True,
        "network.proxy.no_proxies_on": "",
        "network.proxy.allow_hijacking_localhost": True,
        "network.trr.mode": 5,
        "network.captive-portal-service.enabled": False,
        "network.connectivity-service.enabled": False,
        "browser.shell.checkDefaultBrowser": False,
        "browser.aboutwelcome.enabled": False,
        "browser.startup.homepage_override.mstone": "ignore",
        "datareporting.policy.dataSubmissionEnabled": False,
        "datareporting.healthreport.uploadEnabled": False,
        "toolkit.telemetry.enabled": False,
        "app.update.auto": False,
        "app.normandy.enabled": False,
    }


def user_js(prefs: Mapping[str, bool | int | str]) -> str:
    """The text of a user.js setting `prefs` (JSON literals are valid pref values)."""
    return "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in prefs.items())


def certutil_commands(certutil: str, profile: Path, ca: Path) -> list[list[str]]:
    """Create the profile's NSS db and add the CA as trusted for TLS servers ("C,,")."""
    db = f"sql:{profile}"
    return [[certutil, "-N", "-d", db, "--empty-password"],
            [certutil, "-A", "-n", "retimer", "-t", "C,,", "-i", str(ca), "-d", db]]


def prepare_firefox_profile(profile: Path, proxy: str, ca: Path, certutil: str) -> None:
    """Write user.js and import the CA into the profile's own NSS db (never the system's)."""
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "user.js").write_text(user_js(firefox_prefs(proxy)))
    for cmd in certutil_commands(certutil, profile, ca):
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise BrowserError(f"certutil failed: {detail[-1] if detail else done.returncode}")


def firefox_argv(exe: str, profile: Path, url: str | None, headless: bool = False,
                 extra: Sequence[str] = ()) -> list[str]:
    return [exe, "--no-remote", "--profile", str(profile), *(["--headless"] if headless else []),
            *extra, *([url] if url else [])]


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@dataclass(frozen=True, slots=True)
class Launch:
    """A prepared browser start: argv, and the throwaway folder (profile, log) to remove."""

    kind: Kind
    argv: list[str]
    workdir: Path
    profile: Path
    log: Path


def prepare_launch(kind: Kind, exe: str, proxy: str, ca: Path, url: str | None, *,
                   headless: bool = False, certutil: str | None = None) -> Launch:
    """Make the throwaway profile and the command line. The CA must exist already."""
    from retimer.proxy.certs import spki_hash

    workdir = Path(tempfile.mkdtemp(prefix=f"retimer-{kind}-"))
    profile = workdir / "profile"
    try:
        if is_chromium(kind):
            profile.mkdir()
            flags = chromium_flags(proxy, spki_hash(ca), as_root=running_as_root())
            argv = chromium_argv(exe, profile, flags, url, headless)
        else:
            prepare_firefox_profile(profile, proxy, ca, certutil or find_certutil())
            argv = firefox_argv(exe, profile, url, headless)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Launch(kind, argv, workdir, profile, workdir / "browser.log")


async def run_browser(launch: Launch,
                      started: Callable[[int], None] | None = None) -> tuple[int, str]:
    """Run the browser to its end: (exit code, the last lines it logged if that is not 0).

    Whatever ends this (the browser, or cancellation on Ctrl-C) stops all the browser's
    processes and removes the throwaway profile.
    """
    proc: asyncio.subprocess.Process | None = None
    try:
        with launch.log.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *launch.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=os.name == "posix")  # its own group: we stop all its processes
        if started:
            started(proc.pid)
        code = await proc.wait()
        return code, (_tail(launch.log) if code else "")
    finally:
        if proc is not None:
            await _stop(proc)
        if singleton := _singleton_dir(launch.profile):
            shutil.rmtree(singleton, ignore_errors=True)
        shutil.rmtree(launch.workdir, ignore_errors=True)


def _singleton_dir(profile: Path) -> Path | None:
    """The folder Chromium made in the system temp dir for its singleton socket (kept out of
    the profile because socket paths are short), which it leaves behind when stopped."""
    try:
        folder = Path(os.readlink(profile / "SingletonSocket")).parent
    except OSError:
        return None
    return folder if folder.name.startswith(("org.chromium.", "com.google.")) else None


async def _stop(proc: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """SIGTERM the browser's process group (helpers may outlive the main process), then kill."""
    def signal_all(sig: int) -> None:
        try:
            if os.name == "posix":
                os.killpg(proc.pid, sig)
            elif proc.returncode is None:
                proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    signal_all(signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
    signal_all(signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
    await proc.wait()


def _tail(log: Path, lines: int = 3) -> str:
    """The last lines the browser wrote, joined into one line for a failure message."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(x.strip() for x in text.strip().splitlines()[-lines:])
