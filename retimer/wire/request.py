"""A request body, parsed once, and what the rest of retimer reads from it.

Four readers look at a request body: the prompt estimate, the TGI adapter's `accepts`, the
study's conversation key and the response cache's key. Each used to parse it with its own
idea of the shapes; `RequestBody` parses it once (lazily, on first use) and answers them all,
so a body the proxy has wrapped is not parsed again by the next reader.

The parse is `json.loads` on the bytes, so a UTF-8 BOM, UTF-16 and UTF-32 bodies are read, as
the study and the cache always did; `json_text` says whether the same value comes from the
body read as plain UTF-8 text, which is what the prompt estimate accepts. A body that is not
JSON, or is nested too deep to parse, is no error: `is_json` is False and `too_deep` says why.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["RequestBody"]

_UNPARSED = object()  # not parsed yet
_NOT_JSON = object()  # parsed: not JSON
# the paths of the max-output hint, first match wins: OpenAI, Responses, Anthropic, Gemini
# (REST and SDK spelling), Ollama, Bedrock, TGI
_MAX_OUTPUT_PATHS = (
    ("max_completion_tokens",), ("max_output_tokens",), ("max_tokens",),
    ("generationConfig", "maxOutputTokens"), ("generation_config", "max_output_tokens"),
    ("options", "num_predict"), ("inferenceConfig", "maxTokens"), ("parameters", "max_new_tokens"),
)
_THINKING_BUDGET_PATHS = (
    ("generationConfig", "thinkingConfig", "thinkingBudget"),
    ("generation_config", "thinking_config", "thinking_budget"),
)


class RequestBody:
    """One request body: its bytes, its media type, and its JSON value once asked for."""

    __slots__ = ("_decoded", "_double_range", "_text", "_too_deep", "_value", "content_type", "raw")

    def __init__(self, raw: bytes, content_type: str = "") -> None:
        self.raw = raw
        self.content_type = content_type  # as the request's header said; parsing never relies on it
        self._decoded = False
        self._text: str | None = None
        self._value: Any = _UNPARSED
        self._too_deep = False
        self._double_range = True

    @classmethod
    def from_text(cls, text: str, content_type: str = "") -> RequestBody:
        """A body given as text (lone surrogates kept, as json.loads keeps them)."""
        body = cls(text.encode("utf-8", "surrogatepass"), content_type)
        body._decoded, body._text = True, text
        return body

    @classmethod
    def of(cls, body: RequestBody | bytes | str | None, content_type: str = "") -> RequestBody:
        """`body` itself when already wrapped, else a new RequestBody for its bytes or text."""
        if isinstance(body, RequestBody):
            return body
        if isinstance(body, str):
            return cls.from_text(body, content_type)
        return cls(body or b"", content_type)

    # -- the parse -------------------------------------------------------------------------
    @property
    def text(self) -> str | None:
        """The body as UTF-8 text; None when it is not valid UTF-8 (binary data)."""
        if not self._decoded:
            self._decoded = True
            try:
                self._text = self.raw.decode("utf-8")
            except UnicodeDecodeError:
                self._text = None
        return self._text

    @property
    def value(self) -> Any:
        """The JSON value (None when the body is not JSON; see `is_json` for JSON `null`)."""
        self._parse()
        return None if self._value is _NOT_JSON else self._value

    @property
    def is_json(self) -> bool:
        """The body parsed as JSON (any value, `null` included)."""
        self._parse()
        return self._value is not _NOT_JSON

    @property
    def too_deep(self) -> bool:
        """The body may be JSON, but nests deeper than the parser can follow."""
        self._parse()
        return self._too_deep

    @property
    def json_text(self) -> bool:
        """`value` is also what parsing the body's plain UTF-8 text gives (no BOM, not UTF-16)."""
        return self.is_json and self.text is not None and json.detect_encoding(self.raw) == "utf-8"

    @property
    def double_range(self) -> bool:
        """Every number in the JSON fits a double (one beyond it would be written back as `Infinity`)."""
        self._parse()
        return self._double_range

    @property
    def object(self) -> dict[str, Any] | None:
        """The JSON value when it is an object, else None."""
        value = self.value
        return value if isinstance(value, dict) else None

    def _parse(self) -> None:
        """Parse on first use; later calls find the value kept."""
        if self._value is not _UNPARSED:
            return
        try:
            self._value = json.loads(self.raw, parse_float=self._float)
        except RecursionError:
            self._value, self._too_deep = _NOT_JSON, True
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            self._value = _NOT_JSON

    def _float(self, literal: str) -> float:
        value = float(literal)
        if math.isinf(value):
            self._double_range = False
        return value

    # -- what readers ask for --------------------------------------------------------------
    def get(self, *path: str) -> Any:
        """The value at `path` through nested objects, or None when a step is missing."""
        cur: Any = self.object
        for key in path:
            if not isinstance(cur, dict):
                return None
            cur = cur.get(key)
        return cur

    @property
    def model(self) -> str | None:
        """The `model` the body names, if it is a string."""
        model = self.get("model")
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        """The body asks for a stream: `"stream": true`."""
        return self.get("stream") is True

    @property
    def max_output_tokens(self) -> int | None:
        """The first positive max-output hint the body gives, whatever its API (an upper bound)."""
        for path in _MAX_OUTPUT_PATHS:
            if (v := _positive_int(self.get(*path))) is not None:
                return v
        return None

    @property
    def reasoning_budget(self) -> int | None:
        """Anthropic thinking.budget_tokens or Gemini thinkingBudget; 0 means thinking is off."""
        thinking = self.get("thinking")
        if isinstance(thinking, dict):
            if thinking.get("type") == "disabled":
                return 0
            if (v := _positive_int(thinking.get("budget_tokens"))) is not None:
                return v
        for path in _THINKING_BUDGET_PATHS:
            v = self.get(*path)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                return v
        return None

    def list_field(self, name: str) -> list[Any] | None:
        """A top-level field that must be a list (`messages`, `contents`), else None."""
        value = self.get(name)
        return value if isinstance(value, list) else None



def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if math.isfinite(value) and value > 0 else None
