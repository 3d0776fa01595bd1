"""What every `retimer` command shares on the command line: bad input gets one line, no traceback."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def fail(message: str, code: int = 2, *, prog: str = "retimer") -> NoReturn:
    """Print `PROG: error: MESSAGE` on stderr and exit with `code`."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the message; ours is one line naming the problem."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)", prog=self.prog)
