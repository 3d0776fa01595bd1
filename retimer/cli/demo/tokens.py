"""retimer's token splitter for the demo page: the very pattern of retimer.wire.tokenizer,
translated to a JavaScript RegExp (flags "gu"), so the page counts tokens exactly as the proxy
does. A translation rather than a hand port: the pattern's letter classes are built from this
Python's Unicode tables, and `\\s` and `\\d` mean Python's Unicode whitespace and decimal digits
(in JavaScript they differ), so both are spelled out as code-point ranges here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache

from retimer.wire.tokenizer import TOKEN_PATTERN


def _ranges(test: Callable[[str], bool]) -> str:
    """The inside of a character class for every code point where `test(char)` is true."""
    out: list[str] = []
    start = -1
    for cp in range(sys.maxunicode + 2):
        hit = cp <= sys.maxunicode and test(chr(cp))
        if hit and start < 0:
            start = cp
        elif not hit and start >= 0:
            end = cp - 1
            out.append(_char(start) if start == end else f"{_char(start)}-{_char(end)}")
            start = -1
    return "".join(out)


def _char(cp: int) -> str:
    return f"\\u{{{cp:x}}}"


@cache
def js_token_pattern() -> str:
    """TOKEN_PATTERN's source as a JavaScript regular expression for `new RegExp(src, "gu")`."""
    space = _ranges(str.isspace)
    digit = _ranges(str.isdecimal)
    src = TOKEN_PATTERN.pattern
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(src):
        if src.startswith("[\\s\\S]", i):  # the catch-all
            out.append("[^]")
            i += 6
            continue
        c = src[i]
        if c == "\\":
            n = src[i + 1]
            i += 2
            if n == "s":
                out.append(space if in_class else f"[{space}]")
            elif n == "S" and not in_class:
                out.append(f"[^{space}]")
            elif n == "d":
                out.append(digit if in_class else f"[{digit}]")
            elif n in "rn":
                out.append("\\" + n)
            elif not n.isalnum():
                out.append(_char(ord(n)))  # re.escape's escaped literal
            else:
                raise ValueError(f"the token pattern uses \\{n}, which has no translation")
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if src.startswith("^", i + 1):
                out.append("^")
                i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        elif ord(c) > 0x7E or (in_class and c not in "-"):
            out.append(_char(ord(c)))
        else:
            out.append(c)
        i += 1
    return "".join(out)
