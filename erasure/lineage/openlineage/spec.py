"""The OpenLineage run event as the spec defines it (RunEvent and its parts), read and
validated from JSON, minimised to the facets that are lineage (`kept_facets`), and its
content hash.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self, TypeVar

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
from erasure.lineage.openlineage.kept_facets import minimised
from erasure.model import DatasetRef


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
    """An entry of `inputs` or `outputs`: its identity and the facets `minimised` keeps."""

    model_config = ConfigDict(extra="allow")

    namespace: _Name
    name: _Name
    facets: dict[str, Any] = Field(default_factory=dict)

    @property
    def ref(self) -> DatasetRef:
        return DatasetRef(self.namespace, self.name.lower())


class RunEvent(BaseModel):
    """An OpenLineage RunEvent: the parts lineage needs, every other field kept as sent
    (except what `minimised` drops)."""

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
        cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo
    ) -> Self:
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


# --- parsing --------------------------------------------------------------------------------


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<event>"


def describe_invalid(exc: ValidationError) -> str:
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


def parse_decoded(data: Any, *, native: bool = False, kept: bool = False) -> RunEvent:
    """Validate one event just decoded from JSON text (the caller keeps no reference to it);
    `native` when msgspec decoded it (`event_json.Decoded`), so it is hashed the fast way;
    `kept` when it is `minimised` already (a file's or body's element)."""
    event = _validate(data, owned=True, kept=kept)
    event._native = native
    return event


# The run id a JobEvent is read under (`_job_event`); no RunEvent may take one.
JOB_EVENT_RUN_PREFIX = "job-event:"


def _validate(data: Any, *, owned: bool, kept: bool = False) -> RunEvent:
    if not isinstance(data, Mapping):
        raise LineageError(f"OpenLineage event must be a JSON object, got {type(data).__name__}")
    if not kept:
        data = minimised(data)
    if "run" not in data and "eventType" not in data:
        if "job" in data:
            return _job_event(data, owned=owned)
        if "dataset" in data:
            raise LineageError(
                "an OpenLineage DatasetEvent carries no lineage (no job reads or writes in "
                "it): send the RunEvents or JobEvents of the jobs that read and write the "
                "dataset"
            )
    event = _well_formed(data) if owned and isinstance(data, dict) else None
    if event is None:
        try:
            event = RunEvent.model_validate(
                data if owned and isinstance(data, dict) else dict(data), context={_OWNED: owned}
            )
        except ValidationError as exc:
            raise LineageError(f"malformed OpenLineage RunEvent: {describe_invalid(exc)}") from exc
    if event.run.run_id.startswith(JOB_EVENT_RUN_PREFIX):
        raise LineageError(
            f"malformed OpenLineage RunEvent: run.runId: the prefix {JOB_EVENT_RUN_PREFIX!r} "
            "names the runs JobEvents stand for; a run's id is a UUID"
        )
    return event


def _job_event(data: Mapping[str, Any], *, owned: bool) -> RunEvent:
    """A JobEvent (static lineage: what a job reads and writes, declared with no run) read as
    a completed run of that job at its eventTime, under a run id drawn from its content
    (`JOB_EVENT_RUN_PREFIX`): a later JobEvent or run of the job supersedes its edges, as a
    later run does, and the same JobEvent sent again is the same event. Identified, stored
    and read back as sent (its `_raw`)."""
    run_id = (
        JOB_EVENT_RUN_PREFIX
        + hashlib.sha256(event_json.canonical(data, native=False)).hexdigest()[:32]
    )
    as_run = {**data, "eventType": RunState.COMPLETE.value, "run": {"runId": run_id}}
    try:
        event = RunEvent.model_validate(as_run, context={_OWNED: True})
    except ValidationError as exc:
        raise LineageError(f"malformed OpenLineage JobEvent: {describe_invalid(exc)}") from exc
    event._raw = dict(data) if owned else copy.deepcopy(dict(data))
    return event


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


def event_id(event: RunEvent) -> str:
    """Stable content hash of the raw event (key order and whitespace do not matter);
    LineageError when its text cannot be hashed (not valid Unicode)."""
    canonical = event_json.canonical(event._content(), native=event._native and bool(event._raw))
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def event_text(event: RunEvent) -> str:
    """The event as compact JSON in its own key order: reads back to the same event and id."""
    return event_json.compact(event._content(), native=event._native and bool(event._raw))
