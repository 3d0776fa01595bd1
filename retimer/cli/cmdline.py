"""What every `retimer` command shares on the command line: bad input gets one line, no
traceback, and a mistyped flag, command or value gets the nearest right one to try; text is
fitted to the terminal it is read in (`wrapped`, `fit`, `fit_report`), never to a pipe."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import NoReturn, TextIO

from retimer.timing.suggest import closest, did_you_mean

# `retimer WORD`: the subcommands, for "did you mean" (cli.main dispatches them)
COMMANDS = ("browser", "run", "env", "ca", "study", "demo", "export", "fit", "report", "profiles",
            "whatif", "addon", "cassette")
# an option's value that argparse would take for an option: "-1s", "-5ms", "-.5", "-2x"
_NEGATIVE_VALUE = re.compile(r"-\.?\d")
_ABBREVIATION = re.compile(r"(?:\b(?:e\.g|i\.e|vs|cf|approx|no|fig)|\b[A-Z])$")


def fail(message: str, code: int = 2, *, prog: str = "retimer") -> NoReturn:
    """Print `PROG: error: MESSAGE` on stderr and exit with `code`."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def unknown_command(word: str) -> str:
    """The message for `retimer WORD` when WORD is no subcommand."""
    match = closest(word, COMMANDS)
    hint = f"did you mean {match}?" if match else f"commands: {', '.join(COMMANDS)}"
    return f"unknown command {word!r}; {hint}"


def unknown_options_hint(message: str, names: Iterable[str]) -> str:
    """mitmproxy's "Unknown option(s): a, b" (from --set) with the nearest real option."""
    head, _, listed = message.partition(": ")
    if not head.lower().startswith("unknown option") or not listed:
        return message
    first = listed.split(",")[0].strip()
    return message + did_you_mean(first, names)


def wrapped(text: str, width: int | None = None, indent: str = "    ") -> list[str]:
    """Long notes as indented lines of at most `width` (default: the terminal's, at most 100;
    80 when not a terminal), one sentence starting each line, so a paragraph of sources reads
    as a list rather than a wall."""
    width = width or min(shutil.get_terminal_size((80, 24)).columns, 100)
    sentences: list[str] = []
    for piece in re.split(r"(?<=[A-Za-z0-9)\]%'])\.\s+(?=[A-Z])", text.strip()):
        if sentences and _ABBREVIATION.search(sentences[-1]):  # "e.g. Groq" is one sentence
            sentences[-1] += ". " + piece
        else:
            sentences.append(piece)
    lines: list[str] = []
    for s in sentences:
        s = s if s.endswith(".") else s + "."
        lines += textwrap.wrap(s, width, initial_indent=indent, subsequent_indent=indent + "  ",
                               break_on_hyphens=False)
    return lines


_GAPS = re.compile(r"( +)")
_TABLE_ROW = re.compile(r"^ *\S+(?: \S+)*  +\S")  # columns: two or more spaces after text


def terminal_width(stream: TextIO) -> int | None:
    """The width of the terminal `stream` writes to; None when it is piped or a file (then
    nothing is wrapped, so what scripts read does not depend on a window)."""
    return shutil.get_terminal_size().columns if stream.isatty() else None


def fit(line: str, width: int | None, hang: int) -> str:
    """`line` word-wrapped to `width` (None or wide enough: as it is), each continuation `hang`
    columns in. A word that fits no line (a long path) stays where it is, for the terminal to
    wrap, rather than leave the words before it alone on a line."""
    if width is None or len(line) <= width:
        return line
    parts = _GAPS.split(line)  # words at even places, the spaces between them at odd ones
    out = [parts[0]]
    for gap, word in zip(parts[1::2], parts[2::2], strict=True):
        if not out[-1].strip() or len(out[-1]) + len(gap) + len(word) <= width \
                or hang + len(word) > width:
            out[-1] += gap + word
        else:
            out.append(" " * hang + word)
    return "\n".join(out)


def fit_report(line: str, width: int | None) -> str:
    """A report's line fitted to the terminal: prose wrapped two columns in from its own
    indent; a table's row (columns apart by two or more spaces) left whole, its columns kept."""
    if width is None or len(line) <= width or _TABLE_ROW.match(line):
        return line
    return fit(line, width, len(line) - len(line.lstrip(" ")) + 2)


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the message; ours is one line naming the problem, with the
    nearest flag or choice when a word was mistyped. A negative value ("--ttft -1s") is taken
    as the option's value, so it gets the same message as any other bad value."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)", prog=self.prog)

    @property
    def actions(self) -> list[argparse.Action]:
        """Every argument this parser takes. argparse offers no public view of them, so this is
        the one place retimer reads its private list."""
        return self._actions

    def flag_options(self) -> set[str]:
        """The options that take no value (`--quiet`, `--no-local`, ...)."""
        return {o for a in self.actions if a.nargs == 0 for o in a.option_strings}

    def parse_known_args(  # type: ignore[override]  # typeshed: overloads, generic in the namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._join_negative_values(argv), namespace)

    def parse_args(  # type: ignore[override]  # typeshed: overloads, generic in the namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(self.unrecognized(extras))
        return parsed

    def parse_intermixed_args(  # type: ignore[override]  # typeshed: overloads, generic in the namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_intermixed_args(args, namespace)
        if extras:
            self.error(self.unrecognized(extras))
        return parsed

    def unrecognized(self, extras: list[str]) -> str:
        """One line for the first word nothing took, with the flag it was likely meant as."""
        word = extras[0]
        if word.startswith("-") and word != "-":
            flag = word.split("=", 1)[0]
            longs = [o for a in self.actions for o in a.option_strings if o.startswith("--")]
            return f"unrecognized argument {flag}{did_you_mean(flag, longs)}"
        return f"unexpected argument {word!r}"

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # argparse's "invalid choice" message, plus the choice that was likely meant
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            hint = did_you_mean(str(value), choices) or f"; choose from {', '.join(choices)}"
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint}")

    def _join_negative_values(self, argv: list[str]) -> list[str]:
        """`--ttft -1s` as `--ttft=-1s`: argparse would read "-1s" as an unknown option and
        say only "expected one argument"."""
        valued = {o for a in self.actions if a.nargs is None for o in a.option_strings}
        out: list[str] = []
        i = 0
        while i < len(argv):
            word = argv[i]
            if word == "--":
                out += argv[i:]
                break
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            if word in valued and _NEGATIVE_VALUE.match(nxt):
                out.append(f"{word}={nxt}")
                i += 2
            else:
                out.append(word)
                i += 1
        return out
