"""GitHub Copilot Chat in VS Code (code-server, in headless Chromium) through the real `retimer`.

code-server (VS Code in the browser, installed at its pin by scripts/install-clients into
.venv/clients/code-server; a missing one is a failure: run scripts/install-clients) ships Copilot
Chat as a built-in extension. Its "Custom Endpoint" language-model provider (vendor
`customendpoint`, no GitHub sign-in) sends each chat turn, from the server-side extension host, to
a base URL of our choosing, streamed, as OpenAI Chat Completions or Anthropic Messages. The model
group is added the way a user's own keybinding or the "Add Models" flow does it: the command
`lm.addLanguageModelsProviderGroup` (it keeps the API key in the workbench's secret storage and
writes User/chatLanguageModels.json). One chat message is typed into the Chat view with the real
keyboard and the fake model (tests/support/clients/fakeapi.py) answers TEXT. Modes:
  reverse  `retimer --upstream https://127.0.0.1:<fake TLS port>`; the model URL is retimer's
           plain-HTTP listener (Chat Completions, then Anthropic Messages).
  forward  code-server runs under `retimer run --no-local -- code-server ...` (proxy variables and
           NODE_EXTRA_CA_CERTS, as a user would start it); the model URL is the REAL
           https://api.openai.com/v1, which tests/support/clients/upstream_map.py points at the fake
           inside the proxy. (--no-local: the reverse cases' loopback URL is reached directly.)
Each case, with the exact profile `--ttft 500ms --tps 30 --jitter 0`: the Chat view renders
exactly TEXT; the proxy has exactly one record for the call, of the client's protocol, complete,
with upstream tokens == emitted tokens == the tokens the fake sent; the stream no sooner than the
profile and not held for seconds longer (tests/support/clients/pacing.py), and the whole answer on
the screen no sooner after Enter than the profile's TTFT + (tokens - 1) / rate; a screenshot of the page (in the test's tmp dir) shows the answer.

The workbench disables the built-in chat extension until "chat setup" has run (a sign-in step);
before the first load the browser-side state that records a finished setup is seeded into the
workbench's IndexedDB (`seed_workbench_state`), which is what an already set-up VS Code has.
One code-server (and one Chromium) serves the module; each case gets a fresh browser context
(fresh IndexedDB and secret storage) and its own model group.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from retimer.cli.launch.browser import find_browser
from tests.support.clients.agent_harness import (
    CLIENTS_DIR,
    PACED,
    PROTOCOL,
    TPS,
    TTFT_MS,
    UPSTREAM_MAP,
    expected_tokens,
)
from tests.support.clients.agent_script import ApiRequest, Reply
from tests.support.clients.fakeapi import FakeAPI
from tests.support.clients.pacing import EARLY_S, predicted_s, record_problems
from tests.support.proxy import RetimerProxy, free_port, wait_listening

CODE_SERVER = CLIENTS_DIR / "code-server" / "bin" / "code-server"
# plain prose (no Markdown syntax), so the rendered answer is the text itself; ~130 tokens
TEXT = ("Retimer keeps every word of this answer and changes only the time between them. The Chat "
        "view in VS Code shows the same sentences whether the proxy plays them at the pace of a fast "
        "model or a slow one, and a reader who waits for them waits exactly as long as the profile "
        "says: half a second for the first word, then thirty tokens every second until the last one. "
        "This paragraph is long enough to measure that rate with some confidence, and plain enough "
        "that the Markdown renderer leaves every character of it alone, so the text on the screen "
        "can be compared with the text the fake model sent, word for word, to the final full stop.")
PROMPT = "Tell me how retimer paces this answer."
API_KEY = "sk-vscode-test-fake"  # goes to the workbench's secret storage, never to a file or log
KEY = "ctrl+alt+shift+f9"  # the keybinding that adds the case's model group


class ChatScript:
    """The fake model: TEXT to every chat turn (Copilot Chat sends one per message)."""

    def __call__(self, req: ApiRequest) -> Reply:
        return Reply(TEXT)


# --------------------------------------------------------------------------------------------
# code-server, under `retimer run`
# --------------------------------------------------------------------------------------------
class CodeServer:
    """`retimer run --no-local -- code-server ...` in a process group of its own, with its
    user data, extensions, HOME and workspace under `tmp` (nothing written to the real HOME)."""

    def __init__(self, tmp: Path, forward: RetimerProxy) -> None:
        self.tmp, self.forward = tmp, forward
        self.port = free_port()
        self.user = tmp / "user-data" / "User"
        self.workspace = tmp / "workspace"
        self.home = tmp / "home"
        self.log_path = tmp / "code-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> CodeServer:
        assert CODE_SERVER.exists(), f"{CODE_SERVER} is not installed: run scripts/install-clients"
        for d in (self.user, self.workspace, self.home, self.tmp / "extensions"):
            d.mkdir(parents=True, exist_ok=True)
        (self.workspace / "hello.py").write_text('print("hello")\n')
        config = self.tmp / "config.yaml"
        config.write_text(f"bind-addr: 127.0.0.1:{self.port}\nauth: none\ncert: false\n")
        (self.user / "settings.json").write_text(json.dumps({
            "security.workspace.trust.enabled": False,
            "telemetry.telemetryLevel": "off",
            "workbench.startupEditor": "none",
            "extensions.autoCheckUpdates": False,
            "extensions.autoUpdate": False,
            "update.mode": "none",
        }, indent=1))
        env = {k: v for k, v in os.environ.items()
               if not k.lower().endswith("_proxy") and k not in ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")}
        env.update({"HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / ".config"),
                    "XDG_DATA_HOME": str(self.home / ".local" / "share"),
                    "XDG_CACHE_HOME": str(self.home / ".cache")})
        argv = [sys.executable, "-m", "retimer", "run", "--quiet", "--no-local",
                "--listen-port", str(self.forward.port), "--set", f"confdir={self.forward.confdir}",
                "--", str(CODE_SERVER), "--config", str(config), "--disable-telemetry",
                "--disable-update-check", "--disable-workspace-trust",
                "--user-data-dir", str(self.user.parent), "--extensions-dir", str(self.tmp / "extensions"),
                str(self.workspace)]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        proc = self.proc
        if not wait_listening(self.port, 90, lambda: proc.poll() is None):
            self.stop()
            raise AssertionError(f"code-server did not listen on {self.port}:\n{self.log_tail()}")
        return self

    def stop(self) -> None:
        """The whole group: retimer run, code-server, its extension and agent hosts."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        time.sleep(0.5)  # code-server's last helpers (the agent host) are on their way out
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def log_tail(self, n: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"--- code-server log (tail) ---\n{text[-n:]}"

    def ext_host_log_tail(self, n: int = 3000) -> str:
        """The Copilot Chat extension's own log of this session, when it wrote one."""
        logs = sorted((self.user.parent / "logs").glob("*/**/GitHub.copilot-chat/*.log"),
                      key=lambda p: p.stat().st_mtime)
        text = logs[-1].read_text(errors="replace") if logs else "(none)"
        return f"--- Copilot Chat log (tail) ---\n{text[-n:]}"

    def set_model_group(self, group: dict[str, Any]) -> None:
        """The case's model group behind KEY; the last case's group (in chatLanguageModels.json,
        its key in a browser context since closed) is dropped."""
        (self.user / "chatLanguageModels.json").unlink(missing_ok=True)
        (self.user / "keybindings.json").write_text(json.dumps([{
            "key": KEY, "command": "lm.addLanguageModelsProviderGroup", "args": group}], indent=1))


def model_group(name: str, api_type: str, url: str) -> dict[str, Any]:
    return {"name": name, "vendor": "customendpoint", "apiKey": API_KEY, "apiType": api_type,
            "models": [{"id": "gpt-5", "name": f"{name} via retimer", "url": url, "toolCalling": True,
                        "vision": False, "maxInputTokens": 128000, "maxOutputTokens": 4096}]}


# --------------------------------------------------------------------------------------------
# the workbench in Chromium (Playwright on the system binary)
# --------------------------------------------------------------------------------------------
# what an already set-up VS Code has in the workbench's global state: chat setup done (so the
# built-in Copilot Chat extension is not disabled for want of a sign-in)
SEED_JS = """async (setup) => {
  const db = await new Promise((ok, bad) => {
    const r = indexedDB.open('vscode-web-state-db-global');
    r.onupgradeneeded = () => r.result.createObjectStore('ItemTable');
    r.onsuccess = () => ok(r.result); r.onerror = () => bad(r.error);
  });
  const tx = db.transaction('ItemTable', 'readwrite');
  const st = tx.objectStore('ItemTable');
  st.put('true', 'builtinChatExtensionEnablementMigration');
  st.put('[]', 'extensionsIdentifiers/disabled');
  st.put(setup, 'chat.setupContext');
  st.put('true', 'chat.setupContext.migrated.v1');
  await new Promise((ok, bad) => { tx.oncomplete = ok; tx.onerror = () => bad(tx.error); });
  db.close();
  return true;
}"""
SETUP_DONE = {"entitlement": 1, "installed": True, "completed": True, "disabled": False,
              "untrusted": False, "disabledInWorkspace": False}
RESPONSES = ".interactive-item-container.interactive-response"
LAST_ANSWER_JS = ("""() => {
  const r = [...document.querySelectorAll(""" + json.dumps(RESPONSES) + """)].pop();
  if (!r) return null;
  const md = [...r.querySelectorAll('.rendered-markdown')].map(e => e.innerText).join('\\n');
  return {markdown: md, all: r.innerText};
}""")


@dataclass
class Chat:
    answer: str  # the rendered Markdown of the response
    whole: str  # all the response's text (with its buttons and notes)
    screenshot: Path
    sent: float  # when Enter was pressed (wall clock)
    shown: float  # when the whole answer was in the DOM
    box: dict[str, float]  # where the response is on the screenshot (CSS pixels = PNG pixels)
    phases: dict[str, float]  # seconds from the start of the case to each step


def seed_workbench_state(page: Any, base: str) -> None:
    page.goto(f"{base}/retimer-seed-state")  # any same-origin page (a 404) before the workbench's
    assert page.evaluate(SEED_JS, json.dumps(SETUP_DONE))


def chat_once(browser: Any, server: CodeServer, group: dict[str, Any], shot: Path,
              timeout: float = 90) -> Chat:
    """A fresh browser context: seed, load the workbench, add `group` with KEY, send PROMPT in the
    Chat view, wait for the whole answer, screenshot."""
    server.set_model_group(group)
    start = time.time()
    phases: dict[str, float] = {}
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        seed_workbench_state(page, server.url)
        phases["seeded"] = time.time() - start
        page.goto(f"{server.url}/?folder={server.workspace}")
        page.wait_for_selector(".monaco-workbench .part.statusbar", timeout=timeout * 1000)
        phases["workbench"] = time.time() - start
        page.wait_for_selector(".interactive-input-part", timeout=timeout * 1000)
        phases["chat view"] = time.time() - start
        model_name = group["models"][0]["name"]
        picked = f"document.querySelector('.interactive-input-part')?.innerText.includes({model_name!r})"
        deadline = time.monotonic() + timeout
        while True:  # the keybindings and the chat providers load a moment after the view
            page.mouse.click(700, 300)
            page.keyboard.press("Control+Alt+Shift+F9")
            try:
                page.wait_for_function(picked, timeout=2000)
                break
            except Exception as e:  # noqa: BLE001 - playwright's TimeoutError
                if time.monotonic() > deadline:
                    page.screenshot(path=str(shot))
                    raise AssertionError(f"the model {model_name!r} was never picked: "
                                         f"{page.inner_text('.interactive-input-part')!r}\n"
                                         f"{server.log_tail()}\n{server.ext_host_log_tail()}") from e
        phases["model picked"] = time.time() - start
        groups = json.loads((server.user / "chatLanguageModels.json").read_text())
        assert [g["name"] for g in groups] == [group["name"]], groups
        page.click(".interactive-input-part .monaco-editor")
        page.keyboard.type(PROMPT)
        sent = time.time()
        page.keyboard.press("Enter")
        tail = json.dumps(TEXT[-40:])
        try:
            page.wait_for_function(
                f"(() => {{ const a = ({LAST_ANSWER_JS})(); return a && a.markdown.includes({tail}); }})()",
                timeout=timeout * 1000, polling=50)
            shown = time.time()
            phases["answered"] = shown - start
        except Exception:  # noqa: BLE001 - report what was on screen
            page.screenshot(path=str(shot))
            got = page.evaluate(LAST_ANSWER_JS)
            raise AssertionError(f"no whole answer in the Chat view within {timeout:.0f}s: {got!r}\n"
                                 f"{server.log_tail()}\n{server.ext_host_log_tail()}") from None
        page.wait_for_timeout(300)  # the response's toolbar settles
        got = page.evaluate(LAST_ANSWER_JS)
        box = page.locator(RESPONSES).last.bounding_box()
        assert box is not None
        page.screenshot(path=str(shot))
        return Chat(got["markdown"], got["all"], shot, sent, shown, box, phases)
    finally:
        context.close()


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------
pytestmark = pytest.mark.fake_api(script=ChatScript, bursts=2)


@dataclass
class Proxies:
    reverse: RetimerProxy
    forward: RetimerProxy


@pytest.fixture(scope="module")
def vscode_proxies(tmp_path_factory: pytest.TempPathFactory, fake_api: FakeAPI) -> Iterator[Proxies]:
    """The paced reverse and forward proxies Copilot Chat's cases share."""
    tmp = tmp_path_factory.mktemp("retimer")
    reverse = RetimerProxy(tmp / "reverse", "--quiet", *PACED, "--upstream", fake_api.url,
                           upstream_ca=fake_api.ca_path)
    forward = RetimerProxy(tmp / "forward", "--quiet", *PACED, "--set", f"scripts={UPSTREAM_MAP}",
                           upstream_ca=fake_api.ca_path)
    with pytest.MonkeyPatch.context() as mp:  # read by upstream_map.py in the forward proxy
        mp.setenv("FAKEAPI_PORT", str(fake_api.port))
        mp.setenv("FAKEAPI_HTTP_PORT", str(fake_api.http_port))
        with reverse, forward:
            yield Proxies(reverse, forward)


@pytest.fixture(scope="module")
def code_server(tmp_path_factory: pytest.TempPathFactory, vscode_proxies: Proxies) -> Iterator[CodeServer]:
    server = CodeServer(tmp_path_factory.mktemp("code-server"), vscode_proxies.forward)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=find_browser("chromium"), headless=True)
        try:
            yield b
        finally:
            b.close()


# --------------------------------------------------------------------------------------------
# the checks
# --------------------------------------------------------------------------------------------
def check_chat(chat: Chat, proxy: RetimerProxy, before: int, other: RetimerProxy, other_before: int,
               fake: FakeAPI, api: str, server: CodeServer) -> None:
    requests = fake.requests
    context = (f"\nfake API requests: {[(r.method, r.path, r.api, r.host) for r in requests]}\n"
               f"{server.log_tail()}")
    # integrity: the Chat view shows exactly what the fake model sent
    assert " ".join(chat.answer.split()) == TEXT, (
        f"the Chat view shows {chat.answer!r} (whole response {chat.whole!r}){context}")
    turns = [r for r in requests if r.reply is not None]
    assert [r.api for r in turns] == [api], f"the fake model answered {[r.api for r in turns]}{context}"
    (turn,) = turns
    assert turn.stream, f"a {api} call that did not stream{context}"
    proxy.records(before + 1)  # written as the stream ends at the proxy
    time.sleep(0.5)  # and nothing else may follow
    records = proxy.records(0, timeout=0)[before:]
    strays = other.records(0, timeout=0)[other_before:]
    assert not strays, f"the other proxy ({other.url}) recorded {[(r['protocol'], r['url']) for r in strays]}"
    summary = [(r["protocol"], r["outcome"], r["url"], r["upstream"]["tokens"], r["emitted"]["tokens"],
                r["emitted"]["ttft_ms"], r["emitted"]["tps"]) for r in records]
    assert len(records) == 1, f"{len(records)} records for one chat message: {summary}{context}"
    (rec,) = records
    expect = expected_tokens(turn)
    assert (rec["protocol"], rec["outcome"]) == (PROTOCOL[api], "complete"), f"{summary}{context}"
    assert (rec["upstream"]["tokens"], rec["emitted"]["tokens"]) == (expect, expect), (
        f"the fake sent {expect} tokens; record {summary}")
    assert expect > 100, expect
    assert (rec["target"]["ttft_ms"], rec["target"]["tps"]) == (TTFT_MS, TPS), rec["target"]
    ttft, rate = rec["emitted"]["ttft_ms"], rec["emitted"]["tps"]
    problems = record_problems("the chat turn", rec)
    assert not problems, f"{problems}: {summary}"
    # the screen cannot show the whole answer before the paced stream let its last token out
    assert chat.shown - chat.sent >= predicted_s(rec) - EARLY_S, (
        f"the whole answer was on screen {chat.shown - chat.sent:.3f}s after Enter; the profile "
        f"gives its stream {predicted_s(rec):.3f}s: {summary}")
    # the answer is on the screen: a real PNG, the Chat view's response area not blank
    check_screenshot(chat)
    shown = chat.shown - chat.sent
    print(f"\n{api}: {rec['url']}: {expect} tokens, TTFT {ttft:.1f} ms, {rate:.2f} tok/s, "
          f"stream {rec['emitted']['duration_ms']:.0f} ms; Enter to whole answer on screen {shown:.2f}s; "
          f"screenshot {chat.screenshot} ({chat.screenshot.stat().st_size} bytes); steps "
          + ", ".join(f"{k} {v:.1f}s" for k, v in chat.phases.items()))


def check_screenshot(chat: Chat) -> None:
    """A real PNG of the whole page, and the response's own area on it is not blank: its dark
    (text) pixels cover a share of it that a paragraph of text does (about 5-15 %)."""
    from PIL import Image

    data = chat.screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, (chat.screenshot, len(data))
    b = chat.box
    with Image.open(io.BytesIO(data)) as img:
        assert img.size == (1400, 900), img.size
        area = img.convert("L").crop((round(b["x"]), round(b["y"]), round(b["x"] + b["width"]),
                                      round(min(b["y"] + b["height"], 900))))
    pixels = area.tobytes()
    dark = sum(1 for v in pixels if v < 128) / max(1, len(pixels))
    assert area.width > 200 and area.height > 200 and 0.02 < dark < 0.5, (
        f"{chat.screenshot}: the response area {b} is {dark:.1%} dark pixels: not a rendered answer")


def run_case(browser: Any, server: CodeServer, fake: FakeAPI, proxies: Proxies, mode: str, api: str,
             group: dict[str, Any], tmp_path: Path) -> None:
    proxy, other = ((proxies.forward, proxies.reverse) if mode == "forward"
                    else (proxies.reverse, proxies.forward))
    fake.clear()
    before, other_before = len(proxy.records(0, timeout=0)), len(other.records(0, timeout=0))
    chat = chat_once(browser, server, group, tmp_path / "chat.png")
    check_chat(chat, proxy, before, other, other_before, fake, api, server)


@pytest.mark.timeout(300)
def test_copilot_chat_reverse_chat_completions(browser: Any, code_server: CodeServer, fake_api: FakeAPI,
                                               vscode_proxies: Proxies, tmp_path: Path) -> None:
    group = model_group("Reverse", "chat-completions", vscode_proxies.reverse.url + "/v1")
    run_case(browser, code_server, fake_api, vscode_proxies, "reverse", "openai-chat", group, tmp_path)


@pytest.mark.timeout(300)
def test_copilot_chat_reverse_anthropic_messages(browser: Any, code_server: CodeServer, fake_api: FakeAPI,
                                                 vscode_proxies: Proxies, tmp_path: Path) -> None:
    group = model_group("Messages", "messages", vscode_proxies.reverse.url + "/v1/messages")
    run_case(browser, code_server, fake_api, vscode_proxies, "reverse", "anthropic-messages", group, tmp_path)


@pytest.mark.timeout(300)
def test_copilot_chat_forward_retimer_run(browser: Any, code_server: CodeServer, fake_api: FakeAPI,
                                          vscode_proxies: Proxies, tmp_path: Path) -> None:
    group = model_group("Forward", "chat-completions", "https://api.openai.com/v1")
    run_case(browser, code_server, fake_api, vscode_proxies, "forward", "openai-chat", group, tmp_path)
