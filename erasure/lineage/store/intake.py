"""How events come in: each one hashed (outside the transaction) or refused with its reason,
in batches read ahead in a thread, with the cyclic garbage collector paused; what one
ingest did (`IngestReport`); an event file's signature, so an unchanged file is not read
again.
"""

from __future__ import annotations

import gc
import hashlib
import queue
import threading
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from erasure.errors import LineageError
from erasure.lineage.openlineage import (
    EventElement,
    EventItem,
    ObservedEvent,
    RunEvent,
    decoded_element,
    event_id,
    event_json,
)
from erasure.lineage.store.events import canonical_json


class IngestReport(BaseModel):
    """What one ingest did; per-event outcomes in input order (`results`)."""

    received: int = 0
    stored: int = 0
    duplicates: int = 0
    quarantined: int = 0
    runs: int = 0  # runs whose state the new events changed
    edges_opened: int = 0
    edges_closed: int = 0
    results: list[dict[str, Any]] = []  # {"event_id", "stored"} or {"error"}
    touched: list[dict[str, Any]] = []  # runs the new events changed: run_id, job, state, outputs

    def merge(self, other: IngestReport) -> None:
        for name in ("received", "stored", "duplicates", "quarantined", "runs"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.edges_opened += other.edges_opened
        self.edges_closed += other.edges_closed
        self.results.extend(other.results)
        self.touched.extend(other.touched)


@dataclass
class Incoming:
    """One event on its way in: parsed, refused (`error`), or an element not yet validated."""

    origin: str
    event: RunEvent | ObservedEvent | None  # observed: validated in a worker process
    error: str | None
    text: str
    element: EventElement | None = None
    identity: str | None = None  # its event id, once known

    def validate(self) -> None:
        """Validate a pending element (once it is known not to be stored)."""
        if self.element is None:
            return
        item, self.element = self.element.parse(), None
        self.text = item.text
        if isinstance(item.parsed, LineageError):
            self.error = str(item.parsed)
        else:
            self.event = item.parsed


def file_key(path: Path) -> str:
    return f"openlineage:{path.resolve()}"


def file_signature(path: Path) -> str:
    """Size and modification time of an event file (its content is too large to hash often)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise LineageError(f"{path}: cannot read OpenLineage events: {exc}") from exc
    text = f"{stat.st_size}:{stat.st_mtime_ns}:{file_key(path)}"
    return hashlib.sha256(text.encode()).hexdigest()


def incoming(event: RunEvent | EventItem | EventElement, origin: str) -> Incoming:
    """The event with its id (hashed here, outside the transaction) or why it has none."""
    if isinstance(event, EventElement):
        if event.error is not None:
            return Incoming(event.where, None, str(event.error), event.text)
        try:
            identity = event.event_id()
        except LineageError as exc:
            reason = f"{event.where}: {exc}" if event.located else str(exc)
            return Incoming(event.where, None, reason, event.text or canonical_json(event.value))
        return Incoming(event.where, None, None, event.text, element=event, identity=identity)
    if isinstance(event, RunEvent):
        parsed, item = event, Incoming(origin, event, None, "")
    elif isinstance(event.parsed, LineageError):
        return Incoming(event.where, None, str(event.parsed), event.text)
    else:
        parsed = event.parsed
        item = Incoming(event.where, parsed, None, event.text)
    with suppress(LineageError):  # if it cannot be hashed, event_row says why (quarantined)
        item.identity = event_id(parsed)
    return item


def incoming_batches(
    events: Iterable[RunEvent | EventItem | EventElement], origin: str, size: int
) -> Generator[list[Incoming]]:
    chunk: list[Incoming] = []
    for event in events:
        chunk.append(incoming(event, origin))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


_Batch = TypeVar("_Batch")


def read_ahead(batches: Iterator[_Batch]) -> Generator[_Batch]:
    """The batches, the next one read (decoded and hashed) in a thread while this one is
    stored: the database's time overlaps reading instead of following it. The reader's
    errors are raised here; stopping early stops it."""
    ready: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not hand_over((True, batch)):
                    return
            hand_over((False, None))
        except BaseException as exc:  # handed to the consumer, which raises it
            hand_over((False, exc))

    reader = threading.Thread(target=read, name="lineage-ingest-reader", daemon=True)
    reader.start()
    try:
        while True:
            more, value = ready.get()
            if more:
                yield value
            elif value is None:
                return
            else:
                raise value
    finally:
        stop.set()
        reader.join()


def json_items(
    elements: Iterable[tuple[event_json.Decoded, str]], origin: str, many: bool
) -> Iterator[EventElement]:
    """Decoded elements of a body, not yet validated."""
    for number, (decoded, text) in enumerate(elements):
        where = f"{origin}[{number}]" if many else origin
        yield decoded_element(where, decoded, text, located=False)


_COLLECTOR = threading.Lock()


_PAUSED = 0  # ingests running with the collector paused


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while events are decoded and stored.

    Decoding an event makes hundreds of dicts and lists; with the collector on, a full
    collection every few events walked every live object (the process, the batch being
    built, the report) and took half of ingest's time. Decoded JSON holds no cycles: a
    batch leaves about five cyclic objects (its transaction's), which wait for the collector
    to be back, once the last ingest running in the process is done. (Collecting even the
    young generations after each batch cost a tenth of a second: the batch read ahead is
    young and alive.)
    """
    global _PAUSED
    with _COLLECTOR:
        if _PAUSED == 0 and not gc.isenabled():
            paused = False  # someone else turned it off: leave it to them
        else:
            _PAUSED += 1
            paused = True
            gc.disable()
    try:
        yield
    finally:
        if paused:
            with _COLLECTOR:
                _PAUSED -= 1
                if _PAUSED == 0:
                    gc.enable()
