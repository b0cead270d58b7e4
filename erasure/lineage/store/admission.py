"""What a valid OpenLineage event must also be before the store takes it: an eventTime in a
plausible range, and names and columns the store can hold.

Each check refuses the one event with its reason (it is quarantined and reported by its
position in a batch), so a bad event never costs its neighbours their place. No message
quotes the name or value it refuses: a dataset name may carry an identifier.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from erasure.errors import LineageError
from erasure.lineage.openlineage import RunEvent
from erasure.store.schema import COLUMN_LENGTH, LINEAGE_JOB_LENGTH, LINEAGE_RUN_ID_LENGTH

# The spec's eventTime is an ISO 8601 date-time with an offset, the moment the event
# happened. A producer's clock is trusted to a day ahead of ours; nothing happened before
# the Unix epoch. Outside that an edge's validity interval would be nonsense: it could open
# before any data existed, or after every plan, and hide the lineage from both.
EARLIEST_EVENT_TIME = datetime(1970, 1, 1, tzinfo=UTC)
FUTURE_SLACK = timedelta(days=1)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def refuse_unstorable(event: RunEvent, now: datetime | None = None) -> None:
    """LineageError naming the field when `event` cannot be stored as lineage."""
    if not isinstance(event.content().get("eventTime"), str):  # pydantic reads a number too
        raise LineageError(
            "OpenLineage event: eventTime must be text in ISO 8601 with a zone offset, such "
            "as 2026-11-01T02:00:00Z (the spec's date-time), not a number"
        )
    _check_time(event.event_time, now or datetime.now(UTC))
    if _plainly_storable(event):
        return
    _name_the_problem(event)


def _plainly_storable(event: RunEvent) -> bool:
    """Every name and column within its length and free of control characters, checked in
    a few passes over all of them at once (ingest checks every event it stores)."""
    names: list[Any] = [event.job.namespace, event.job.name]
    columns: list[Any] = []
    for datasets in (event.inputs, event.outputs):
        for dataset in datasets:
            names += (dataset.namespace, dataset.name)
            _gather(dataset.facets, names, columns)
    texts = [n for n in names if type(n) is str]
    cols = [c for c in columns if type(c) is str]
    run_id = event.run.run_id
    return (
        len(run_id) <= LINEAGE_RUN_ID_LENGTH
        and max(map(len, texts), default=0) <= LINEAGE_JOB_LENGTH
        and max(map(len, cols), default=0) <= COLUMN_LENGTH
        and not _CONTROL.search(run_id + "".join(texts) + "".join(cols))
    )


def _gather(facets: Any, names: list[Any], columns: list[Any]) -> None:
    """The dataset names and column names of a dataset's lineage facets (`_facet_names`)."""
    lineage = facets.get("columnLineage") if type(facets) is dict else None
    if type(lineage) is dict:
        fields = lineage.get("fields")
        if type(fields) is dict:
            columns.extend(fields)
            for spec in fields.values():
                if type(spec) is dict:
                    _gather_inputs(spec.get("inputFields"), names, columns)
        _gather_inputs(lineage.get("dataset"), names, columns)
    schema = facets.get("schema") if type(facets) is dict else None
    if type(schema) is dict and type(schema.get("fields")) is list:
        columns.extend(e.get("name") for e in schema["fields"] if type(e) is dict)


def _gather_inputs(entries: Any, names: list[Any], columns: list[Any]) -> None:
    if type(entries) is list:
        for entry in entries:
            if type(entry) is dict:
                columns.append(entry.get("field"))
                names += (entry.get("namespace"), entry.get("name"))


def _name_the_problem(event: RunEvent) -> None:
    """The field at fault, checked one by one (only for an event that failed the fast check)."""
    _check_name("job.namespace", event.job.namespace, LINEAGE_JOB_LENGTH)
    _check_name("job.name", event.job.name, LINEAGE_JOB_LENGTH)
    _check_name("run.runId", event.run.run_id, LINEAGE_RUN_ID_LENGTH)
    for part, datasets in (("inputs", event.inputs), ("outputs", event.outputs)):
        for number, dataset in enumerate(datasets):
            where = f"{part}[{number}]"
            _check_name(f"{where}.namespace", dataset.namespace, LINEAGE_JOB_LENGTH)
            _check_name(f"{where}.name", dataset.name, LINEAGE_JOB_LENGTH)
            for what, name, limit in _facet_names(dataset.facets):
                _check_name(f"{where}.facets.{what}", name, limit)


def _check_time(when: datetime, now: datetime) -> None:
    if when < EARLIEST_EVENT_TIME:
        raise LineageError(
            "OpenLineage event: eventTime is before 1970-01-01; give the time the run "
            "changed state (ISO 8601 with a zone offset)"
        )
    if when > now + FUTURE_SLACK:
        raise LineageError(
            "OpenLineage event: eventTime is more than a day ahead of this server's clock; "
            "check the producer's clock and time zone (ISO 8601 with a zone offset)"
        )


def _check_name(field: str, value: Any, limit: int) -> None:
    if not isinstance(value, str):
        return  # not a name at all: validation or the facet's reader says so
    if len(value) > limit:
        raise LineageError(
            f"OpenLineage event: {field} is longer than {limit} characters; shorten it in "
            "the producer"
        )
    if _CONTROL.search(value):
        raise LineageError(
            f"OpenLineage event: {field} holds a control character (such as NUL or a line "
            "break); names must be printable text"
        )


_Name = tuple[str, Any, int]  # where, the name, its longest length


def _facet_names(facets: Mapping[str, Any]) -> Iterator[_Name]:
    """The column and dataset names a dataset's lineage facets give (what projection stores)."""
    lineage = facets.get("columnLineage")
    if isinstance(lineage, Mapping):
        fields = lineage.get("fields")
        if isinstance(fields, Mapping):
            for output, spec in fields.items():
                yield "columnLineage: a column name", output, COLUMN_LENGTH
                inputs = spec.get("inputFields") if isinstance(spec, Mapping) else None
                yield from _input_fields(inputs)
        yield from _input_fields(lineage.get("dataset"))
    schema = facets.get("schema")
    if isinstance(schema, Mapping) and isinstance(schema.get("fields"), list):
        for entry in schema["fields"]:
            if isinstance(entry, Mapping):
                yield "schema: a column name", entry.get("name"), COLUMN_LENGTH


def _input_fields(inputs: Any) -> Iterator[_Name]:
    if isinstance(inputs, list):
        for entry in inputs:
            if isinstance(entry, Mapping):
                yield "columnLineage: an input column name", entry.get("field"), COLUMN_LENGTH
                yield (
                    "columnLineage: an input dataset namespace",
                    entry.get("namespace"),
                    LINEAGE_JOB_LENGTH,
                )
                yield "columnLineage: an input dataset name", entry.get("name"), LINEAGE_JOB_LENGTH
