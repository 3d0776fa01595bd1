"""What retimer prints, in a real terminal (tmux) at 80 and 200 columns: the banner,
`retimer profiles`, `retimer study analyze` and the first command's (`scripts/retimer`) own lines.

The banner: at 80 columns a line of prose wraps between words with its continuation under the value
column; a command stays one line (the terminal wraps it, and copies it whole). Read joined
(`capture-pane -J`: a line the terminal wrapped is one line, a printed newline ends one), every
line but a command fits the window, and each row read back whole is the row as written."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from retimer.profile.loader import builtin_profiles
from tests.support.proxy import free_port
from tests.support.tmux import EXITED, Tmux

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("  curl     ", "  Python   ", "  Node     ", "  any app  ")
WHOLE = {  # rows that are longer than 80 columns, as written
    "study": ["  study    each request's participant from the X-Retimer-Participant header; "
              "requests naming none are refused",
              "(the participant rates the latest response there)"],
    "proxy": ["(system roots + the CA, for SDKs and CLIs)",
              "  note     a live stream is never sped up past its upstream: --record, --replay"],
}


def _rows(lines: list[str]) -> list[str]:
    """The banner's rows: a continuation (indented past a row's label) joins its row."""
    rows: list[str] = []
    for line in lines:
        if rows and line.startswith("    ") and not line.startswith(COMMANDS):
            rows[-1] += " " + line.strip()
        else:
            rows.append(line)
    return rows


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("run", ["proxy", "study"])
def test_banner_fits_the_terminal(tmp_path: Path, width: int, run: str) -> None:
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # paths as short as a real ~/.retimer's
    common = ["--listen-port", str(port), "--set", f"confdir={home / 'confdir'}",
              "--log", str(tmp_path / "records.jsonl")]
    if run == "study":
        command = [sys.executable, "-m", "retimer", "study", str(ROOT / "examples" / "study.yaml"), *common]
    else:
        command = [sys.executable, "-m", "retimer", "--profile", "cerebras", *common]
    tmux = Tmux(tmp_path, width, 50)
    try:
        tmux.start(command)
        tmux.wait_for(lambda s: "  Ctrl-C stops." in s, "the banner's last line", 60)
        lines = [x.rstrip() for x in tmux.screen(joined=True)]
        lines = lines[:lines.index("  Ctrl-C stops.") + 1]
        assert lines[0].startswith(f"retimer listening on http://127.0.0.1:{port}"), lines
        commands = [x for x in lines if x.startswith(COMMANDS)]
        assert [c[:11] for c in commands] == list(COMMANDS), lines
        assert commands[0].endswith(" -N https://api.openai.com/...")  # whole, however wide
        assert commands[-1] == '  any app  retimer run [options] -- COMMAND  (or: eval "$(retimer env)")'
        too_wide = [x for x in lines if len(x) > width and not x.startswith(COMMANDS)]
        assert not too_wide, "\n".join(lines)
        continued = [x for x in lines if x.startswith("    ") and not x.startswith(COMMANDS)]
        if width >= 200:
            assert not continued, "\n".join(lines)
        else:
            assert continued, "\n".join(lines)
            assert all(x.startswith(" " * 11) for x in continued), "\n".join(lines)
        rows = "\n".join(_rows(lines))
        for text in WHOLE[run]:
            assert text in rows, rows
    finally:
        tmux.close()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("width", [80, 200])
def test_profiles_table_fits_the_terminal(tmp_path: Path, width: int) -> None:
    """Every line fits; a profile's name and each alias (what a user types) are whole on one
    line; at 200 columns the descriptions are there too, at 80 a line says where they are."""
    tmux = Tmux(tmp_path, width, 150)
    try:
        tmux.start([sys.executable, "-m", "retimer", "profiles"])
        tmux.wait_for(lambda s: any(x.startswith(EXITED) for x in s), "the table", 60)
        lines = [x.rstrip() for x in tmux.screen(joined=True)]
        lines = lines[:next(i for i, x in enumerate(lines) if x.startswith(EXITED))]
        assert all(len(x) <= width for x in lines), "\n".join(lines)
        words = {w.strip(",│┃") for x in lines for w in x.split()}
        for p in builtin_profiles():
            assert p.name in words, (p.name, "\n".join(lines))
            assert set(p.aliases) <= words, (p.aliases, "\n".join(lines))
            if width >= 200:  # and its description, every word whole
                assert {w.strip(",") for w in p.description.split()} <= words, p.description
        assert ("descriptions:" in lines[-1]) is (width < 200), lines[-1]
    finally:
        tmux.close()


@pytest.mark.parametrize("width", [80, 200])
def test_analysis_report_fits_the_terminal(tmp_path: Path, width: int) -> None:
    """The walkthrough's two instances' logs analysed: every line fits the window, prose wraps
    between words, and every word the piped report has is there, in order."""
    logs = [str(ROOT / "tests" / "fixtures" / "records" / f"hosted-two-instances-{x}.jsonl")
            for x in "ab"]
    command = [sys.executable, "-m", "retimer", "study", "analyze", *logs]
    piped = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    expected = [x for x in piped.stdout.splitlines() if x]
    assert max(map(len, expected)) > 80  # the report has lines to wrap
    tmux = Tmux(tmp_path, width, 200)
    try:
        tmux.start(command)
        tmux.wait_for(lambda s: any(x.startswith(EXITED) for x in s), "the report", 120)
        lines = [x.rstrip() for x in tmux.screen(joined=True)]
        lines = [x for x in lines[:next(i for i, x in enumerate(lines) if x.startswith(EXITED))] if x]
        assert all(len(x) <= width for x in lines), "\n".join(lines)
        assert " ".join(lines).split() == " ".join(expected).split()  # no word split or lost
        # what fits is as piped (the tables' rows and headings too); the rest is wrapped
        assert {x for x in expected if len(x) <= width} <= set(lines), "\n".join(lines)
        assert len(lines) > len(expected)
    finally:
        tmux.close()


@pytest.mark.parametrize("width", [80, 200])
def test_the_first_commands_own_lines_wrap_between_words(tmp_path: Path, width: int) -> None:
    """`scripts/retimer`'s own lines (here "installing retimer ... from CLONE with INSTALLER",
    then a bad installer's error: nothing is installed) wrap between words in a terminal
    narrower than them, and stay one line in a wide one. The clone is reached by a path that
    fits a line but not beside the rest (a word longer than the line is still folded)."""
    home = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    clone = home / "projects" / "a-clone-of-retimer-with-a-long-folder-name"
    clone.parent.mkdir()
    clone.symlink_to(ROOT)
    env = ["env", f"XDG_DATA_HOME={tmp_path / 'data'}", f"XDG_BIN_HOME={tmp_path / 'bin'}",
           "RETIMER_INSTALLER=conda"]
    tmux = Tmux(tmp_path, width, 30)
    try:
        tmux.start([*env, str(clone / "scripts" / "retimer")])
        screen = tmux.wait_for(lambda s: any(EXITED in x for x in s), "the script's exit", 60)
        lines = [x.rstrip() for x in screen if x.strip()]
        end = next(i for i, x in enumerate(lines) if EXITED in x)
        assert lines[end] == f"{EXITED} 2", lines
        printed = " ".join(lines[:end])
        installing = (f"retimer: installing retimer {retimer_version()} from {clone} with conda "
                      "(runtime dependencies only)")
        error = "retimer: error: RETIMER_INSTALLER=conda: use uv, pipx or venv"
        assert printed == f"{installing} {error}", "\n".join(lines)  # no word cut in two
        assert all(len(x) <= width for x in lines[:end]), "\n".join(lines)
        assert (end == 2) == (width >= len(installing)), "\n".join(lines)
    finally:
        tmux.close()
        shutil.rmtree(home, ignore_errors=True)


def retimer_version() -> str:
    import retimer

    return retimer.__version__
