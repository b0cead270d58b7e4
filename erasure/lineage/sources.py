"""Assemble the lineage graph a plan walks: declared (rebuild SQL, lineage SQL files) and
observed (OpenLineage run-event files), mapped onto catalog identities through explicit
aliases only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import ErasureError
from erasure.lineage.graph import InMemoryLineageGraph
from erasure.lineage.openlineage import RunEvent, edges_from_events, read_event_file
from erasure.lineage.sql import sql_lineage, to_lineage_edges
from erasure.model import DatasetRef, FieldRef, Gap, GapKind, LineageEdge
from erasure.warehouse import Warehouse


@dataclass
class CatalogLineage:
    """The graph plus what the sources could not tell."""

    graph: InMemoryLineageGraph
    gaps: list[Gap] = field(default_factory=list)


def build_lineage(
    catalog: Catalog,
    warehouse: Warehouse | None = None,
    stored_events: Iterable[RunEvent] = (),
) -> CatalogLineage:
    """Read every lineage source the catalog names, plus events received over HTTP or
    `erasure lineage ingest`, into one graph."""
    graph = InMemoryLineageGraph()
    gaps: list[Gap] = []
    schema = _schema(catalog, warehouse)
    for ds in catalog.datasets:
        if ds.rebuild is not None and ds.rebuild.sql is not None:
            script = ";\n".join(s.rstrip().rstrip(";") for s in ds.rebuild.sql)
            dialect = _dialect(catalog, warehouse, ds)
            _add_sql(
                catalog,
                graph,
                gaps,
                script,
                dialect,
                schema,
                ds.namespace,
                ds.name,
                f"catalog:{ds.name}.rebuild",
            )
    for source in catalog.lineage.sql:
        for path in catalog.resolve(source.path):
            target = _target_from_file(path)
            namespace = _namespace_for(catalog, target)
            _add_sql(
                catalog,
                graph,
                gaps,
                path.read_text(),
                source.dialect,
                schema,
                namespace,
                target,
                f"sql:{path.name}",
            )
    # One call over every file: a run's START and COMPLETE may sit in different files.
    events = [
        event
        for pattern in catalog.lineage.openlineage
        for path in catalog.resolve(pattern)
        for event in read_event_file(path)
    ]
    events.extend(stored_events)  # the same event from a file and the store counts once
    observed = edges_from_events(events)
    graph.add_edges(_canonical(catalog, observed.edges))
    gaps.extend(observed.gaps)
    for ds in catalog.datasets:
        if ds.producer is not None and ds.producer.opaque:
            gaps.append(
                Gap(
                    kind=GapKind.OPAQUE_PRODUCER,
                    dataset=ds.ref,
                    detail=f"produced by {ds.producer.name}, which does not expose column lineage",
                )
            )
        producer = _declared_producer(ds)
        if producer is not None and not graph.upstream(ds.ref):
            gaps.append(
                Gap(
                    kind=GapKind.NO_EVENTS,
                    dataset=ds.ref,
                    detail=f"produced by {producer}, which never reported a run, and no SQL "
                    "declares its inputs: whether it derives from the subject is unknown",
                )
            )
    return CatalogLineage(graph, _unique(gaps))


def _declared_producer(ds: DatasetSpec) -> str | None:
    """The job the catalog says writes `ds`, when its lineage can only come from that job.

    Datasets that hold the subject are located directly, whatever writes them.
    """
    if ds.holds_subject:
        return None
    if ds.producer is not None:
        return ds.producer.name
    if ds.rebuild is not None and ds.rebuild.dag_id is not None:
        return f"DAG {ds.rebuild.dag_id}"
    return None


def _add_sql(
    catalog: Catalog,
    graph: InMemoryLineageGraph,
    gaps: list[Gap],
    script: str,
    dialect: str | None,
    schema: dict[str, list[str]],
    namespace: str,
    target: str,
    producer: str,
) -> None:
    lineage = sql_lineage(script, dialect=dialect, schema=schema, default_target=target)
    edges = to_lineage_edges(lineage, namespace=namespace, producer=producer)
    graph.add_edges(_canonical(catalog, edges))
    for text in lineage.gaps:
        gaps.append(
            Gap(
                kind=_gap_kind(text),
                dataset=catalog.canonical(DatasetRef(namespace, target)),
                detail=f"{producer}: {text}",
            )
        )


def _gap_kind(text: str) -> GapKind:
    lowered = text.lower()
    if "table-level lineage only" in lowered:
        return GapKind.TABLE_ONLY_LINEAGE
    if "opaque" in lowered or "function" in lowered:
        return GapKind.OPAQUE_PRODUCER
    if "parse" in lowered or "unsupported" in lowered:
        return GapKind.UNPARSEABLE_SQL
    return GapKind.UNRESOLVED_COLUMN


def _target_from_file(path: Path) -> str:
    """`sql/marts.customer_ltv.sql` declares lineage into `marts.customer_ltv`."""
    return path.name.removesuffix(".sql").lower()


def _namespace_for(catalog: Catalog, name: str) -> str:
    for ds in catalog.datasets:
        if ds.name == name:
            return ds.namespace
    return catalog.datasets[0].namespace if catalog.datasets else "default"


def _canonical(catalog: Catalog, edges: Iterable[LineageEdge]) -> list[LineageEdge]:
    """Edges re-addressed to catalog identities where an alias or a same-named entry says so."""
    out = []
    for edge in edges:
        source = _field(catalog, edge.source)
        target = _field(catalog, edge.target)
        out.append(
            edge
            if (source, target) == (edge.source, edge.target)
            else replace(edge, source=source, target=target)
        )
    return out


def _field(catalog: Catalog, ref: FieldRef) -> FieldRef:
    canonical = catalog.canonical(ref.dataset)
    return ref if canonical == ref.dataset else FieldRef(canonical, ref.column)


def _schema(catalog: Catalog, warehouse: Warehouse | None) -> dict[str, list[str]]:
    """Table -> columns for sqlglot: the catalog's, else the live warehouse's."""
    schema: dict[str, list[str]] = {}
    for ds in catalog.datasets:
        columns: list[str] | None = list(ds.columns) if ds.columns is not None else None
        if columns is None and warehouse is not None and ds.connection is not None:
            try:
                columns = warehouse.columns(ds)
            except ErasureError:
                columns = None
        if columns:
            schema[ds.name] = columns
    return schema


def _dialect(catalog: Catalog, warehouse: Warehouse | None, ds: DatasetSpec) -> str | None:
    if warehouse is None or ds.connection is None:
        return None
    try:
        return warehouse.dialect(ds.connection)
    except ErasureError:  # an unusable connection is reported when the plan queries it
        return None


def _unique(gaps: list[Gap]) -> list[Gap]:
    seen: dict[tuple[str, DatasetRef | None, str], Gap] = {}
    for gap in gaps:
        seen.setdefault((gap.kind, gap.dataset, gap.detail), gap)
    return list(seen.values())
