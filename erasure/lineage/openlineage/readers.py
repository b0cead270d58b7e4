"""Reading run events from files and bodies: a JSON array or JSON lines, each element
decoded and hashed first and validated only when it is not stored yet (`EventElement`);
a malformed element is an item with its error, never a failed file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from erasure.errors import LineageError
from erasure.lineage.openlineage import event_json
from erasure.lineage.openlineage.kept_facets import minimised
from erasure.lineage.openlineage.spec import RunEvent, parse_decoded


class _BadJson(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _array_items(text: str) -> Iterator[tuple[int, Any]]:
    """Yield (line number, element) of a JSON array, so errors can point at a line."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    count = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        line = text.count("\n", 0, pos) + 1
        if pos >= len(text):
            raise _BadJson(line, "unterminated array")
        if text[pos] == "]":
            if text[pos + 1 :].strip():
                raise _BadJson(line, "extra data after the array")
            return
        if count:
            if text[pos] != ",":
                raise _BadJson(line, "expected ',' or ']'")
            pos += 1
            while pos < len(text) and text[pos].isspace():
                pos += 1
            line = text.count("\n", 0, pos) + 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise _BadJson(exc.lineno, exc.msg) from exc
        except RecursionError:
            raise _BadJson(line, event_json.too_deep()) from None
        count += 1
        yield line, item


def _json_lines(text: str) -> Iterator[tuple[int, Any]]:
    """(line, element); a line that is not JSON yields a _BadLine and the next lines go on."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield decoded_line(number, line)


@dataclass(frozen=True, slots=True)
class _Decoded:
    """A line's JSON value with the line itself: stored as received, not re-serialised."""

    decoded: event_json.Decoded
    text: str


@dataclass(frozen=True, slots=True)
class _BadLine:
    message: str
    text: str


def _file_items(text: str) -> Iterator[tuple[int, Any]]:
    body = text.lstrip()
    if not body:
        return iter(())
    if body.startswith("["):
        return _array_items(text)
    try:
        if not event_json.within_depth(text):
            raise LineageError(event_json.too_deep())
        single = json.loads(text)  # one (possibly pretty-printed) event
    except (json.JSONDecodeError, LineageError):
        return _json_lines(text)  # the usual case: one event per line (each line judged)
    return iter([(text.count("\n", 0, len(text) - len(body)) + 1, single)])


def read_event_file(path: Path) -> list[RunEvent]:
    """Read a JSON-lines file (blank lines ok), a JSON array file or a single-event file."""
    events: list[RunEvent] = []
    for item in read_event_items(path):
        if isinstance(item.parsed, LineageError):
            raise item.parsed
        events.append(item.parsed)
    return events


@dataclass(frozen=True, slots=True)
class EventItem:
    """One element of an event file: the event, or why it is not one (with its text)."""

    where: str  # "<path>:<line>"
    parsed: RunEvent | LineageError
    text: str  # the element's JSON text as read, when the file gave it (else "")


@dataclass(frozen=True, slots=True)
class EventElement:
    """One element of an event file or request body, decoded but not yet validated: its
    JSON value less the facets `minimised` drops (or why it is not JSON), and its text.

    Its content hash is known before validation, so ingest looks the hash up first and
    validates only what the store does not hold yet.
    """

    where: str  # "<path>:<line>", "http[3]"
    value: Any  # the minimised JSON value; None when `error` says the text is not JSON
    text: str  # the element's text as read, when it is the value's (else "")
    native: bool = False  # decoded by msgspec, no float (event_json.Decoded)
    error: LineageError | None = None
    located: bool = True  # errors start with `where` (a file's line); a body's are answered

    def event_id(self) -> str:
        """`event_id` of the event this element parses to; LineageError if not hashable."""
        if self.error is not None:
            raise self.error
        canonical = event_json.canonical(self.value, native=self.native)
        return "sha256:" + hashlib.sha256(canonical).hexdigest()

    def parse(self) -> EventItem:
        """The element validated: the event, or why it is not one (with its text)."""
        if self.error is not None:
            return EventItem(self.where, self.error, self.text)
        try:
            event: RunEvent | LineageError = parse_decoded(
                self.value, native=self.native, kept=True
            )
        except LineageError as exc:
            error = LineageError(f"{self.where}: {exc}") if self.located else exc
            return EventItem(self.where, error, self.text or _text(self.value))
        return EventItem(self.where, event, self.text)


def decoded_element(
    where: str, decoded: event_json.Decoded, text: str, *, located: bool = True
) -> EventElement:
    """An element from its decoded value; its text is never kept (what is stored is the value
    encoded again): text holding a key twice decodes to the last value, so a facet given
    first and then again as `{}` would be stored with its free text although `minimised`
    found nothing to drop."""
    if decoded.too_deep:
        reason = event_json.too_deep()
        error = LineageError(f"{where}: {reason}" if located else reason)
        return EventElement(where, None, text, error=error, located=located)
    return EventElement(where, minimised(decoded.value), "", decoded.native, located=located)


def read_event_items(path: Path) -> Iterator[EventItem]:
    """Every element of an event file, malformed ones included, so ingest can quarantine them.

    A file that is not JSON at all from some point on yields one error item for the rest.
    """
    for item in read_event_elements(path):
        yield item.parse()


def read_event_elements(path: Path) -> Iterator[EventElement]:
    """`read_event_items` before validation (see EventElement)."""
    lines = event_lines(path)
    if lines is not None:
        # JSON lines, read a line at a time: a year's file need not fit in memory.
        yield from decoded_elements(path, (decoded_line(n, line) for n, line in lines))
        return
    try:
        with path.open(encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise LineageError(f"{path}: cannot read OpenLineage events: {exc}") from exc
    yield from decoded_elements(path, _file_items(text))


def event_lines(path: Path) -> Generator[tuple[int, str]] | None:
    """The numbered, non-blank lines of a JSON-lines event file, read as they are consumed;
    None when the file has another shape (an array, one pretty-printed event)."""
    try:
        handle = path.open(encoding="utf-8")
        try:
            head = handle.read(4096)
        except BaseException:
            handle.close()
            raise
    except (OSError, UnicodeDecodeError) as exc:
        raise LineageError(f"{path}: cannot read OpenLineage events: {exc}") from exc
    if head.lstrip().startswith("[") or not _lines_shaped(head):
        handle.close()
        return None
    return _numbered_lines(path, head, handle)


def _lines_shaped(head: str) -> bool:
    """Whether a file starting with `head` reads as JSON lines: its first line is a whole JSON
    value (a pretty-printed single event is read whole instead)."""
    first_end = head.find("\n")
    first = head if first_end < 0 else head[:first_end]
    if first.strip() and first_end >= 0:
        try:
            json.loads(first)
        except json.JSONDecodeError:
            return False
        except RecursionError:
            return True  # a line of its own, refused as too deep when it is read
    elif first.strip():
        return False  # one line, no newline within the first 4 KiB: read it whole
    return True


def _numbered_lines(path: Path, head: str, handle: Any) -> Generator[tuple[int, str]]:
    try:
        # The head completed to the end of the line it stops in, then the file's own line
        # iteration (C speed; the text layer has turned every line ending into "\n").
        start = (head + handle.readline()).split("\n")
        if start[-1] == "":
            start.pop()  # it ended with a line
        for number, line in enumerate(itertools.chain(start, handle), start=1):
            if line.endswith("\n"):
                line = line[:-1]
            if line.strip():
                yield number, line
    except (OSError, UnicodeDecodeError) as exc:
        raise LineageError(f"{path}: cannot read OpenLineage events: {exc}") from exc
    finally:
        handle.close()


def decoded_line(number: int, line: str) -> tuple[int, _Decoded | _BadLine]:
    """One line of a JSON-lines file, decoded (or why it is not JSON), for `decoded_elements`."""
    try:
        return number, _Decoded(event_json.decode(line), line)
    except json.JSONDecodeError as exc:
        return number, _BadLine(exc.msg, line)
    except LineageError as exc:  # nested too deep
        return number, _BadLine(str(exc), line)


def decoded_elements(path: Path, items: Iterator[tuple[int, Any]]) -> Iterator[EventElement]:
    """The elements of a file from its decoded lines (`decoded_line`) or array items."""
    try:
        for line, data in items:
            where = f"{path}:{line}"
            if isinstance(data, _BadLine):
                error = LineageError(f"{where}: not valid JSON: {data.message}")
                yield EventElement(where, None, data.text, error=error)
            elif isinstance(data, _Decoded):
                yield decoded_element(where, data.decoded, data.text)
            elif event_json.depth_exceeds(data, event_json.MAX_DEPTH):
                error = LineageError(f"{where}: {event_json.too_deep()}")
                yield EventElement(where, None, "", error=error)
            else:  # an element of a JSON array file
                yield decoded_element(where, event_json.Decoded(data, False), "")
    except _BadJson as exc:
        where = f"{path}:{exc.line}"
        error = LineageError(f"{where}: not valid JSON: {exc.message}")
        yield EventElement(where, None, "", error=error)


def _text(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)
