"""JSON as the adapters read it: only what they can write back as the same JSON.

A split event is parsed and re-serialised, so a value that Python would write back differently
in kind must keep the event whole: a number beyond a double's range parses to `inf` and would
come back as `Infinity`, which no strict JSON parser accepts. Such text raises MalformedJSON
here, as does text that is not JSON or is nested too deep to parse, and the adapters pass the
event on unchanged, as they do any malformed event.
"""

from __future__ import annotations

import json
import math
from typing import Any

from retimer.wire.errors import MalformedJSON

__all__ = ["MalformedJSON", "loads"]


def _float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise MalformedJSON(f"the number {literal[:24]} is beyond a double's range")
    return value


_DECODER = json.JSONDecoder(parse_float=_float)


def loads(text: str | bytes) -> Any:
    """json.loads, refusing numbers that would not survive a round trip as JSON numbers.

    Raises MalformedJSON (an AdapterError) for anything it cannot read: bad JSON, bytes that
    are not text, nesting too deep for the parser.
    """
    try:
        if isinstance(text, str):
            if text.startswith("\ufeff"):  # as json.loads: a BOM in text is an error
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        else:
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        try:  # the usual text, a JSON value with nothing around it: one call, no regex
            obj, end = _DECODER.raw_decode(text)
        except ValueError:
            end = -1
        if end == len(text):
            return obj
        return _DECODER.decode(text)  # json.loads would build a decoder per call
    except MalformedJSON:
        raise
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError
        raise MalformedJSON(str(e)) from e
