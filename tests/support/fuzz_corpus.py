"""Writes the baseline fuzz corpus: hand-made edge cases for every adapter, in
tests/fixtures/fuzz/<adapter>/<case>.bin (and <case>.cuts, chunk offsets, where the chunking is
the point). `tests/unit/test_fuzz.py::test_corpus` replays every file there.

    .venv/bin/python -m tests.support.fuzz_corpus      # rewrite the baseline cases (from the checkout)

Cases found by fuzzing are added by hand as `found-*.bin` (see tests/fixtures/fuzz/README.md)
and are never touched by this script.
"""

from __future__ import annotations

import json
import struct
import zlib

from retimer.wire.eventstream import Header, HeaderType, encode_frame
from retimer.wire.protocols.websocket import encode_message
from tests.support.fuzz_specs import SPECS, Spec, gemini_web_frame
from tests.support.paths import FIXTURES

CORPUS = FIXTURES / "fuzz"
TEXT = "Hé 漢字 😀 ok\n"
DEEP = "[" * 5_000 + "]" * 5_000  # past the JSON decoder's recursion limit


def generic_cases(spec: Spec) -> dict[str, bytes | tuple[bytes, list[int]]]:
    """Edge cases every text format gets, built from the adapter's own token event."""
    one = spec.big(TEXT)
    emoji = one.index("😀".encode())
    cases: dict[str, bytes | tuple[bytes, list[int]]] = {
        "multibyte-cut-inside": (one, [emoji + 1, emoji + 2, emoji + 3]),
        "cr-line-endings": one.replace(b"\r\n", b"\n").replace(b"\n", b"\r"),
        "crlf-cut-between": (one.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"),
                             [i + 1 for i in range(len(one)) if one[i : i + 1] == b"\r"][:20]),
        "bom-then-stream": b"\xef\xbb\xbf" + one,
        "truncated-mid-event": one[: len(one) * 2 // 3],
        "lone-surrogate-text": _lone_surrogates(spec),
        "invalid-utf8-in-text": one.replace("漢".encode(), b"\xe6\xbc").replace(b"ok", b"\xff\xfeok"),
        "deeply-nested-json": one + one.replace(b"{", DEEP.encode() + b"{", 1),
        "number-too-long": one.replace(b"{", b'{"n": ' + b"9" * 5000 + b", ", 1),
        "duplicate-event": one + one,
        "nul-bytes": one.replace(b" ", b"\x00", 3),
        "empty": b"",
        "only-newlines": b"\n\r\n\r\r\n\n",
    }
    return cases


def _lone_surrogates(spec: Spec) -> bytes:
    """A token event whose JSON text holds unpaired surrogate escapes (valid JSON, not UTF-8)."""
    marker = "QQSURROGATEQQ"
    data = spec.big(f"a{marker}b")
    return data.replace(marker.encode(), b"\\ud83d x \\udc00")


def bedrock_cases() -> dict[str, bytes | tuple[bytes, list[int]]]:
    headers = [Header(":event-type", HeaderType.STRING, "contentBlockDelta"),
               Header(":content-type", HeaderType.STRING, "application/json"),
               Header(":message-type", HeaderType.STRING, "event")]
    good = encode_frame(headers, json.dumps({"contentBlockIndex": 0, "delta": {"text": TEXT}}).encode())
    bad_prelude = bytearray(good)
    bad_prelude[9] ^= 1
    bad_message = bytearray(good)
    bad_message[-1] ^= 1
    dup = encode_frame(headers + [headers[0]], b"{}")
    huge_len = struct.pack(">II", 0xFFFFFFF0, 0)
    huge = huge_len + struct.pack(">I", zlib.crc32(huge_len)) + b"x" * 32
    bad_type = bytearray(encode_frame([Header("x", HeaderType.STRING, "y")], b"{}"))
    bad_type[12 + 2] = 42  # header type byte
    bad_type[-4:] = struct.pack(">I", zlib.crc32(bytes(bad_type[:-4])))
    return {
        "prelude-crc-mismatch": good + bytes(bad_prelude) + good,
        "message-crc-mismatch": good + bytes(bad_message) + good,
        "duplicate-header": good + dup + good,
        "impossible-length": good + huge,
        "unknown-header-type": good + bytes(bad_type),
        "garbage-byte-before-frame": b"\x00" + good,
        "truncated-frame": good + good[:-5],
        "frames-cut-in-prelude": (good * 3, [5, len(good) + 11, 2 * len(good) + 12]),
        "not-json-payload": encode_frame(headers, b"\xff\xfe not json") + good,
    }


def envelope_cases(spec: Spec) -> dict[str, bytes | tuple[bytes, list[int]]]:
    """Connect and gRPC: broken envelopes and the messages a schema-less reading gets wrong."""
    import gzip

    good = spec.big(TEXT)
    message = good[5:]
    return {
        "impossible-length": good + b"\x00\xff\xff\xff\xff" + b"x" * 32,
        "truncated-envelope": good + good[:-3],
        "envelopes-cut-in-header": (good * 3, [2, len(good) + 4, 2 * len(good) + 1]),
        "compressed-not-gzip": b"\x01" + good[1:] + good,
        "gzip-truncated": struct.pack(">BI", 1, 12) + gzip.compress(message)[:12] + good,
        "gzip-bomb-ish": (lambda z: struct.pack(">BI", 1, len(z)) + z)(gzip.compress(b"\n\x05hello" * 400_000)),
        "unknown-flags": b"\x44" + good[1:] + good,
        "end-stream-then-more": struct.pack(">BI", 2, 2) + b"{}" + good,
        "text-that-reads-as-a-message": struct.pack(">BI", 0, 105) + b"\x0a\x67" + b"Re" + b"garding it. " * 8 + b"xxxxxxx",
        "nested-past-the-depth-limit": (lambda m: struct.pack(">BI", 0, len(m)) + m)(
            __import__("functools").reduce(lambda acc, _: b"\x0a" + bytes([len(acc)]) + acc, range(20), b"deep words")),
        "group-wire-type": struct.pack(">BI", 0, 4) + b"\x0b\x0a\x00\x0c" + good,
    }


def gemini_web_cases() -> dict[str, bytes | tuple[bytes, list[int]]]:
    frame = gemini_web_frame(b'\n[["wrb.fr",null,"[]"]]\n')
    emoji = '\n[["wrb.fr",null,"[null,null,null,null,[[\\"rc\\",[\\"😀😀\\"]]]]"]]\n'
    units = len(emoji.encode("utf-16-le")) // 2
    return {
        "guard-on-three-lines": b")\n]\n}'\n" + frame,
        "no-guard": frame + frame,
        "length-inside-surrogate-pair": str(units - 3).encode() + emoji.encode() + frame,
        "ten-digit-length": b")]}'\n1234567890" + frame,
        "length-zero": b")]}'\n0" + frame,
        "length-past-end": b")]}'\n" + b"99999" + b'\n[["wrb.fr"]]\n',
        "guard-cut-everywhere": (b")]}'\n\n" + frame, list(range(1, 8))),
    }


def gemini_json_cases() -> dict[str, bytes | tuple[bytes, list[int]]]:
    chunk = json.dumps({"candidates": [{"content": {"parts": [{"text": "a ] } [ { \\\" b"}]}}]})
    return {
        "error-object-not-array": b'{"error": {"code": 429, "message": "quota"}}',
        "trailing-bytes-after-array": f"[{chunk}]\n\ngarbage ]".encode(),
        "scalar-elements": f'[1, "two", null, {chunk}, true]'.encode(),
        "brackets-and-escapes-in-strings": (f"[{chunk},\r\n{chunk}]".encode(), list(range(5, 90, 7))),
        "stray-closing-brace": f"[{chunk}}}, {chunk}]".encode(),
        "unterminated-array": f"[{chunk},\r\n{chunk[:30]}".encode(),
    }


def ndjson_cases() -> dict[str, bytes | tuple[bytes, list[int]]]:
    line = json.dumps({"model": "m", "message": {"role": "assistant", "content": TEXT}, "done": False})
    return {
        "crlf-lines-no-final-newline": f"{line}\r\n{line}\r\n{line}".encode(),
        "blank-and-bom-lines": f"\n\ufeff{line}\n\n   \n{line}\n".encode(),
        "error-line": f'{line}\n{{"error": "model not found"}}\n'.encode(),
        "array-line": f"[1, 2]\n{line}\n".encode(),
    }


def websocket_cases() -> dict[str, bytes | tuple[bytes, list[int]]]:
    def text(obj: object) -> bytes:
        return encode_message(json.dumps(obj, ensure_ascii=False).encode(), is_text=True)

    delta = {"type": "response.output_text.delta", "sequence_number": 4, "delta": TEXT}
    return {
        "valid-invalid-utf8-text-message": encode_message(b'{"delta": "\xff"}', is_text=True) + text(delta),
        "valid-binary-between-deltas":
            text(delta) + encode_message(b"\x00" * 64, is_text=False) + text(delta),
        "valid-sequence-numbers-after-split": text(delta) + text({**delta, "sequence_number": 5}),
        "valid-gemini-live-two-parts": text({"serverContent": {"modelTurn": {"parts": [
            {"text": "a"}, {"text": "b"}]}}}),
        "broken-record-kind": b"x\x00\x00\x00\x02{}" + text(delta),
        "record-length-past-end": b"t\x7f\xff\xff\xff{}",
    }


def cases_for(spec: Spec) -> dict[str, bytes | tuple[bytes, list[int]]]:
    cases = generic_cases(spec) if spec.dedicated else {}
    extra = {"bedrock-eventstream": bedrock_cases, "gemini-web": gemini_web_cases,
             "gemini-json": gemini_json_cases, "ollama": ndjson_cases,
             "generic-ndjson": ndjson_cases, "websocket": websocket_cases}.get(spec.name)
    if spec.name in ("bedrock-eventstream", "websocket", "connect", "grpc"):  # length-framed
        keep = {"multibyte-cut-inside", "duplicate-event", "empty"}
        cases = {("valid-" if spec.name == "websocket" else "") + k: v
                 for k, v in cases.items() if k in keep}
    if spec.name in ("connect", "grpc"):
        cases.update(envelope_cases(spec))
    return {**cases, **(extra() if extra else {})}


def main() -> None:
    for spec in SPECS:
        directory = CORPUS / spec.name
        directory.mkdir(parents=True, exist_ok=True)
        for name, case in cases_for(spec).items():
            data, cuts = case if isinstance(case, tuple) else (case, None)
            (directory / f"{name}.bin").write_bytes(data)
            if cuts:
                (directory / f"{name}.cuts").write_text(" ".join(map(str, cuts)) + "\n")
        print(f"{spec.name}: {len(cases_for(spec))} cases")


if __name__ == "__main__":
    main()
