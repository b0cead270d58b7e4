"""The JSON text of OpenLineage events: decoded and encoded at ingest rates.

msgspec decodes and encodes several times faster than the standard library. What it
decodes holds JSON types only (str keys; str, int, bool, None, list, dict); when it also
holds no float (msgspec and the standard library spell floats differently: `1e16` against
`1e+16`, NaN as null) it is *native*, and msgspec's sorted compact encoding of it is byte
for byte `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`: the
content hash (`openlineage.event_id`) stays what it always was, only faster. Text msgspec
refuses (NaN, a lone surrogate escape, plain malformed JSON) goes to the standard library,
which decides and explains as before.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import msgspec

from erasure.errors import LineageError

_FLOATS = threading.local()  # did this thread's last decode meet a float?


def _float(text: str) -> float:
    _FLOATS.seen = True
    return float(text)  # what json.loads makes of it, to the bit


_DECODER = msgspec.json.Decoder(float_hook=_float)
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
_SORTED = msgspec.json.Encoder(order="sorted")
_AS_GIVEN = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded JSON value; `native` when msgspec decoded it and it holds no float."""

    value: Any
    native: bool


def decode(text: str | bytes) -> Decoded:
    """Decode JSON text; json.JSONDecodeError or UnicodeDecodeError when it is not JSON."""
    _FLOATS.seen = False
    try:
        value = _DECODER.decode(text)
    except msgspec.MsgspecError:
        return Decoded(json.loads(text), False)  # decides, and says where it is broken
    return Decoded(value, not _FLOATS.seen)


def decode_event_body(body: bytes) -> tuple[list[tuple[Decoded, str]], bool]:
    """An HTTP body: its elements with their text as received, and whether it was an array.

    Raises LineageError with the reason when the body is not JSON at all.
    """
    try:
        if body.lstrip()[:1] == b"[":
            try:
                raws = _ELEMENTS.decode(body)
            except msgspec.MsgspecError:
                pass  # the standard library decides (and explains) below
            else:
                elements = []
                for raw in raws:
                    text = bytes(raw).decode("utf-8")
                    elements.append((decode(text), text))
                return elements, True
        whole = decode(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LineageError(not_json(exc)) from None
    if isinstance(whole.value, list):
        return [(Decoded(item, whole.native), "") for item in whole.value], True
    return [(whole, body.decode("utf-8"))], False


def not_json(exc: json.JSONDecodeError | UnicodeDecodeError) -> str:
    """Why text is not an OpenLineage event at all (no part of the text is quoted)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"OpenLineage event is not UTF-8 text: {exc.reason}"
    return f"OpenLineage event is not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"


def canonical(value: Any, *, native: bool) -> bytes:
    """The text `event_id` hashes: sorted keys, compact, UTF-8; stable across versions."""
    if native:
        return _SORTED.encode(value)
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        ).encode("utf-8")
    except UnicodeEncodeError:
        raise LineageError(
            "OpenLineage event holds text that is not valid Unicode (a lone surrogate "
            "escape such as \\ud800); fix the producer's encoding"
        ) from None


def compact(value: Any, *, native: bool) -> str:
    """Compact JSON in the value's own key order (what is stored when no text was given)."""
    if native:
        return _AS_GIVEN.encode(value).decode("utf-8")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def sql_parameter(value: Any) -> str:
    """Values (str, int, None, aware datetimes) as one JSON text to bind to a statement that
    reads it with json_to_recordset or json_array_elements_text."""
    return _AS_GIVEN.encode(value).decode("utf-8")


def digest_text(value: Any, *, native: bool) -> bytes:
    """Text to digest for equality (key order as given): equal values, equal text.

    Native values are encoded by msgspec, others by the standard library; the two spellings
    of one value may differ, which only makes a comparison read more, never answer wrong.
    """
    if native:
        return b"m" + _AS_GIVEN.encode(value)
    return json.dumps(value, separators=(",", ":"), default=str).encode("utf-8", "surrogatepass")


def raw(value: Any) -> Any:
    """A native value as msgspec.Raw: its text, which msgspec encodes back verbatim (so a
    digest of it is unchanged) and which pickles as bytes. None stays None."""
    return None if value is None else msgspec.Raw(_AS_GIVEN.encode(value))


def unraw(value: Any) -> Any:
    """The value a msgspec.Raw holds (`raw`); any other value as it is."""
    return msgspec.json.decode(value) if isinstance(value, msgspec.Raw) else value
