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
import re
import threading
from dataclasses import dataclass
from typing import Any

import msgspec

from erasure.errors import LineageError

_FLOATS = threading.local()  # did this thread's last decode meet a float?


def _float(text: str) -> float:
    _FLOATS.seen = True
    return float(text)  # what json.loads makes of it, to the bit


# How deep a JSON value may nest: an OpenLineage event nests about ten levels (a column
# lineage facet's transformations are the deepest part), so 64 leaves room for any custom
# facet and keeps every reader (the decoders, hashing, pydantic, copies) far from Python's
# recursion limit: a 3,000-deep array is refused, never a RecursionError.
MAX_DEPTH = 64
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")

_DECODER = msgspec.json.Decoder(float_hook=_float)
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
_SORTED = msgspec.json.Encoder(order="sorted")
_AS_GIVEN = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded JSON value; `native` when msgspec decoded it and it holds no float."""

    value: Any
    native: bool
    too_deep: bool = False  # an element of a batch nesting deeper than MAX_DEPTH (no value)


def decode(text: str | bytes, *, depth_checked: bool = False) -> Decoded:
    """Decode JSON text; json.JSONDecodeError or UnicodeDecodeError when it is not JSON,
    LineageError when it nests deeper than MAX_DEPTH (unless the caller `depth_checked`)."""
    if not depth_checked and not within_depth(text):
        raise LineageError(too_deep())
    _FLOATS.seen = False
    try:
        value = _DECODER.decode(text)
    except msgspec.MsgspecError:
        return Decoded(json.loads(text), False)  # decides, and says where it is broken
    return Decoded(value, not _FLOATS.seen)


def within_depth(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text's arrays and objects nest at most `limit` deep (text that is
    not JSON is within: the decoder says what is wrong with it).

    Read from the brackets alone, before anything recursive sees the text: each pass drops
    the innermost pairs (one or two levels), so text that empties within limit/2 passes is
    within the limit. Brackets inside strings only ever count against the text; when they
    leave the brackets unbalanced, or the passes run out, the decoded value decides.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    kept = data.translate(None, _NOT_BRACKETS)
    for _ in range(limit // 2):
        if not kept:
            return True
        shorter = kept.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(kept):
            break
        kept = shorter
    else:
        if not kept:
            return True
    try:
        value = json.loads(data)
    except RecursionError:
        return False
    except (ValueError, UnicodeDecodeError):
        return True  # not JSON: the decoder says why
    return not depth_exceeds(value, limit)


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether a decoded JSON value nests deeper than `limit` (walked without recursion)."""
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def too_deep(limit: int = MAX_DEPTH) -> str:
    return (
        f"OpenLineage event nests arrays and objects more than {limit} levels deep "
        "(an event needs about ten); flatten the facet that nests so deep"
    )


def decode_event_body(body: bytes) -> tuple[list[tuple[Decoded, str]], bool]:
    """An HTTP body: its elements with their text as received, and whether it was an array.

    Raises LineageError with the reason when the body is not JSON at all, or nests its
    events deeper than MAX_DEPTH.
    """
    many = body.lstrip()[:1] == b"["
    # Checked once for the body (a batch is one level more than its events); a batch with a
    # deeper event has each element checked, so only that one is refused, unless it nests
    # so deep that decoding the batch itself is not safe.
    checked = within_depth(body, MAX_DEPTH + many)
    if not checked and not (many and within_depth(body, _BATCH_DEPTH)):
        pieces = _array_elements(body) if many else None
        if pieces is None:
            raise LineageError(too_deep())
        try:
            return [(_element(text, False), text) for text in pieces], True
        except json.JSONDecodeError as exc:
            raise LineageError(not_json(exc)) from None
    try:
        if many:
            try:
                raws = _ELEMENTS.decode(body)
            except msgspec.MsgspecError:
                pass  # the standard library decides (and explains) below
            else:
                elements = []
                for raw in raws:
                    text = bytes(raw).decode("utf-8")
                    elements.append((_element(text, checked), text))
                return elements, True
        # JSON on the wire is UTF-8 (RFC 8259): the standard library would also read UTF-16.
        text = body.decode("utf-8")
        whole = decode(text, depth_checked=True)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LineageError(not_json(exc)) from None
    if isinstance(whole.value, list):
        items = [(Decoded(item, whole.native), "") for item in whole.value]
        return [(_DEEP if depth_exceeds(i.value, MAX_DEPTH) else i, t) for i, t in items], True
    return [(whole, text)], False


_BATCH_DEPTH = 4 * MAX_DEPTH  # still far from the recursion limit
# What the top level of a JSON array is made of: a string (skipped whole), a bracket, a comma.
_ARRAY_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},]')


def _array_elements(body: bytes) -> list[str] | None:
    """The texts of a JSON array's elements, split without decoding them (an element too
    deep for any decoder is cut out by its brackets); None when the body is not one array
    of balanced elements, or not UTF-8 (the whole body is then refused)."""
    depth, start, pieces = 0, None, []
    for token in _ARRAY_TOKENS.finditer(body):
        mark = token.group()
        if mark in (b"[", b"{"):
            depth += 1
            if depth == 1:
                start = token.end()
        elif mark in (b"]", b"}"):
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                if body[token.end() :].strip() or start is None:
                    return None
                pieces.append(body[start : token.start()])
                break
        elif mark == b"," and depth == 1:
            pieces.append(body[start : token.start()])
            start = token.end()
    else:
        return None
    try:
        texts = [piece.strip().decode("utf-8") for piece in pieces]
    except UnicodeDecodeError:
        return None
    if texts == [""]:
        return []
    return None if "" in texts else texts


_DEEP = Decoded(None, False, too_deep=True)


def _element(text: str, checked: bool) -> Decoded:
    if not checked and not within_depth(text):
        return _DEEP
    return decode(text, depth_checked=True)


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
