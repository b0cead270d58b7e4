"""Observed lineage: OpenLineage run events turned into column-level edges.

A run publishes lineage only through its terminal COMPLETE event; START, RUNNING and OTHER
events add facets to the same run (merged per run id), and FAIL/ABORT runs are kept as
evidence without edges. Both shapes of the ColumnLineageDatasetFacet are read: per-field
`fields` and the dataset-wide `dataset` array (spec facet 1-2-0).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from erasure.errors import LineageError, invalid_fields
from erasure.lineage.openlineage import event_json
from erasure.model import (
    DatasetRef,
    EdgeOrigin,
    EdgeSubtype,
    EdgeType,
    FieldRef,
    Gap,
    GapKind,
    LineageEdge,
)

__all__ = [
    "EventDataset",
    "EventElement",
    "EventItem",
    "EventJob",
    "EventRun",
    "ObservedLineage",
    "OutputLineage",
    "RunEvent",
    "RunLineage",
    "RunState",
    "RunSummary",
    "decoded_element",
    "edges_from_events",
    "event_id",
    "event_text",
    "link_edge",
    "minimised",
    "parse_decoded",
    "parse_event",
    "read_event_elements",
    "read_event_file",
    "read_event_items",
    "run_lineage",
    "runs_from_events",
    "timeline",
    "timeline_edges",
]


class RunState(StrEnum):
    """The run-cycle transitions the spec defines for `eventType`."""

    START = "START"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    ABORT = "ABORT"
    FAIL = "FAIL"
    OTHER = "OTHER"


TERMINAL_STATES = frozenset({RunState.COMPLETE, RunState.ABORT, RunState.FAIL})
_OWNED = "owned"  # validation context: the input dict was made for this event alone

# The run and job facets an event keeps. Producers put whatever they know about a run into
# these facets: Airflow's `airflow` run facet carries the DAG run's conf and note, and an
# `errorMessage` can quote a database driver's bound parameters. None of that is lineage and
# some of it may be personal data, so it is dropped before the event is hashed or stored.
# Kept: what identifies and links runs, and what describes the job. Dataset facets (schema,
# column lineage) are lineage and are kept whole.
KEPT_RUN_FACETS = frozenset({"parent", "nominalTime", "processing_engine"})
KEPT_JOB_FACETS = frozenset({"sql", "jobType", "documentation", "sourceCodeLocation"})


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


# Identity fields: present and non-blank, or the event cannot be attributed.
_Name = Annotated[str, AfterValidator(_not_blank)]


class EventRun(BaseModel):
    """`run`: the run id and its facets."""

    model_config = ConfigDict(extra="allow")

    run_id: _Name = Field(alias="runId")
    facets: dict[str, Any] = Field(default_factory=dict)


class EventJob(BaseModel):
    """`job`: namespace + name identify the producer."""

    model_config = ConfigDict(extra="allow")

    namespace: _Name
    name: _Name
    facets: dict[str, Any] = Field(default_factory=dict)


class EventDataset(BaseModel):
    """An entry of `inputs` or `outputs`; facets are kept as free-form JSON."""

    model_config = ConfigDict(extra="allow")

    namespace: _Name
    name: _Name
    facets: dict[str, Any] = Field(default_factory=dict)

    @property
    def ref(self) -> DatasetRef:
        return DatasetRef(self.namespace, self.name.lower())


class RunEvent(BaseModel):
    """An OpenLineage RunEvent: the parts lineage needs, every other field kept as sent
    (except the run and job facets `minimised` drops)."""

    model_config = ConfigDict(extra="allow")  # wire names only: the raw event is the evidence

    event_type: RunState | None = Field(default=None, alias="eventType")
    event_time: AwareDatetime = Field(alias="eventTime")
    run: EventRun
    job: EventJob
    inputs: list[EventDataset] = Field(default_factory=list)
    outputs: list[EventDataset] = Field(default_factory=list)
    producer: str | None = None
    schema_url: str | None = Field(default=None, alias="schemaURL")

    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)
    _native: bool = PrivateAttr(default=False)  # _raw holds JSON types only (event_json)

    @field_validator("event_type", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("inputs", "outputs", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="wrap")
    @classmethod
    def _keep_raw(
        cls, data: Any, handler: ModelWrapValidatorHandler[RunEvent], info: ValidationInfo
    ) -> RunEvent:
        event = handler(data)
        if isinstance(data, Mapping):
            # Parsed from JSON text, the dict is ours alone: copying 30,000 events per plan
            # cost more than validating them.
            owned = bool(info.context and info.context.get(_OWNED))
            event._raw = dict(data) if owned else copy.deepcopy(dict(data))
        return event

    @property
    def raw(self) -> dict[str, Any]:
        """The event exactly as received (a copy): what evidence stores."""
        return copy.deepcopy(self._content())

    def content(self) -> dict[str, Any]:
        """The event as received, not copied: read it, never change it."""
        return self._content()

    def _content(self) -> dict[str, Any]:
        # model_construct skips validators, so nothing was captured: use the fields set.
        return self._raw or self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# --- column lineage facet (spec facets/1-2-0/ColumnLineageDatasetFacet.json) -----------------


class _Transformation(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    subtype: str | None = None
    description: str | None = None
    masking: bool | None = None


class _InputField(BaseModel):
    model_config = ConfigDict(extra="allow")

    namespace: str
    name: str
    field: str
    transformations: list[_Transformation] | None = None

    @property
    def ref(self) -> FieldRef:
        return FieldRef(DatasetRef(self.namespace, self.name.lower()), self.field)


class _FieldLineage(BaseModel):
    model_config = ConfigDict(extra="allow")

    inputFields: list[_InputField]  # spec spelling
    transformationType: str | None = None  # legacy (facet 1-0-x)
    transformationDescription: str | None = None  # legacy (facet 1-0-x)


class _ColumnLineageFacet(BaseModel):
    model_config = ConfigDict(extra="allow")

    fields: dict[str, _FieldLineage] = Field(default_factory=dict)
    dataset: list[_InputField] = Field(default_factory=list)

    @field_validator("fields", mode="before")
    @classmethod
    def _null_fields(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("dataset", mode="before")
    @classmethod
    def _null_dataset(cls, value: Any) -> Any:
        return [] if value is None else value


class _SchemaField(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class _SchemaFacet(BaseModel):
    model_config = ConfigDict(extra="allow")

    fields: list[_SchemaField] = Field(default_factory=list)


# --- parsing --------------------------------------------------------------------------------


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<event>"


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{_loc(p.loc)}: {p.message}" for p in invalid_fields(exc))


def parse_event(raw: Mapping[str, Any] | str | bytes) -> RunEvent:
    """Validate one OpenLineage RunEvent; LineageError names the offending field."""
    if isinstance(raw, str | bytes):
        try:
            decoded = event_json.decode(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LineageError(event_json.not_json(exc)) from exc
        return parse_decoded(decoded.value, native=decoded.native)
    return _validate(raw, owned=False)


def parse_decoded(data: Any, *, native: bool = False) -> RunEvent:
    """Validate one event just decoded from JSON text (the caller keeps no reference to it);
    `native` when msgspec decoded it (`event_json.Decoded`), so it is hashed the fast way."""
    event = _validate(data, owned=True)
    event._native = native
    return event


def minimised(data: Any) -> Any:
    """`data` without the run and job facets lineage does not keep (see KEPT_RUN_FACETS);
    `data` itself when it has none to drop. The caller's objects are never changed."""
    if not isinstance(data, Mapping):
        return data
    parts: dict[str, Any] = {}
    for part, kept in (("run", KEPT_RUN_FACETS), ("job", KEPT_JOB_FACETS)):
        value = data.get(part)
        if not isinstance(value, Mapping):
            continue
        facets = value.get("facets")
        if isinstance(facets, Mapping) and not kept.issuperset(facets):
            trimmed = {name: facet for name, facet in facets.items() if name in kept}
            rest = {key: item for key, item in value.items() if key != "facets"}
            parts[part] = {**rest, "facets": trimmed} if trimmed else rest
    return {**data, **parts} if parts else data


def _validate(data: Any, *, owned: bool) -> RunEvent:
    if not isinstance(data, Mapping):
        raise LineageError(f"OpenLineage event must be a JSON object, got {type(data).__name__}")
    data = minimised(data)
    if owned and isinstance(data, dict):
        fast = _well_formed(data)
        if fast is not None:
            return fast
    try:
        return RunEvent.model_validate(
            data if owned and isinstance(data, dict) else dict(data), context={_OWNED: owned}
        )
    except ValidationError as exc:
        raise LineageError(f"malformed OpenLineage RunEvent: {_describe(exc)}") from exc


_STATES = {state.value: state for state in RunState}


def _well_formed(data: dict[str, Any]) -> RunEvent | None:
    """The event built without the validators when it is plainly well formed (the usual
    case at ingest rates), else None and the models validate it and describe what is wrong.

    Checks exactly what the models check: identity fields present and not blank, an aware
    eventTime, a known eventType, dataset lists of objects, facets as objects; other keys
    are kept as the models keep them.
    """
    kind, when, run, job = (data.get(k) for k in ("eventType", "eventTime", "run", "job"))
    if kind is not None:
        kind = _STATES.get(kind.upper()) if isinstance(kind, str) else None
        if kind is None:
            return None
    if not isinstance(when, str) or not isinstance(run, dict) or not isinstance(job, dict):
        return None
    try:
        event_time = datetime.fromisoformat(when)
    except ValueError:
        return None
    if event_time.tzinfo is None:
        return None
    for key in ("producer", "schemaURL"):
        if not isinstance(data.get(key, ""), str):
            return None
    event_run = _part(EventRun, run, {"runId": "run_id"})
    event_job = _part(EventJob, job, {"namespace": "namespace", "name": "name"})
    inputs, outputs = _datasets(data.get("inputs")), _datasets(data.get("outputs"))
    extra = _extra(data, _EVENT_KEYS, RunEvent)
    if event_run is None or event_job is None or inputs is None or outputs is None:
        return None
    if extra is None:
        return None
    values = {
        "event_type": kind,
        "event_time": event_time,
        "run": event_run,
        "job": event_job,
        "inputs": inputs,
        "outputs": outputs,
        "producer": data.get("producer"),
        "schema_url": data.get("schemaURL"),
    }
    return _constructed(RunEvent, values, extra, {"_raw": data, "_native": False})


_EVENT_KEYS = frozenset(
    {"eventType", "eventTime", "run", "job", "inputs", "outputs", "producer", "schemaURL"}
)
_Part = TypeVar("_Part", EventRun, EventJob, EventDataset)
_Model = TypeVar("_Model", bound=BaseModel)


def _part(model: type[_Part], raw: dict[str, Any], names: dict[str, str]) -> _Part | None:
    """A run, job or dataset object whose `names` (wire key -> field) are filled strings."""
    values: dict[str, Any] = {}
    for key, field_name in names.items():
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            return None
        values[field_name] = value
    facets = raw.get("facets", {})
    if not isinstance(facets, dict):
        return None
    values["facets"] = facets
    if len(raw) == len(values) or (len(raw) == len(names) and "facets" not in raw):
        return _constructed(model, values, {})  # every key is a field's (the usual case)
    extra = _extra(raw, {*names, "facets"}, model)
    return None if extra is None else _constructed(model, values, extra)


_set_attribute = object.__setattr__


def _constructed(
    model: type[_Model],
    values: dict[str, Any],
    extra: dict[str, Any],
    private: dict[str, Any] | None = None,
) -> _Model:
    """`model.model_construct(**values, **extra)` (private attributes set after) when
    `values` name every field: what model_construct sets, without its loop over fields and
    aliases, which took a third of ingest's parsing. Pinned to model_construct by a test."""
    built = model.__new__(model)
    _set_attribute(built, "__dict__", values)
    _set_attribute(built, "__pydantic_fields_set__", set(values))
    _set_attribute(built, "__pydantic_extra__", extra)
    _set_attribute(built, "__pydantic_private__", private)
    return built


def _extra(
    raw: dict[str, Any], known: Iterable[str], model: type[BaseModel]
) -> dict[str, Any] | None:
    """Keys the model keeps as extras; None when one would shadow a field (let it validate)."""
    extra = {k: v for k, v in raw.items() if k not in known}
    if any(k in model.__pydantic_fields__ for k in extra):
        return None
    return extra


def _datasets(value: Any) -> list[EventDataset] | None:
    if value is None:
        return []
    if not isinstance(value, list):
        return None
    out = []
    for entry in value:
        if not isinstance(entry, dict):
            return None
        dataset = _part(EventDataset, entry, {"namespace": "namespace", "name": "name"})
        if dataset is None:
            return None
        out.append(dataset)
    return out


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
        single = json.loads(text)  # one (possibly pretty-printed) event
    except json.JSONDecodeError:
        return _json_lines(text)  # the usual case: one event per line
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
            event: RunEvent | LineageError = parse_decoded(self.value, native=self.native)
        except LineageError as exc:
            error = LineageError(f"{self.where}: {exc}") if self.located else exc
            return EventItem(self.where, error, self.text or _text(self.value))
        return EventItem(self.where, event, self.text)


def decoded_element(
    where: str, decoded: event_json.Decoded, text: str, *, located: bool = True
) -> EventElement:
    """An element from its decoded value and text; the text is kept only if it is the value's."""
    value = minimised(decoded.value)
    if value is not decoded.value:
        text = ""  # the text holds facets that are not kept
    return EventElement(where, value, text, decoded.native, located=located)


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
            else:  # an element of a JSON array file
                yield decoded_element(where, event_json.Decoded(data, False), "")
    except _BadJson as exc:
        where = f"{path}:{exc.line}"
        error = LineageError(f"{where}: not valid JSON: {exc.message}")
        yield EventElement(where, None, "", error=error)


def _text(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


def event_id(event: RunEvent) -> str:
    """Stable content hash of the raw event (key order and whitespace do not matter);
    LineageError when its text cannot be hashed (not valid Unicode)."""
    canonical = event_json.canonical(event._content(), native=event._native and bool(event._raw))
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def event_text(event: RunEvent) -> str:
    """The event as compact JSON in its own key order: reads back to the same event and id."""
    return event_json.compact(event._content(), native=event._native and bool(event._raw))


# --- runs and edges -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as evidence: its state, when, and what it read and wrote."""

    run_id: str
    job: str  # "<job namespace>/<job name>"
    state: str  # terminal state if any, else the latest event type
    event_time: datetime
    inputs: tuple[DatasetRef, ...]
    outputs: tuple[DatasetRef, ...]
    event_ids: tuple[str, ...] = ()


@dataclass
class ObservedLineage:
    """Edges published by completed runs, the gaps they leave, and every run seen."""

    edges: list[LineageEdge] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ObservedEvent:
    """What projection reads of one validated event (`observed`).

    Output facets may be msgspec.Raw, their text as msgspec encodes it (`transferable`): a
    worker process hands an event over as a few strings and bytes, and links are decoded
    from them only when a run's facets changed.
    """

    producer: str  # "<job namespace>/<job name>"
    run_id: str
    event_type: RunState | None
    event_time: datetime
    inputs: tuple[DatasetRef, ...]
    outputs: tuple[tuple[DatasetRef, Mapping[str, Any]], ...]  # dataset, its facets
    native: bool  # decoded by msgspec, no float (event_json.Decoded)

    def __reduce__(self) -> tuple[type[ObservedEvent], tuple[Any, ...]]:
        # A frozen dataclass unpickles field by field through setattr: this is its __init__.
        return ObservedEvent, (
            self.producer, self.run_id, self.event_type, self.event_time, self.inputs,
            self.outputs, self.native,
        )  # fmt: skip


# The output facets links are read from (`_output_lineage`, `OutputLineage.facet_digest`).
_LINK_FACETS = ("columnLineage", "schema")


def observed(event: RunEvent | ObservedEvent) -> ObservedEvent:
    """The parts of `event` projection reads (nothing is copied)."""
    if isinstance(event, ObservedEvent):
        return event
    return _observed(event, [(entry.ref, entry.facets) for entry in event.outputs])


def transferable(event: RunEvent) -> ObservedEvent:
    """`observed(event)` less the output facets links are not read from, those encoded once
    (when native) so the event pickles as text: cheap to send from a worker process."""
    outputs = []
    for entry in event.outputs:
        facets = {name: entry.facets[name] for name in _LINK_FACETS if name in entry.facets}
        if event._native:
            facets = {name: event_json.raw(value) for name, value in facets.items()}
        outputs.append((entry.ref, facets))
    return _observed(event, outputs)


def _observed(
    event: RunEvent, outputs: Sequence[tuple[DatasetRef, Mapping[str, Any]]]
) -> ObservedEvent:
    return ObservedEvent(
        f"{event.job.namespace}/{event.job.name}",
        event.run.run_id,
        event.event_type,
        event.event_time,
        tuple(entry.ref for entry in event.inputs),
        tuple(outputs),
        event._native,
    )


@dataclass
class _MergedRun:
    producer: str
    run_id: str
    inputs: dict[DatasetRef, None]  # in first-seen order
    outputs: dict[DatasetRef, dict[str, Any]]  # dataset -> merged facets
    terminal: ObservedEvent | None
    latest: ObservedEvent


def _merge_run(events: list[ObservedEvent]) -> _MergedRun:
    ordered = sorted(events, key=lambda e: e.event_time)  # stable: arrival order breaks ties
    inputs: dict[DatasetRef, None] = {}
    outputs: dict[DatasetRef, dict[str, Any]] = {}
    terminal: ObservedEvent | None = None
    for event in ordered:
        inputs.update(dict.fromkeys(event.inputs))
        for ref, facets in event.outputs:
            # Later events win per facet name, as Marquez merges facets of a run.
            outputs.setdefault(ref, {}).update(facets)
        if event.event_type in TERMINAL_STATES:
            terminal = event
    last = ordered[-1]
    return _MergedRun(last.producer, last.run_id, inputs, outputs, terminal, last)


def _classify(transformation: _Transformation) -> tuple[EdgeType, EdgeSubtype]:
    kind = transformation.type.strip().upper()
    # An unknown type counts as DIRECT: over-stating a disclosure is the safe error here.
    edge_type = EdgeType.INDIRECT if kind == EdgeType.INDIRECT else EdgeType.DIRECT
    subtype_text = (transformation.subtype or "").strip().upper()
    try:
        subtype = EdgeSubtype(subtype_text)
    except ValueError:
        subtype = EdgeSubtype.UNKNOWN
    return edge_type, subtype


def _legacy_classify(lineage: _FieldLineage) -> tuple[EdgeType, EdgeSubtype]:
    """No `transformations`: DIRECT (safe), subtype only as far as the legacy fields say."""
    return _legacy_kind(lineage.transformationType, lineage.transformationDescription)


def _legacy_kind(kind: str | None, description: str | None) -> tuple[EdgeType, EdgeSubtype]:
    legacy = (kind or "").strip().upper()
    if legacy == "IDENTITY":
        return EdgeType.DIRECT, EdgeSubtype.IDENTITY
    if legacy or (description or "").strip():
        return EdgeType.DIRECT, EdgeSubtype.TRANSFORMATION  # MASKED and free text included
    return EdgeType.DIRECT, EdgeSubtype.UNKNOWN


def _output_columns(facets: Mapping[str, Any], column_facet: _ColumnLineageFacet) -> list[str]:
    columns = list(column_facet.fields)
    try:
        schema = _SchemaFacet.model_validate(facets.get("schema") or {})
    except ValidationError:
        schema = _SchemaFacet()
    columns += [f.name for f in schema.fields if f.name not in column_facet.fields]
    return columns


_Link = tuple[FieldRef, FieldRef, EdgeType, EdgeSubtype]


def _column_links(
    output: DatasetRef, facets: Mapping[str, Any], facet: _ColumnLineageFacet
) -> list[_Link]:
    """(source, target, type, subtype) for every transformation the facet lists."""
    links: list[_Link] = []
    for column, lineage in facet.fields.items():
        target = FieldRef(output, column)
        for source in lineage.inputFields:
            kinds = [_classify(t) for t in source.transformations or []]
            links += [(source.ref, target, *kind) for kind in kinds or [_legacy_classify(lineage)]]

    # Dataset-wide lineage (filter, join, group by...) reaches every column of the output.
    targets = [FieldRef(output, c) for c in _output_columns(facets, facet)]
    for source in facet.dataset:
        # The `dataset` array exists for whole-dataset influence: INDIRECT unless it says so.
        kinds = [_classify(t) for t in source.transformations or []]
        for target in targets or [FieldRef(output, None)]:
            links += [
                (source.ref, target, *kind)
                for kind in kinds or [(EdgeType.INDIRECT, EdgeSubtype.UNKNOWN)]
            ]
    return links


_SUBTYPE_NAMES = {subtype.value: subtype for subtype in EdgeSubtype}


def _fields_links(output: DatasetRef, raw: Any) -> list[_Link] | None:
    """`_column_links` for the common shape (only `fields`, well formed) read as plain JSON;
    None for anything else, which the validated models then read (and describe if broken).

    Column facets carry most of an event's bytes: validating each input field as a model
    cost more than everything else ingest does.
    """
    if not isinstance(raw, dict) or raw.get("dataset"):
        return None
    fields = raw.get("fields")
    if fields is None:
        return []
    if not isinstance(fields, dict):
        return None
    refs: dict[tuple[str, str], DatasetRef] = {}
    links: list[_Link] = []
    for column, lineage in fields.items():
        if not isinstance(lineage, dict):
            return None
        inputs = lineage.get("inputFields")
        if not isinstance(inputs, list):
            return None
        target = FieldRef(output, column)
        for source in inputs:
            if not isinstance(source, dict):
                return None
            namespace, name, column_name = (
                source.get("namespace"),
                source.get("name"),
                source.get("field"),
            )
            if not (
                isinstance(namespace, str)
                and isinstance(name, str)
                and isinstance(column_name, str)
            ):
                return None
            ref = refs.get((namespace, name))
            if ref is None:
                ref = refs[(namespace, name)] = DatasetRef(namespace, name.lower())
            field_ref = FieldRef(ref, column_name)
            transformations = source.get("transformations")
            if not transformations:
                if transformations is not None and not isinstance(transformations, list):
                    return None
                legacy = lineage.get("transformationType"), lineage.get("transformationDescription")
                if any(v is not None and not isinstance(v, str) for v in legacy):
                    return None
                links.append((field_ref, target, *_legacy_kind(*legacy)))
                continue
            if not isinstance(transformations, list):
                return None
            for transformation in transformations:
                if not isinstance(transformation, dict):
                    return None
                kind, subtype = transformation.get("type"), transformation.get("subtype")
                if not isinstance(kind, str) or not (subtype is None or isinstance(subtype, str)):
                    return None
                edge_type = (
                    EdgeType.INDIRECT
                    if kind.strip().upper() == EdgeType.INDIRECT
                    else EdgeType.DIRECT
                )
                found = _SUBTYPE_NAMES.get((subtype or "").strip().upper(), EdgeSubtype.UNKNOWN)
                links.append((field_ref, target, edge_type, found))
    return links


class OutputLineage:
    """What one completed run says about one of its outputs: links, or a gap without columns.

    Read lazily: a run that repeats its job's facets is recognised by `facet_digest` alone,
    and its links are never built.
    """

    __slots__ = ("_facets", "_inputs", "_native", "_producer", "_read_links", "output")

    def __init__(
        self,
        output: DatasetRef,
        facets: Mapping[str, Any],
        inputs: Sequence[DatasetRef],
        producer: str,
        *,
        native: bool = False,
    ) -> None:
        self.output = output
        self._facets = facets  # values may be msgspec.Raw (`transferable`)
        self._inputs = inputs
        self._producer = producer
        self._native = native  # the facets were decoded by msgspec (event_json)
        self._read_links: tuple[tuple[_Link, ...], Gap | None] | None = None

    @property
    def links(self) -> tuple[_Link, ...]:
        """Distinct links, in facet order."""
        return self._read()[0]

    @property
    def gap(self) -> Gap | None:
        return self._read()[1]

    def facet_digest(self) -> str:
        """Digest of everything the links are read from: equal digests, equal links."""
        columns, schema = self._facets.get("columnLineage"), self._facets.get("schema")
        if not self._native:  # the standard library spells them: msgspec.Raw decoded first
            columns, schema = event_json.unraw(columns), event_json.unraw(schema)
        basis = [columns, schema, [ref.qualified for ref in self._inputs], self._producer]
        # Key order as sent: a producer repeats its own order, and a digest that differs only
        # by order makes the links be read and compared, never a wrong answer.
        return hashlib.sha256(event_json.digest_text(basis, native=self._native)).hexdigest()

    def _read(self) -> tuple[tuple[_Link, ...], Gap | None]:
        if self._read_links is None:
            facets = {name: event_json.unraw(value) for name, value in self._facets.items()}
            self._read_links = _output_lineage(self._producer, self.output, facets, self._inputs)
        return self._read_links


@dataclass(frozen=True, slots=True)
class RunLineage:
    """One run: its summary as evidence and, when it completed, the lineage it published."""

    summary: RunSummary
    producer: str  # "<job namespace>/<job name>"
    completed_at: datetime | None  # the COMPLETE event's time; None: no edges (FAIL, ABORT, open)
    outputs: tuple[OutputLineage, ...] = ()


def _output_lineage(
    producer: str, output: DatasetRef, facets: Mapping[str, Any], inputs: Sequence[DatasetRef]
) -> tuple[tuple[_Link, ...], Gap | None]:
    """Links into one output of a completed run; table-level links and a gap without columns."""
    gap: Gap | None = None
    problem = "carries no columnLineage facet"
    facet: _ColumnLineageFacet | None = None
    fast: list[_Link] | None = None
    if facets.get("columnLineage") is not None:
        fast = _fields_links(output, facets["columnLineage"])
        if fast is None:
            try:
                facet = _ColumnLineageFacet.model_validate(facets["columnLineage"])
            except ValidationError as exc:
                problem = f"has an unreadable columnLineage facet ({_describe(exc)})"

    if fast is not None:
        links = fast
    elif facet is not None:
        links = _column_links(output, facets, facet)
    else:
        table = FieldRef(output, None)
        links = [(FieldRef(s, None), table, EdgeType.DIRECT, EdgeSubtype.UNKNOWN) for s in inputs]
        gap = Gap(
            kind=GapKind.TABLE_ONLY_LINEAGE,
            detail=f"job {producer} wrote {output.qualified} but {problem}; "
            "only table-level lineage is known",
            dataset=output,
        )
    return tuple(dict.fromkeys(links)), gap


def run_lineage(
    events: Sequence[RunEvent | ObservedEvent], event_ids: Sequence[str] = ()
) -> RunLineage:
    """Merge the events of one run (same job and run id) into its summary and lineage."""
    parts = [observed(e) for e in events]
    run = _merge_run(parts)
    state_event = run.terminal or run.latest
    state = state_event.event_type.value if state_event.event_type else RunState.OTHER.value
    summary = RunSummary(
        run_id=run.run_id,
        job=run.producer,
        state=state,
        event_time=state_event.event_time,
        inputs=tuple(run.inputs),
        outputs=tuple(run.outputs),
        event_ids=tuple(event_ids),
    )
    if run.terminal is None or run.terminal.event_type is not RunState.COMPLETE:
        # FAIL/ABORT outputs were not (reliably) written; START alone says nothing
        return RunLineage(summary, run.producer, None)
    inputs = tuple(run.inputs)
    native = all(e.native for e in parts)
    outputs = tuple(
        OutputLineage(o, facets, inputs, run.producer, native=native)
        for o, facets in run.outputs.items()
    )
    return RunLineage(summary, run.producer, run.terminal.event_time, outputs)


def runs_from_events(events: Iterable[RunEvent]) -> list[RunLineage]:
    """Group events by run (duplicates ignored) and merge each run, in first-seen order."""
    seen: set[str] = set()
    by_run: dict[tuple[str, str, str], list[RunEvent]] = {}
    ids: dict[tuple[str, str, str], list[str]] = {}
    for event in events:
        identity = event_id(event)
        if identity in seen:
            continue
        seen.add(identity)
        key = (event.job.namespace, event.job.name, event.run.run_id)
        by_run.setdefault(key, []).append(event)
        ids.setdefault(key, []).append(identity)
    return [run_lineage(run_events, ids[key]) for key, run_events in by_run.items()]


def link_edge(
    producer: str,
    run_id: str,
    link: _Link,
    valid_from: datetime | None,
    valid_to: datetime | None,
) -> LineageEdge:
    """The observed edge for one link, valid over [valid_from, valid_to)."""
    source, target, kind, subtype = link
    return LineageEdge(
        source=source,
        target=target,
        type=kind,
        subtype=subtype,
        origin=EdgeOrigin.OBSERVED,
        producer=producer,
        run_id=run_id,
        run_state=RunState.COMPLETE.value,
        valid_from=valid_from,
        valid_to=valid_to,
        observed_at=valid_from,
    )


def edges_from_events(events: Iterable[RunEvent]) -> ObservedLineage:
    """Merge events per run and publish the edges of completed runs (duplicates ignored).

    Each completed run's edges as it published them (observed_at = its COMPLETE), with no
    validity interval; `timeline_edges` gives the point-in-time view.
    """
    result = ObservedLineage()
    edges: dict[LineageEdge, None] = {}
    gaps: dict[Gap, None] = {}
    for run in runs_from_events(events):
        result.runs.append(run.summary)
        for output in run.outputs:
            for source, target, kind, subtype in output.links:
                edge = LineageEdge(
                    source=source,
                    target=target,
                    type=kind,
                    subtype=subtype,
                    origin=EdgeOrigin.OBSERVED,
                    producer=run.producer,
                    run_id=run.summary.run_id,
                    run_state=RunState.COMPLETE.value,
                    observed_at=run.completed_at,
                )
                edges[edge] = None
            if output.gap is not None:
                gaps[output.gap] = None
    result.edges = list(edges)
    result.gaps = list(gaps)
    return result


def link_key(link: _Link) -> tuple[str, str, str, str, str, str, str, str]:
    """A total order on links (a table-level end has no column: it sorts first)."""
    source, target, kind, subtype = link
    return (
        source.dataset.namespace, source.dataset.name, source.column or "",
        target.dataset.namespace, target.dataset.name, target.column or "",
        kind.value, subtype.value,
    )  # fmt: skip


Publication = tuple[datetime, str, frozenset[_Link]]  # (completed at, run id, links)


def timeline(
    publications: Iterable[Publication],
) -> list[tuple[frozenset[_Link], str, datetime, datetime | None]]:
    """Validity intervals of one producer's edge sets into one output.

    Each completed run supersedes the producer's previous edges into that output: runs in a
    row that publish the same set extend one interval (no new edges); a run that publishes
    another set ends the previous one at its time (valid_to) and opens its own. Returns
    (links, opening run id, valid_from, valid_to or None while current).
    """
    ordered = sorted(publications, key=lambda p: (p[0], p[1]))
    out: list[tuple[frozenset[_Link], str, datetime, datetime | None]] = []
    current: tuple[frozenset[_Link], str, datetime] | None = None
    for completed_at, run_id, links in ordered:
        if current is not None and current[0] == links:
            continue
        if current is not None:
            out.append((current[0], current[1], current[2], completed_at))
        current = (links, run_id, completed_at)
    if current is not None:
        out.append((current[0], current[1], current[2], None))
    return out


def timeline_edges(runs: Iterable[RunLineage]) -> ObservedLineage:
    """The point-in-time view of observed lineage: every run, and edges with their intervals.

    A later COMPLETE of the same job supersedes the job's earlier edges into the outputs it
    wrote again (valid_to = its time); gaps are those of each output's latest completed run.
    """
    result = ObservedLineage()
    series: dict[tuple[str, DatasetRef], list[Publication]] = {}
    latest_gap: dict[tuple[str, DatasetRef], tuple[datetime, Gap | None]] = {}
    for run in runs:
        result.runs.append(run.summary)
        if run.completed_at is None:
            continue
        for output in run.outputs:
            key = (run.producer, output.output)
            series.setdefault(key, []).append(
                (run.completed_at, run.summary.run_id, frozenset(output.links))
            )
            if key not in latest_gap or latest_gap[key][0] <= run.completed_at:
                latest_gap[key] = (run.completed_at, output.gap)
    edges: dict[LineageEdge, None] = {}
    for (producer, _), publications in series.items():
        for links, run_id, since, until in timeline(publications):
            for link in sorted(links, key=link_key):
                edges[link_edge(producer, run_id, link, since, until)] = None
    result.edges = list(edges)
    gaps = dict.fromkeys(g for _, g in latest_gap.values() if g is not None)
    result.gaps = sorted(gaps, key=lambda g: (g.dataset or "", g.detail))  # as the store does
    return result


def attempt_edges(runs: Iterable[RunSummary]) -> list[LineageEdge]:
    """Table-level edges of the runs that published none (FAIL, ABORT, still open): every
    input a run listed into every output it listed.

    A failed or partial run may have written rows before it ended, and a FAIL after a
    COMPLETE withdraws what the run published: the rows stay. Each edge is valid over the
    empty interval [t, t) at the run's latest event, so no point-in-time view counts it; the
    erasure view (`graph.RetainedView`) keeps it for its output's retention.
    """
    edges: dict[LineageEdge, None] = {}
    for run in runs:
        if run.state == RunState.COMPLETE.value or not run.inputs:
            continue
        for output in run.outputs:
            target = FieldRef(output, None)
            for source in run.inputs:
                edge = LineageEdge(
                    source=FieldRef(source, None),
                    target=target,
                    type=EdgeType.DIRECT,  # unknown: over-stating a disclosure is the safe error
                    subtype=EdgeSubtype.UNKNOWN,
                    origin=EdgeOrigin.OBSERVED,
                    producer=run.job,
                    run_id=run.run_id,
                    run_state=run.state,
                    valid_from=run.event_time,
                    valid_to=run.event_time,
                    observed_at=run.event_time,
                )
                edges[edge] = None
    return list(edges)
