"""What of a run event is kept: the facets lineage reads, and nothing a producer adds beside.

Raw events are kept for `ERASURE_LINEAGE_RETENTION_DAYS` (400 by default) as evidence, and
producers put whatever they know into facets: Airflow's `airflow` run facet carries the DAG
run's conf and note, an `errorMessage` can quote a driver's bound parameters, a data quality
facet the column values it measured, an `ownership` facet people's names, the `sql` facet the
statement with its values. None of that is lineage and some of it is personal data, so it is
dropped (the `sql` facet's values replaced by placeholders) before the event is hashed or
stored: an event differing only in what is dropped is the same event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Run facets: what identifies and links runs (structured; no free text).
KEPT_RUN_FACETS = frozenset({"parent", "nominalTime", "processing_engine"})
# Job facets: what kind of job and where its code lives, and its SQL without values. The
# free-text `documentation` and the whole `sourceCode` are not kept.
KEPT_JOB_FACETS = frozenset({"sql", "jobType", "sourceCodeLocation"})
# Dataset facets: the ones lineage reads (`columnLineage`, `schema` for the columns a
# dataset-wide link reaches) and `symlinks` (the other names a dataset is known by), without
# their free text (descriptions). Data quality metrics, column statistics, ownership,
# storage, custom facets and a dataset entry's `inputFacets`/`outputFacets` are not kept.
KEPT_DATASET_FACETS = frozenset({"schema", "columnLineage", "symlinks"})
_DATASET_KEYS = frozenset({"namespace", "name", "facets"})


def minimised(data: Any) -> Any:
    """`data` without what lineage does not keep (see the module docstring); `data` itself
    when it has nothing to drop. The caller's objects are never changed."""
    if not isinstance(data, Mapping):
        return data
    parts: dict[str, Any] = {}
    for part, kept in (("run", KEPT_RUN_FACETS), ("job", KEPT_JOB_FACETS)):
        value = data.get(part)
        if isinstance(value, Mapping):
            trimmed = _trimmed(value, kept)
            if trimmed is not value:
                parts[part] = trimmed
    for part in ("inputs", "outputs"):
        entries = data.get(part)
        if isinstance(entries, list):
            kept_entries = [_dataset(entry) for entry in entries]
            if any(k is not e for k, e in zip(kept_entries, entries, strict=True)):
                parts[part] = kept_entries
    return {**data, **parts} if parts else data


def _trimmed(value: Mapping[str, Any], kept: frozenset[str]) -> Mapping[str, Any]:
    """A run or job object with only the `kept` facets (the `sql` one without values)."""
    facets = value.get("facets")
    if not isinstance(facets, Mapping):
        return value  # not an object: validation says so
    trimmed = {name: facet for name, facet in facets.items() if name in kept}
    if "sql" in trimmed:
        trimmed["sql"] = kept_sql_facet(trimmed["sql"])
    if len(trimmed) == len(facets) and all(trimmed[n] is facets[n] for n in trimmed):
        return value
    rest = {key: item for key, item in value.items() if key != "facets"}
    return {**rest, "facets": trimmed} if trimmed else rest


def _dataset(entry: Any) -> Any:
    """A dataset entry with its identity and the kept facets only, each without free text."""
    if not isinstance(entry, Mapping):
        return entry  # validation says what is wrong with it
    if type(entry) is dict and _kept_dataset(entry):
        return entry  # nothing to drop: checked without building the copy to compare with
    facets = entry.get("facets")
    trimmed = (
        {n: _FACET_CONTENT[n](f) for n, f in facets.items() if n in KEPT_DATASET_FACETS}
        if isinstance(facets, Mapping)
        else facets
    )
    if _DATASET_KEYS.issuperset(entry) and trimmed == facets:
        return entry
    kept = {key: item for key, item in entry.items() if key in _DATASET_KEYS}
    if trimmed:
        kept["facets"] = trimmed
    else:
        kept.pop("facets", None)
    return kept


# What of each kept dataset facet is kept: its structure, never its free text (a column's
# `description`, a transformation's `description`; a legacy `transformationDescription` is
# kept as NOT_KEPT, since its presence says the column was transformed). What is not of the
# expected shape is left for validation to refuse.
_FACET_KEYS = ("_producer", "_schemaURL", "_deleted")
NOT_KEPT = "<free text not kept>"


def _only(value: Any, keys: tuple[str, ...]) -> Any:
    return {k: value[k] for k in keys if k in value} if isinstance(value, Mapping) else value


def _schema_field(field: Any) -> Any:
    kept = _only(field, ("name", "type", "fields"))
    if isinstance(kept, dict) and isinstance(kept.get("fields"), list):
        kept["fields"] = [_schema_field(f) for f in kept["fields"]]
    return kept


def _schema(facet: Any) -> Any:
    kept = _only(facet, (*_FACET_KEYS, "fields"))
    if isinstance(kept, dict) and isinstance(kept.get("fields"), list):
        kept["fields"] = [_schema_field(f) for f in kept["fields"]]
    return kept


def _input_field(field: Any) -> Any:
    kept = _only(field, ("namespace", "name", "field", "transformations"))
    if isinstance(kept, dict) and isinstance(kept.get("transformations"), list):
        kept["transformations"] = [
            _only(t, ("type", "subtype", "masking")) for t in kept["transformations"]
        ]
    return kept


def _inputs_of(value: Any) -> Any:
    kept = _only(value, ("inputFields", "transformationType"))
    if isinstance(kept, dict):
        if isinstance(kept.get("inputFields"), list):
            kept["inputFields"] = [_input_field(f) for f in kept["inputFields"]]
        described = value.get("transformationDescription")
        if described is not None:  # a legacy facet's "some transformation": that it was said
            kept["transformationDescription"] = (
                NOT_KEPT if isinstance(described, str) and described.strip() else described
            )
    return kept


def _column_lineage(facet: Any) -> Any:
    kept = _only(facet, (*_FACET_KEYS, "fields", "dataset"))
    if isinstance(kept, dict):
        if isinstance(kept.get("fields"), Mapping):
            kept["fields"] = {col: _inputs_of(v) for col, v in kept["fields"].items()}
        if isinstance(kept.get("dataset"), list):
            kept["dataset"] = [_input_field(f) for f in kept["dataset"]]
    return kept


def _symlinks(facet: Any) -> Any:
    kept = _only(facet, (*_FACET_KEYS, "identifiers"))
    if isinstance(kept, dict) and isinstance(kept.get("identifiers"), list):
        kept["identifiers"] = [_only(i, ("namespace", "name", "type")) for i in kept["identifiers"]]
    return kept


_FACET_CONTENT = {"schema": _schema, "columnLineage": _column_lineage, "symlinks": _symlinks}


# The same rules as a test that drops nothing: True only when `_dataset` would return the
# entry itself (False may be wrong, never True: the copy then decides). Every event of a
# file or body is minimised, and building the copy of its column facets to compare took a
# third of ingest's time.
_SCHEMA_KEYS = frozenset({*_FACET_KEYS, "fields"})
_SCHEMA_FIELD_KEYS = frozenset({"name", "type", "fields"})
_COLUMN_LINEAGE_KEYS = frozenset({*_FACET_KEYS, "fields", "dataset"})
_FIELD_LINEAGE_KEYS = frozenset({"inputFields", "transformationType"})
_INPUT_FIELD_KEYS = frozenset({"namespace", "name", "field", "transformations"})
_TRANSFORMATION_KEYS = frozenset({"type", "subtype", "masking"})
_SYMLINKS_KEYS = frozenset({*_FACET_KEYS, "identifiers"})
_IDENTIFIER_KEYS = frozenset({"namespace", "name", "type"})


def _kept_dataset(entry: dict[str, Any]) -> bool:
    if not _DATASET_KEYS.issuperset(entry):
        return False
    facets = entry.get("facets")
    if type(facets) is not dict:
        return not isinstance(facets, Mapping)  # not an object: kept as it is
    if not KEPT_DATASET_FACETS.issuperset(facets):
        return False
    return all(_KEPT_CONTENT[name](facet) for name, facet in facets.items())


def _kept_schema_fields(fields: Any) -> bool:
    if type(fields) is not list:
        return not isinstance(fields, list)
    for field in fields:
        if type(field) is dict:
            if not _SCHEMA_FIELD_KEYS.issuperset(field) or not _kept_schema_fields(
                field.get("fields")
            ):
                return False
        elif isinstance(field, Mapping):
            return False
    return True


def _kept_schema(facet: Any) -> bool:
    if type(facet) is not dict:
        return not isinstance(facet, Mapping)
    return _SCHEMA_KEYS.issuperset(facet) and _kept_schema_fields(facet.get("fields"))


def _kept_input_fields(entries: Any) -> bool:
    if type(entries) is not list:
        return not isinstance(entries, list)
    keys, kinds = _INPUT_FIELD_KEYS, _TRANSFORMATION_KEYS
    for entry in entries:
        if type(entry) is not dict:
            if isinstance(entry, Mapping):
                return False
            continue
        if not keys.issuperset(entry):
            return False
        transformations = entry.get("transformations")
        if type(transformations) is list:
            for t in transformations:
                if type(t) is dict:
                    if not kinds.issuperset(t):
                        return False
                elif isinstance(t, Mapping):
                    return False
        elif isinstance(transformations, list):
            return False
    return True


def _kept_field_lineage(value: Any) -> bool:
    if type(value) is not dict:
        return not isinstance(value, Mapping)
    if "transformationDescription" in value:
        described = value["transformationDescription"]
        # Kept as it is only when `_inputs_of` keeps it so: not null, and no free text
        # other than NOT_KEPT itself.
        free_text = isinstance(described, str) and bool(described.strip())
        if described is None or (free_text and described != NOT_KEPT):
            return False
        if len(value) > 1 and not _FIELD_LINEAGE_KEYS.issuperset(
            k for k in value if k != "transformationDescription"
        ):
            return False
    elif not _FIELD_LINEAGE_KEYS.issuperset(value):
        return False
    return _kept_input_fields(value.get("inputFields"))


def _kept_column_lineage(facet: Any) -> bool:
    if type(facet) is not dict:
        return not isinstance(facet, Mapping)
    if not _COLUMN_LINEAGE_KEYS.issuperset(facet):
        return False
    fields = facet.get("fields")
    if type(fields) is dict:
        if not all(map(_kept_field_lineage, fields.values())):
            return False
    elif isinstance(fields, Mapping):
        return False
    return _kept_input_fields(facet.get("dataset"))


def _kept_symlinks(facet: Any) -> bool:
    if type(facet) is not dict:
        return not isinstance(facet, Mapping)
    if not _SYMLINKS_KEYS.issuperset(facet):
        return False
    identifiers = facet.get("identifiers")
    if type(identifiers) is not list:
        return not isinstance(identifiers, list)
    for identifier in identifiers:
        if type(identifier) is dict:
            if not _IDENTIFIER_KEYS.issuperset(identifier):
                return False
        elif isinstance(identifier, Mapping):
            return False
    return True


_KEPT_CONTENT = {
    "schema": _kept_schema,
    "columnLineage": _kept_column_lineage,
    "symlinks": _kept_symlinks,
}


def kept_sql_facet(facet: Any) -> Any:
    """The `sql` job facet with its query's literals as placeholders and no comments; a
    query that cannot be read is dropped, and `queryDropped` says so."""
    if not isinstance(facet, Mapping) or not isinstance(facet.get("query"), str):
        return facet
    from erasure.lineage.sql.literals import without_literals  # sqlglot: only when needed

    query = facet["query"]
    dialect = facet.get("dialect")
    stripped = without_literals(query, dialect if isinstance(dialect, str) else None)
    if stripped == query:
        return facet
    rest = {key: item for key, item in facet.items() if key != "query"}
    if stripped is None:
        return {**rest, "queryDropped": True}
    return {**rest, "query": stripped}
