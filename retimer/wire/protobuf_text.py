"""Generated text inside a protobuf message with no schema: find it, and write a slice of it back.

The protobuf wire format says how long each field is but not what a length-delimited field
holds: a string, bytes or a nested message. Read without the schema, a field is taken for:

- a nested message when its bytes parse completely as one that holds text (recursively);
- text when its bytes are UTF-8 of printable characters that do not look like an identifier
  (ids, URLs, UUIDs and model names are not generated text: `looks_like_blob`);
- anything else (bytes, numbers, ids) is left alone.

Some bytes read both ways: a nested message can be printable UTF-8 ("\n\nThe answer" is field 1
holding "The answer"), and "Re" with 101 more characters parses as field 10 holding those 101.
A field's type is the same in every message of a stream, so `Schema` learns it from the
values that read one way only; a value that reads both ways at a field not learnt yet is
counted (as a message) but marked `ambiguous`, and never split: writing the wrong one back
would change the text the client decodes. Splitting writes the message again with the text
field's value replaced, and the lengths of the messages around it re-encoded; every other byte
is copied as it came, in order.
Groups (wire types 3 and 4, deprecated) make a message unreadable here: it is paced whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from retimer.wire.blobs import looks_like_blob

__all__ = ["ProtoText", "Schema", "find_texts", "replace_text"]

Schema = dict[tuple[int, ...], bool]  # field numbers' path -> it is a string (False: a message)

MAX_DEPTH = 16
MAX_TEXTS = 256  # text fields read per message; a message with more is counted by its first ones
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


@dataclass(frozen=True, slots=True)
class _Field:
    number: int
    wire: int
    start: int  # where the field (its tag) begins
    value_start: int  # where its value (after the length, for LEN) begins
    end: int


@dataclass(frozen=True, slots=True)
class ProtoText:
    """A text field: where it is (the indexes of the fields leading to it, level by level), and
    its text."""

    path: tuple[int, ...]
    numbers: tuple[int, ...]  # the field numbers along the path (for a record: 1.4.2)
    text: str
    ambiguous: bool = False  # the bytes also read as a message: counted, never split


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None


def _fields(data: bytes) -> list[_Field] | None:
    """The fields of `data` as one message, or None when it is not one."""
    out: list[_Field] = []
    for f in _each_field(data):
        if f is None:
            return None
        out.append(f)
    return out


def _each_field(data: bytes) -> Iterator[_Field | None]:
    """The fields of `data` one by one, read as they are taken; None (and the end) where the
    bytes stop being a message."""
    pos = 0
    while pos < len(data):
        tag = _varint(data, pos)
        if tag is None:
            yield None
            return
        key, value_start = tag
        number, wire = key >> 3, key & 7
        if number == 0:
            yield None
            return
        if wire == _VARINT:
            value = _varint(data, value_start)
            if value is None:
                yield None
                return
            end = value[1]
        elif wire == _I64:
            end = value_start + 8
        elif wire == _I32:
            end = value_start + 4
        elif wire == _LEN:
            length = _varint(data, value_start)
            if length is None:
                yield None
                return
            value_start = length[1]
            end = value_start + length[0]
        else:
            yield None  # groups, or not protobuf at all
            return
        if end > len(data):
            yield None
            return
        yield _Field(number, wire, pos, value_start, end)
        pos = end


def _prose(value: bytes) -> str | None:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text or any(not (c.isprintable() or c in "\n\r\t") for c in text):
        return None
    return None if looks_like_blob(text) or _identifier(text) else text


def _identifier(text: str) -> bool:
    """An id or a model name (`msg_01ab`, `gpt-4o-mini`, `m-1x`): no space, letters and digits
    mixed; a generated token such as `Hello`, `4` or ` world` is not one."""
    return (not any(c.isspace() for c in text)
            and any(c.isdigit() for c in text) and any(c.isalpha() for c in text))


def find_texts(message: bytes, schema: Schema | None = None, depth: int = 0,
               at: tuple[int, ...] = ()) -> list[ProtoText]:
    """The text fields of a message, in wire order (an empty list when it has none or is not a
    message; at most MAX_TEXTS per message, the rest is not read). `schema`, kept by the
    caller across a stream's messages, learns each field's type from the values that read one
    way only, and settles those that read both ways."""
    if depth > MAX_DEPTH:
        return []
    known: Schema = {} if schema is None else schema
    out: list[ProtoText] = []
    for i, f in enumerate(_each_field(message)):
        if f is None:
            return []  # not a message after all
        if len(out) >= MAX_TEXTS:
            break  # the rest is not read: a message with this many texts is paced whole
        if f.wire != _LEN or f.end == f.value_start:
            continue
        value = message[f.value_start:f.end]
        numbers = (*at, f.number)
        text = _prose(value)
        inner = _fields(value)
        nested = find_texts(value, known, depth + 1, numbers) if inner else []
        as_message = bool(inner) and (bool(nested) or any(g.wire == _LEN for g in inner or ()))
        if text is not None and as_message and numbers not in known:
            chosen = nested or [ProtoText((), (), text)]
            out += [ProtoText((i, *t.path), (f.number, *t.numbers), t.text, ambiguous=True)
                    for t in chosen]
            continue
        if text is not None and not as_message:
            known.setdefault(numbers, True)
        elif as_message and text is None:
            known.setdefault(numbers, False)
        if known.get(numbers) is False or (text is None and nested):
            # a message where a string was learnt (from a value that was no message, such as
            # a damaged one): the schema is not to be trusted here, nor a split re-read by it
            doubt = known.get(numbers) is True
            out += [ProtoText((i, *t.path), (f.number, *t.numbers), t.text, t.ambiguous or doubt)
                    for t in nested]
        elif text is not None:
            out.append(ProtoText((i,), (f.number,), text))
    return out


def _length_delimited(number: int, value: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(value)) + value


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def replace_text(message: bytes, path: tuple[int, ...], text: str) -> bytes:
    """The message with the text field at `path` (from `find_texts`) holding `text`; the
    enclosing lengths re-encoded, every other byte as it was."""
    fields = _fields(message)
    if fields is None or not path or path[0] >= len(fields):
        raise ValueError("no such field in the message")
    f = fields[path[0]]
    value = message[f.value_start:f.end]
    if len(path) == 1:
        new = text.encode("utf-8")
    else:
        new = replace_text(value, path[1:], text)
    return message[:f.start] + _length_delimited(f.number, new) + message[f.end:]
