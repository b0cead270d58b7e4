"""Event JSON at ingest rates: the fast decoder and encoder agree with the standard library
wherever the content hash depends on them, so an event keeps the id it always had."""

from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

import pytest

from erasure.errors import LineageError
from erasure.lineage.openlineage import (
    RunEvent,
    event_id,
    event_json,
    parse_event,
    read_event_elements,
)

# Keys and strings that stress escaping and ordering: controls, quotes, DEL, non-BMP, line
# separators, a BOM, combining marks, and keys whose order differs by code point and by case.
TEXTS = [
    "", "plain", 'quo"te', "back\\slash", "tab\there", "new\nline", "\r\x08\x0c", "\x00\x01\x1f",
    "\x7f", "\u2028\u2029", "\ufeffbom", "zoë", "zoe\u0308", "日本語", "😀", "\U0010ffff", "é",
    "Z", "a", "_a", "A", "ä",
]  # fmt: skip


def _value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "bool", "none", "list", "dict"] if depth < 4 else ["str", "int"]
    kind = rng.choice(kinds)
    if kind == "str":
        return rng.choice(TEXTS) + rng.choice(TEXTS)
    if kind == "int":
        return rng.choice([0, -1, 7, 2**53 + 1, -(2**63), 10**30])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(TEXTS) + str(k): _value(rng, depth + 1) for k in range(rng.randint(0, 5))}


def _stdlib(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.encode("utf-8")


def test_the_fast_canonical_text_is_the_standard_librarys_byte_for_byte() -> None:
    rng = random.Random(20261201)
    for _ in range(3_000):
        value = {"k": _value(rng)}
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
            decoded = event_json.decode(text)
            assert decoded.native and decoded.value == value
            assert event_json.canonical(decoded.value, native=True) == _stdlib(value)
            as_given = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            assert event_json.compact(decoded.value, native=True) == as_given


@pytest.mark.parametrize(
    "text",
    ['{"a": 1.5}', '{"a": 1e16}', '{"a": [1E-7]}', '{"a": -0.0}', '{"a": NaN}', '{"a": 1e400}'],
)
def test_floats_and_nan_are_hashed_as_they_always_were(text: str) -> None:
    decoded = event_json.decode(text)
    assert not decoded.native  # the slower spelling, which is the one ids were made with
    assert decoded.value == json.loads(text) or text.endswith("NaN}")
    assert event_json.canonical(decoded.value, native=False) == _stdlib(json.loads(text))


def _event(**extra: Any) -> dict[str, Any]:
    return {
        "eventType": "COMPLETE",
        "eventTime": "2026-11-01T02:00:00Z",
        # In a kept facet: the values are hashed, not dropped (kept_facets).
        "run": {"runId": "r1", "facets": {"nominalTime": {"nominalStartTime": "x", **extra}}},
        "job": {"namespace": "airflow", "name": "zoë.job"},
        "outputs": [{"namespace": "pg", "name": "t", "facets": {"schema": {"fields": []}}}],
    }


@pytest.mark.parametrize("extra", [{}, {"ratio": 0.25}, {"note": "tab\t\u2028 😀"}])
def test_an_event_keeps_its_id_whichever_way_it_was_read(extra: dict[str, Any]) -> None:
    raw = _event(**extra)
    expected = "sha256:" + hashlib.sha256(_stdlib(raw)).hexdigest()  # the id as always made
    assert event_id(parse_event(json.dumps(raw))) == expected  # from text (msgspec)
    assert event_id(parse_event(raw)) == expected  # from a mapping (standard library)


def test_a_body_is_split_into_its_elements_with_their_text() -> None:
    body = b' [{"a": 1}, {"b": [2, 3]} ,{"c": 0.5}]'
    elements, many = event_json.decode_event_body(body)
    assert many and [e.value for e, _ in elements] == [{"a": 1}, {"b": [2, 3]}, {"c": 0.5}]
    assert [text for _, text in elements] == ['{"a": 1}', '{"b": [2, 3]}', '{"c": 0.5}']
    assert [e.native for e, _ in elements] == [True, True, False]
    single, many = event_json.decode_event_body(b'{"a": 1}')
    assert not many and single[0][0].value == {"a": 1}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON (line 1, column 2)"),
        (b'[{"a": 1}, {oops}]', "not valid JSON (line 1, column 13)"),
        (b'{"a": "\xff"}', "not UTF-8 text"),
    ],
)
def test_a_body_that_is_not_json_says_where_without_quoting_it(body: bytes, reason: str) -> None:
    with pytest.raises(LineageError, match=re.escape(reason)) as caught:
        event_json.decode_event_body(body)
    assert "oops" not in str(caught.value)


def test_text_that_is_not_unicode_cannot_be_hashed_and_says_so() -> None:
    decoded = event_json.decode('{"a": "\\ud800"}')  # a lone surrogate escape
    with pytest.raises(LineageError, match="lone surrogate"):
        event_json.canonical(decoded.value, native=decoded.native)


@pytest.mark.parametrize(
    "raw",
    [
        _event(),
        _event(ratio=0.25),
        {**_event(), "run": {"runId": "r1", "facets": {"airflow": {"dagRun": {"conf": {}}}}}},
    ],
)
def test_an_element_knows_the_id_its_event_will_have(tmp_path: Any, raw: dict[str, Any]) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    (element,) = read_event_elements(path)
    item = element.parse()
    assert isinstance(item.parsed, RunEvent)
    assert element.event_id() == event_id(item.parsed) == event_id(parse_event(raw))
