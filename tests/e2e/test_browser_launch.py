"""retimer/cli/launch/browser.py without a real browser: finding one, its command line and profile, the
SPKI pin, stopping it, and the `retimer browser` command's one-line errors.

Finding a browser on macOS and Windows is tested here with the platform faked: the standard
install places laid out in a temporary folder (HOME, %PROGRAMFILES% and friends pointed at it),
never on a real Mac or Windows machine. The real browsers run in test_browser.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from retimer.cli.launch.browser import (
    KINDS,
    BrowserError,
    Launch,
    chromium_argv,
    chromium_flags,
    find_browser,
    find_certutil,
    firefox_argv,
    firefox_prefs,
    install_hint,
    prepare_launch,
    run_browser,
    user_js,
)
from retimer.proxy.certs import spki_hash
from tests.support.proxy import free_port, run_cli


def fake_fs(*present: str) -> tuple[Callable[[str], str | None], Callable[[str], bool]]:
    """`which` and `is_file` that see only `present` (names on PATH or absolute paths)."""
    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if name in present else None
    return which, lambda path: path in present


@pytest.mark.parametrize("kind, platform, env, present, expected", [
    ("chromium", "linux", {}, ("chromium-browser", "/snap/bin/chromium"),
     "/usr/bin/chromium-browser"),
    ("chromium", "linux", {}, ("chromium", "chromium-browser"), "/usr/bin/chromium"),
    ("chromium", "linux", {}, ("/snap/bin/chromium",), "/snap/bin/chromium"),
    ("chrome", "linux", {}, ("google-chrome-stable", "chromium"), "/usr/bin/google-chrome-stable"),
    ("firefox", "linux", {}, ("firefox-esr",), "/usr/bin/firefox-esr"),
    ("firefox", "darwin", {"HOME": "/Users/a"},
     ("/Users/a/Applications/Firefox.app/Contents/MacOS/firefox",),
     "/Users/a/Applications/Firefox.app/Contents/MacOS/firefox"),
    ("chrome", "darwin", {}, ("/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",),
     "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"),
    ("chromium", "win32", {"LOCALAPPDATA": r"C:\Users\a\AppData\Local"},
     (r"C:\Users\a\AppData\Local\Chromium\Application\chrome.exe",),
     r"C:\Users\a\AppData\Local\Chromium\Application\chrome.exe"),
    ("firefox", "win32", {"PROGRAMFILES": r"C:\Program Files"},
     (r"C:\Program Files\Mozilla Firefox\firefox.exe",),
     r"C:\Program Files\Mozilla Firefox\firefox.exe"),
])
def test_find_browser_searches_names_then_install_paths(kind, platform, env, present, expected):
    which, is_file = fake_fs(*present)
    assert find_browser(kind, platform=platform, env=env, which=which, is_file=is_file) == expected


def test_browser_path_overrides_the_search():
    which, is_file = fake_fs("chromium", "/opt/my/chrome")
    found = find_browser("chromium", "/opt/my/chrome", which=which, is_file=is_file)
    assert found == "/opt/my/chrome"
    with pytest.raises(BrowserError, match="--browser-path: /nope/chrome is not a file"):
        find_browser("chromium", "/nope/chrome", which=which, is_file=is_file)


# where each browser installs itself, written out here apart from retimer's own tables
MAC_BUNDLES = {"chrome": "Google Chrome.app/Contents/MacOS/Google Chrome",
               "edge": "Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
               "chromium": "Chromium.app/Contents/MacOS/Chromium",
               "firefox": "Firefox.app/Contents/MacOS/firefox"}
WINDOWS_EXES = {"chrome": r"Google\Chrome\Application\chrome.exe",
                "edge": r"Microsoft\Edge\Application\msedge.exe",
                "chromium": r"Chromium\Application\chrome.exe",
                "firefox": r"Mozilla Firefox\firefox.exe"}
LINUX_NAMES = {"chrome": ("google-chrome", "google-chrome-stable"),
               "edge": ("microsoft-edge", "microsoft-edge-stable"),
               "chromium": ("chromium", "chromium-browser"),
               "firefox": ("firefox", "firefox-esr")}


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def nothing_on_path(name: str) -> str | None:
    return None


@pytest.mark.parametrize("kind", KINDS)
def test_found_in_the_users_applications_folder_on_macos(kind, tmp_path: Path):
    exe = executable(tmp_path / "Applications" / MAC_BUNDLES[kind])
    found = find_browser(kind, platform="darwin", env={"HOME": str(tmp_path)}, which=nothing_on_path)
    assert found == str(exe)


@pytest.mark.parametrize("kind", KINDS)
def test_found_in_the_system_applications_folder_on_macos(kind):
    which, is_file = fake_fs(f"/Applications/{MAC_BUNDLES[kind]}")
    found = find_browser(kind, platform="darwin", env={"HOME": "/Users/a"}, which=which, is_file=is_file)
    assert found == f"/Applications/{MAC_BUNDLES[kind]}"


@pytest.mark.parametrize("root", ["PROGRAMFILES", "PROGRAMFILES(X86)", "LOCALAPPDATA"])
@pytest.mark.parametrize("kind", KINDS)
def test_found_under_each_windows_install_root(kind, root, tmp_path: Path):
    """The root's folder is a temporary one: Windows' separators are read as this OS's."""
    exe = executable(tmp_path.joinpath(*WINDOWS_EXES[kind].split("\\")))
    env = {"PROGRAMFILES": "/nowhere/a", "PROGRAMFILES(X86)": "/nowhere/b", "LOCALAPPDATA": "/nowhere/c",
           root: str(tmp_path)}
    found = find_browser(kind, platform="win32", env=env, which=nothing_on_path,
                         is_file=lambda path: os.path.isfile(path.replace("\\", "/")))
    assert found == f"{tmp_path}\\{WINDOWS_EXES[kind]}"
    assert found.replace("\\", "/") == str(exe)


def test_windows_drive_paths_are_taken_as_paths():
    exe = r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe"
    which, is_file = fake_fs(exe)
    assert find_browser("edge", platform="win32", env={"PROGRAMFILES(X86)": "C:\\Program Files (x86)"},
                        which=which, is_file=is_file) == exe


@pytest.mark.parametrize("kind, name", [(k, n) for k, names in LINUX_NAMES.items() for n in names])
def test_found_by_its_name_on_path_on_linux(kind, name, tmp_path: Path):
    exe = executable(tmp_path / name)
    found = find_browser(kind, platform="linux", env={},
                         which=lambda n: shutil.which(n, path=str(tmp_path)), is_file=lambda path: False)
    assert found == str(exe)


@pytest.mark.parametrize("kind, platform, install", [
    ("chrome", "linux", "retimer browser chromium"),
    ("edge", "linux", "microsoft-edge-stable"),
    ("chromium", "linux", "sudo apt install chromium"),
    ("firefox", "linux", "sudo apt install firefox-esr"),
    ("chrome", "darwin", "`brew install --cask google-chrome`"),
    ("edge", "darwin", "`brew install --cask microsoft-edge`"),
    ("chromium", "darwin", "`brew install --cask chromium`"),
    ("firefox", "darwin", "`brew install --cask firefox`"),
    ("chrome", "win32", "`winget install Google.Chrome`"),
    ("edge", "win32", "`winget install Microsoft.Edge`"),
    ("chromium", "win32", "`winget install Hibbiki.Chromium`"),
    ("firefox", "win32", "`winget install Mozilla.Firefox`"),
])
def test_no_browser_found_says_what_to_install(kind, platform, install):
    which, is_file = fake_fs()
    with pytest.raises(BrowserError) as e:
        find_browser(kind, platform=platform, env={}, which=which, is_file=is_file)
    assert install in str(e.value) and "--browser-path" in str(e.value)
    assert "\n" not in str(e.value)
    assert str(e.value) == install_hint(kind, platform)


def test_cli_no_browser_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys):
    import retimer.cli.launch.browser_cmd as cmd

    which, is_file = fake_fs()
    monkeypatch.setattr(cmd, "find_browser", lambda kind, override: find_browser(
        kind, override, platform="linux", env={}, which=which, is_file=is_file))
    with pytest.raises(SystemExit) as e:
        cmd.main(["chromium", "https://example.com", "--listen-port", str(free_port())])
    err = capsys.readouterr().err
    assert e.value.code == 1
    assert err.count("\n") == 1 and err.startswith("retimer: error: no Chromium found;")


def test_cli_missing_browser_path_is_one_line():
    done = run_cli("browser", "firefox", "--browser-path", "/nonexistent/firefox")
    assert done.returncode == 1
    assert done.stderr == "retimer: error: --browser-path: /nonexistent/firefox is not a file " \
                          "or a program on PATH\n"


def test_certutil_hint_and_windows_own_certutil_is_refused():
    with pytest.raises(BrowserError, match="libnss3-tools"):
        find_certutil("linux", which=lambda name: None)
    with pytest.raises(BrowserError, match="brew install nss"):
        find_certutil("darwin", which=lambda name: None)
    system = lambda name: r"C:\Windows\System32\certutil.exe"  # noqa: E731 - a different tool
    with pytest.raises(BrowserError, match="not Windows' own"):
        find_certutil("win32", which=system, env={"SYSTEMROOT": r"C:\Windows"})
    assert find_certutil("linux", which=lambda name: "/usr/bin/certutil") == "/usr/bin/certutil"


def test_chromium_command_line():
    flags = chromium_flags("http://127.0.0.1:8123", "AbC+/=")
    assert flags == ["--proxy-server=http://127.0.0.1:8123", "--proxy-bypass-list=<-loopback>",
                     "--ignore-certificate-errors-spki-list=AbC+/=", "--no-first-run",
                     "--no-default-browser-check"]
    assert chromium_flags("http://[::1]:1", "x", as_root=True)[-1] == "--no-sandbox"
    argv = chromium_argv("/bin/chromium", Path("/t/p"), flags, "https://chatgpt.com", headless=True)
    assert argv == ["/bin/chromium", "--user-data-dir=/t/p", *flags, "--headless",
                    "https://chatgpt.com"]
    assert chromium_argv("c", Path("/p"), [], None) == ["c", "--user-data-dir=/p"]


@pytest.mark.parametrize("kind", ["chrome", "edge", "chromium"])
def test_chrome_and_edge_get_chromiums_command_line(kind, tmp_path: Path):
    from mitmproxy.certs import CertStore

    CertStore.from_store(tmp_path, "mitmproxy", 2048)
    ca = tmp_path / "mitmproxy-ca-cert.pem"
    launch = prepare_launch(kind, "/x/browser", "http://127.0.0.1:9", ca, "https://x.test")
    try:
        assert launch.argv[:2] == ["/x/browser", f"--user-data-dir={launch.profile}"]
        assert launch.argv[2:-1] == chromium_flags("http://127.0.0.1:9", spki_hash(ca), as_root=os.geteuid() == 0)
        assert launch.argv[-1] == "https://x.test"
    finally:
        shutil.rmtree(launch.workdir)


def test_firefox_prefs_and_command_line():
    prefs = firefox_prefs("http://[::1]:8123")
    assert prefs["network.proxy.type"] == 1
    assert prefs["network.proxy.http"] == prefs["network.proxy.ssl"] == "::1"
    assert prefs["network.proxy.http_port"] == prefs["network.proxy.ssl_port"] == 8123
    assert prefs["network.proxy.no_proxies_on"] == ""
    assert prefs["network.proxy.allow_hijacking_localhost"] is True
    assert prefs["network.trr.mode"] == 5
    text = user_js({"a.b": True, "c": 5, "d": 'q"x'})
    assert text == 'user_pref("a.b", true);\nuser_pref("c", 5);\nuser_pref("d", "q\\"x");\n'
    assert firefox_argv("ff", Path("/p"), "https://claude.ai", headless=True) == [
        "ff", "--no-remote", "--profile", "/p", "--headless", "https://claude.ai"]


def test_spki_hash_matches_openssl_and_every_minted_leaf(tmp_path: Path):
    from mitmproxy.certs import CertStore

    store = CertStore.from_store(tmp_path, "mitmproxy", 2048)
    ca = tmp_path / "mitmproxy-ca-cert.pem"
    pipeline = (f"openssl x509 -in {ca} -pubkey -noout | openssl pkey -pubin -outform der"
                " | openssl dgst -sha256 -binary | openssl base64 -A")
    expected = subprocess.run(["sh", "-c", pipeline], capture_output=True, text=True, check=True)
    assert spki_hash(ca) == expected.stdout.strip()
    leaf = tmp_path / "leaf.pem"  # what Chromium sees: a leaf minted for the site
    leaf.write_bytes(store.get_cert("llm.test", []).cert.to_pem())
    assert spki_hash(leaf) == spki_hash(ca)


def test_firefox_profile_trusts_the_ca_in_its_own_nss_db(tmp_path: Path):
    from mitmproxy.certs import CertStore

    CertStore.from_store(tmp_path, "mitmproxy", 2048)
    ca = tmp_path / "mitmproxy-ca-cert.pem"
    launch = prepare_launch("firefox", "/usr/bin/firefox", "http://127.0.0.1:9", ca,
                            "https://x.test", certutil=find_certutil())
    try:
        assert launch.argv[:4] == ["/usr/bin/firefox", "--no-remote", "--profile",
                                   str(launch.profile)]
        assert 'user_pref("network.proxy.ssl_port", 9);' in (launch.profile / "user.js").read_text()
        listed = subprocess.run([find_certutil(), "-L", "-d", f"sql:{launch.profile}"],
                                capture_output=True, text=True, check=True).stdout
        assert re.search(r"^retimer\s+C,,\s*$", listed, re.M), listed
    finally:
        shutil.rmtree(launch.workdir)


def test_stopping_the_browser_kills_its_processes_and_removes_the_profile(tmp_path: Path):
    """Ctrl-C while the browser runs: the task is cancelled, every process of the browser's
    group is gone (helpers included) and the throwaway folder is removed."""
    workdir = tmp_path / "work"
    (workdir / "profile").mkdir(parents=True)
    launch = Launch("chromium", ["sh", "-c", "sleep 60 & sleep 60"], workdir,
                    workdir / "profile", workdir / "browser.log")
    pids: list[int] = []

    async def scenario() -> None:
        task = asyncio.create_task(run_browser(launch, started=pids.append))
        while not pids:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # let sh start its background helper
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert not workdir.exists()
    deadline = time.monotonic() + 5  # killed helpers are reaped by init a moment later
    while group_alive(pids[0]):
        assert time.monotonic() < deadline, "a process of the browser's group survived"
        time.sleep(0.02)


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in the process group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_browser_exit_status_and_last_log_lines(tmp_path: Path):
    workdir = tmp_path / "work"
    (workdir / "profile").mkdir(parents=True)
    launch = Launch("firefox", ["sh", "-c", "echo starting; echo 'no display' >&2; exit 3"],
                    workdir, workdir / "profile", workdir / "browser.log")
    assert asyncio.run(run_browser(launch)) == (3, "starting | no display")
    assert not workdir.exists()


def test_browser_command_line_parsing():
    from retimer.cli.launch.browser_cmd import parser

    args = parser().parse_intermixed_args(
        ["firefox", "--headless", "https://claude.ai", "--ttft", "1s", "--browser-path", "/x/ff"])
    assert (args.browser, args.url, args.headless, args.ttft, args.browser_path) == (
        "firefox", "https://claude.ai", True, "1s", "/x/ff")
    assert parser().parse_intermixed_args(["edge"]).browser == "edge"
    done = run_cli("browser", "safari")
    assert done.returncode == 2 and "invalid choice: 'safari'" in done.stderr
    assert done.stderr.count("\n") == 1


def test_port_taken_by_something_else_is_one_line():
    import http.server
    import threading

    # an HTTP server that is not retimer (say, a dev server on the port)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        done = run_cli("browser", "chromium", "--listen-port", str(port))
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 2
    assert done.stderr == (f"retimer: error: 127.0.0.1:{port} is taken by something that is not "
                           f"retimer (try --listen-port {port + 1})\n")
