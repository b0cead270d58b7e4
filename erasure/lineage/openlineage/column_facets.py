"""The ColumnLineageDatasetFacet (spec facets/1-2-0) read into links: per-field `fields`
and the dataset-wide `dataset` array, classified by transformation; table-level links and a
gap when an output has no readable facet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from erasure.lineage.openlineage.spec import describe_invalid
from erasure.model import DatasetRef, EdgeSubtype, EdgeType, FieldRef, Gap, GapKind


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


Link = tuple[FieldRef, FieldRef, EdgeType, EdgeSubtype]


def _column_links(
    output: DatasetRef, facets: Mapping[str, Any], facet: _ColumnLineageFacet
) -> list[Link]:
    """(source, target, type, subtype) for every transformation the facet lists."""
    links: list[Link] = []
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


PlainRow = tuple[str, str, str, str, str, str]  # source ns, name, column; target column;
# type; subtype (values): a link of a `fields` facet into its output, as text only


def _fields_rows(raw: Any) -> list[PlainRow] | None:
    """The links of the common facet shape (only `fields`, well formed) read as plain JSON,
    in facet order, as text (source names lower-cased); None for anything else, which the
    validated models then read (and describe if broken).

    Column facets carry most of an event's bytes: validating each input field as a model
    cost more than everything else ingest does, and an object per link most of the rest.
    """
    if not isinstance(raw, dict) or raw.get("dataset"):
        return None
    fields = raw.get("fields")
    if fields is None:
        return []
    if not isinstance(fields, dict):
        return None
    names: dict[str, str] = {}
    kinds: dict[tuple[str, Any], tuple[str, str]] = {}
    rows: list[PlainRow] = []
    for column, lineage in fields.items():
        if not isinstance(lineage, dict):
            return None
        inputs = lineage.get("inputFields")
        if not isinstance(inputs, list):
            return None
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
            lowered = names.get(name)
            if lowered is None:
                lowered = names[name] = name.lower()
            transformations = source.get("transformations")
            if not transformations:
                if transformations is not None and not isinstance(transformations, list):
                    return None
                legacy = lineage.get("transformationType"), lineage.get("transformationDescription")
                if any(v is not None and not isinstance(v, str) for v in legacy):
                    return None
                kind, subtype = _legacy_kind(*legacy)
                rows.append((namespace, lowered, column_name, column, kind.value, subtype.value))
                continue
            if not isinstance(transformations, list):
                return None
            for transformation in transformations:
                if not isinstance(transformation, dict):
                    return None
                kind_text, subtype_text = transformation.get("type"), transformation.get("subtype")
                if not isinstance(kind_text, str) or not (
                    subtype_text is None or isinstance(subtype_text, str)
                ):
                    return None
                classified = kinds.get((kind_text, subtype_text))
                if classified is None:
                    edge_type = (
                        EdgeType.INDIRECT
                        if kind_text.strip().upper() == EdgeType.INDIRECT
                        else EdgeType.DIRECT
                    )
                    found = _SUBTYPE_NAMES.get(
                        (subtype_text or "").strip().upper(), EdgeSubtype.UNKNOWN
                    )
                    classified = kinds[(kind_text, subtype_text)] = (edge_type.value, found.value)
                rows.append((namespace, lowered, column_name, column, *classified))
    return rows


_TYPE_NAMES = {kind.value: kind for kind in EdgeType}


def _fields_links(output: DatasetRef, raw: Any) -> list[Link] | None:
    """`_column_links` for the common shape (`_fields_rows`) as links, in facet order."""
    rows = _fields_rows(raw)
    if rows is None:
        return None
    refs: dict[tuple[str, str], DatasetRef] = {}
    targets: dict[str, FieldRef] = {}
    links: list[Link] = []
    for namespace, name, source_column, target_column, kind, subtype in rows:
        ref = refs.get((namespace, name))
        if ref is None:
            ref = refs[(namespace, name)] = DatasetRef(namespace, name)
        target = targets.get(target_column)
        if target is None:
            target = targets[target_column] = FieldRef(output, target_column)
        links.append(
            (FieldRef(ref, source_column), target, _TYPE_NAMES[kind], _SUBTYPE_NAMES[subtype])
        )
    return links


@dataclass(frozen=True, slots=True)
class PlainLinks:
    """The distinct links of a `fields` facet into one output, as text rows in `link_key`
    order: what the store digests and writes, read without an object per link. `links()`
    gives the same set as `output_links` does."""

    output: DatasetRef
    rows: tuple[PlainRow, ...]

    def __len__(self) -> int:
        return len(self.rows)

    def links(self) -> frozenset[Link]:
        found: list[Link] = []
        refs: dict[tuple[str, str], DatasetRef] = {}
        for namespace, name, source_column, target_column, kind, subtype in self.rows:
            ref = refs.get((namespace, name))
            if ref is None:
                ref = refs[(namespace, name)] = DatasetRef(namespace, name)
            found.append(
                (
                    FieldRef(ref, source_column),
                    FieldRef(self.output, target_column),
                    _TYPE_NAMES[kind],
                    _SUBTYPE_NAMES[subtype],
                )
            )
        return frozenset(found)

    def sources(self) -> set[DatasetRef]:
        return {DatasetRef(ns, name) for ns, name in {(r[0], r[1]) for r in self.rows}}


def plain_links(output: DatasetRef, facets: Mapping[str, Any]) -> PlainLinks | None:
    """The links `output_links` reads from these facets as `PlainLinks`, when they come from
    a well-formed `fields` facet alone (no gap, no dataset-wide part); else None."""
    raw = facets.get("columnLineage")
    if raw is None:
        return None
    rows = _fields_rows(raw)
    if rows is None:
        return None
    # Distinct rows sorted: with one target dataset and no table-level end, the order of
    # `link_key` (the target's namespace and name are the same in every row).
    return PlainLinks(output, tuple(sorted(set(rows))))


def output_links(
    producer: str, output: DatasetRef, facets: Mapping[str, Any], inputs: Sequence[DatasetRef]
) -> tuple[tuple[Link, ...], Gap | None]:
    """Links into one output of a completed run; table-level links and a gap without columns."""
    gap: Gap | None = None
    problem = "carries no columnLineage facet"
    facet: _ColumnLineageFacet | None = None
    fast: list[Link] | None = None
    if facets.get("columnLineage") is not None:
        fast = _fields_links(output, facets["columnLineage"])
        if fast is None:
            try:
                facet = _ColumnLineageFacet.model_validate(facets["columnLineage"])
            except ValidationError as exc:
                problem = f"has an unreadable columnLineage facet ({describe_invalid(exc)})"

    if fast is not None:
        links = fast
    elif facet is not None:
        links = _column_links(output, facets, facet)
    else:
        links = []
        gap = Gap(
            kind=GapKind.TABLE_ONLY_LINEAGE,
            detail=f"job {producer} wrote {output.qualified} but {problem}; "
            "only table-level lineage is known",
            dataset=output,
        )
    return tuple(dict.fromkeys([*links, *declared_links(output, inputs, links)])), gap


def declared_links(
    output: DatasetRef, inputs: Sequence[DatasetRef], links: Iterable[Link] | PlainLinks
) -> list[Link]:
    """Table-level links into `output` from each declared input its column links do not
    name. The spec's `inputs` list every dataset the run read; a column facet may leave one
    out (read only to filter, or spelt another way): a facet never hides an input. How it
    flowed is unknown, so DIRECT: over-stating a disclosure is the safe error."""
    named = links.sources() if isinstance(links, PlainLinks) else {s.dataset for s, *_ in links}
    table = FieldRef(output, None)
    return [
        (FieldRef(source, None), table, EdgeType.DIRECT, EdgeSubtype.UNKNOWN)
        for source in dict.fromkeys(inputs)
        if source not in named
    ]


def link_key(link: Link) -> tuple[str, str, str, str, str, str, str, str]:
    """A total order on links (a table-level end has no column: it sorts first)."""
    source, target, kind, subtype = link
    return (
        source.dataset.namespace, source.dataset.name, source.column or "",
        target.dataset.namespace, target.dataset.name, target.column or "",
        kind.value, subtype.value,
    )  # fmt: skip
