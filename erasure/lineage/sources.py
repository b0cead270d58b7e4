"""Assemble the lineage graph a plan walks: declared (rebuild SQL, lineage SQL files, dbt
manifests) and observed (OpenLineage run events), mapped onto catalog identities through
explicit aliases only.

With a `LineageStore` (production, and every plan of a request) the sources are synced into
the store first: a declared source is parsed only when its digest changed, an event file is
ingested only when it changed, and the graph is the store's projection. Without one (tests,
`erasure demo`) the same sources are read into an in-memory graph.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path

from erasure.catalog import Catalog, DatasetSpec
from erasure.errors import ErasureError
from erasure.lineage.graph import InMemoryLineageGraph, LineageGraph, RetainedView
from erasure.lineage.openlineage import (
    LastWriter,
    RunEvent,
    attempt_edges,
    last_writers,
    newest_first,
    read_event_file,
    runs_from_events,
    timeline_edges,
)
from erasure.lineage.sql import sql_lineage, to_lineage_edges
from erasure.lineage.store import DeclaredSource, IngestReport, LineageStore
from erasure.model import DatasetRef, FieldRef, Gap, GapKind, LineageEdge
from erasure.warehouse import Warehouse

_WORD = re.compile(r"[a-z_][a-z0-9_$]*")
_EVENT_FILES = "#events"  # scope suffix of event-file sources in `lineage_sources`


def _nobody(ref: DatasetRef) -> list[LastWriter]:
    return []


@dataclass
class CatalogLineage:
    """The graph plus what the sources could not tell, and the instant walks should use."""

    graph: LineageGraph
    gaps: list[Gap] = field(default_factory=list)
    as_of: datetime | None = None  # None: the current lineage
    # Each job's run that last published writing a catalog identity (its aliases' included).
    writers: Callable[[DatasetRef], list[LastWriter]] = _nobody


def build_lineage(
    catalog: Catalog,
    warehouse: Warehouse | None = None,
    stored_events: Iterable[RunEvent] = (),
    *,
    store: LineageStore | None = None,
    as_of: datetime | None = None,
) -> CatalogLineage:
    """Read every lineage source the catalog names, plus events received over HTTP or
    `erasure lineage ingest`, into one graph valid at `as_of` (None: current)."""
    declared = declared_sources(catalog, warehouse)
    gaps: list[Gap] = []
    graph: LineageGraph
    if store is None:
        memory = InMemoryLineageGraph()
        for source in declared:
            edges, source_gaps = source.parse()
            memory.add_edges(edges)
            gaps.extend(source_gaps)
        # One call over every file: a run's START and COMPLETE may sit in different files.
        events = [
            event
            for pattern in catalog.lineage.openlineage
            for path in catalog.resolve(pattern)
            for event in read_event_file(path)
        ]
        events.extend(stored_events)  # the same event from a file and the store counts once
        runs = runs_from_events(events)
        observed = timeline_edges(runs)
        memory.add_edges(_canonical(catalog, observed.edges))
        memory.add_edges(_canonical(catalog, attempt_edges(r.summary for r in runs)))
        gaps.extend(observed.gaps)
        graph = memory
        by_identity: dict[DatasetRef, dict[str, LastWriter]] = {}
        for ref, found in last_writers(events).items():
            jobs = by_identity.setdefault(catalog.canonical(ref), {})
            for writer in found:
                if writer.job not in jobs or jobs[writer.job].completed_at < writer.completed_at:
                    jobs[writer.job] = writer

        def writer_of(ref: DatasetRef) -> list[LastWriter]:
            return newest_first(by_identity.get(ref, {}).values())

    else:
        gaps.extend(store.sync_declared(_scope(catalog), declared))
        sync_event_files(store, catalog)
        events = list(stored_events)
        if events:
            store.ingest(events)
        stored = store.graph()
        graph = stored.canonical(catalog.canonical)
        graph.add_unstored_edges(_canonical(catalog, attempt_edges(store.unpublished_runs())))
        gaps.extend(store.output_gaps())
        writer_of = partial(_stored_writers, store, catalog)
    gaps.extend(_catalog_gaps(catalog, graph, as_of))
    return CatalogLineage(graph, _unique(gaps), as_of, writer_of)


def _stored_writers(store: LineageStore, catalog: Catalog, ref: DatasetRef) -> list[LastWriter]:
    entry = catalog.dataset(ref)
    aliases = [DatasetRef(a.namespace, a.name.lower()) for a in entry.aliases] if entry else []
    return store.writers([ref, *aliases])


def erasure_view(catalog: Catalog, lineage: CatalogLineage, now: datetime) -> RetainedView:
    """The lineage an erasure plan walks (DESIGN section 4): every edge set, superseded and
    failed runs' included, whose output may still hold rows it wrote, by catalog retention."""
    retention = {
        ds.ref: ds.retention_days for ds in catalog.datasets if ds.retention_days is not None
    }
    return RetainedView(at=lineage.as_of or now, retention_days=retention, current=lineage.as_of)


def sync_event_files(store: LineageStore, catalog: Catalog) -> IngestReport:
    """Ingest the catalog's OpenLineage files that changed since they were last ingested."""
    report = IngestReport()
    scope = _scope(catalog) + _EVENT_FILES
    paths = [p for pattern in catalog.lineage.openlineage for p in catalog.resolve(pattern)]
    for path in paths:
        report.merge(store.ingest_file_if_changed(path, scope=scope))
    return report


def declared_sources(catalog: Catalog, warehouse: Warehouse | None) -> list[DeclaredSource]:
    """Every declared lineage source of the catalog, each with the digest of what it reads."""
    sources: list[DeclaredSource] = []
    schema: _Schema | None = None

    def the_schema() -> _Schema:
        nonlocal schema
        if schema is None:
            schema = _Schema(_schema(catalog, warehouse))
        return schema

    for ds in catalog.datasets:
        statements = None if ds.rebuild is None else ds.rebuild.declared_sql()
        if statements is not None:
            script = ";\n".join(s.rstrip().rstrip(";") for s in statements)
            dialect = _dialect(catalog, warehouse, ds)
            sources.append(
                _sql_source(
                    catalog,
                    the_schema(),
                    f"rebuild:{ds.namespace}/{ds.name}",
                    "rebuild_sql",
                    script,
                    dialect,
                    ds.namespace,
                    ds.name,
                    f"catalog:{ds.name}.rebuild",
                )
            )
    for sql_source in catalog.lineage.sql:
        for path in catalog.resolve(sql_source.path):
            target = _target_from_file(path)
            namespace = _namespace_for(catalog, target)
            script, unreadable = _sql_text(path)
            if unreadable is not None:
                sources.append(_unreadable_source(catalog, path, namespace, target, unreadable))
                continue
            sources.append(
                _sql_source(
                    catalog,
                    the_schema(),
                    f"sql:{path.resolve()}",
                    "sql",
                    script,
                    sql_source.dialect,
                    namespace,
                    target,
                    f"sql:{path.name}",
                )
            )
    for dbt_source in catalog.lineage.dbt:
        from erasure.lineage.dbt import manifest_source

        for path in catalog.resolve(dbt_source.manifest):
            sources.append(
                manifest_source(
                    catalog,
                    path,
                    dbt_source,
                    the_schema().tables,
                    partial(_canonical, catalog),
                )
            )
    return sources


def _sql_source(
    catalog: Catalog,
    schema: _Schema,
    key: str,
    kind: str,
    script: str,
    dialect: str | None,
    namespace: str,
    target: str,
    producer: str,
) -> DeclaredSource:
    relevant = schema.relevant(script)
    digest = _digest(
        {
            "script": script,
            "dialect": dialect,
            "namespace": namespace,
            "target": target,
            "producer": producer,
            "schema": relevant,
        }
    )

    dataset = catalog.canonical(DatasetRef(namespace, target))

    def parse() -> tuple[list[LineageEdge], list[Gap]]:
        lineage = sql_lineage(script, dialect=dialect, schema=relevant, default_target=target)
        edges = to_lineage_edges(lineage, namespace=namespace, producer=producer)
        gaps = [
            Gap(kind=gap.kind, dataset=dataset, detail=f"{producer}: {gap}") for gap in lineage.gaps
        ]
        return _canonical(catalog, edges), gaps

    return DeclaredSource(key=key, kind=kind, digest=digest, parse=parse)


# A lineage SQL file larger than this is not a query someone wrote: it is not parsed.
MAX_SQL_FILE_BYTES = 4 * 1024 * 1024


def _sql_text(path: Path) -> tuple[str, str | None]:
    """A lineage SQL file's text, or why it cannot be read (the file's datasets get a gap)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SQL_FILE_BYTES + 1)
    except OSError as exc:
        return "", f"cannot be read ({exc.strerror or type(exc).__name__})"
    if len(data) > MAX_SQL_FILE_BYTES:
        return "", f"is larger than {MAX_SQL_FILE_BYTES // (1024 * 1024)} MiB and was not parsed"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "", (f"is not UTF-8 text (byte {exc.start} cannot be decoded); save it as UTF-8")
    if "\x00" in text:
        return "", "holds a NUL character; it is not a SQL script"
    return text, None


def _unreadable_source(
    catalog: Catalog, path: Path, namespace: str, target: str, reason: str
) -> DeclaredSource:
    """A lineage SQL file that cannot be read: its dataset's lineage is a gap naming the file,
    and every other source and plan goes on."""
    dataset = catalog.canonical(DatasetRef(namespace, target))
    try:
        stat = path.stat()
        version = f"{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        version = ""
    digest = _digest({"unreadable": reason, "file": str(path.resolve()), "version": version})
    gap = Gap(
        kind=GapKind.UNPARSEABLE_SQL,
        dataset=dataset,
        detail=f"sql:{path.name}: the lineage SQL file {reason}",
    )
    return DeclaredSource(
        key=f"sql:{path.resolve()}", kind="sql", digest=digest, parse=lambda: ([], [gap])
    )


def declared_table_lineage(
    catalog: Catalog, warehouse: Warehouse | None, table: str, script: str
) -> list[LineageEdge]:
    """The column edges a SELECT that produces `table` declares (catalog identities)."""
    source = _sql_source(
        catalog,
        _Schema(_schema(catalog, warehouse)),
        f"sql:{table}",
        "sql",
        script,
        None,
        _namespace_for(catalog, table),
        table,
        f"sql:{table}.sql",
    )
    edges, _ = source.parse()
    return edges


class _Schema:
    """The schema for sqlglot, and the part of it a script can refer to."""

    def __init__(self, tables: dict[str, list[str]]) -> None:
        self.tables = tables
        self._by_last: dict[str, list[str]] = {}
        for name in tables:
            self._by_last.setdefault(name.rsplit(".", 1)[-1], []).append(name)

    def relevant(self, script: str) -> dict[str, list[str]]:
        """Tables whose last name part appears as a word of the script (a superset of the
        tables it reads): the schema a parse depends on, so its digest changes with them."""
        words = set(_WORD.findall(script.lower()))
        names = sorted(n for w in words for n in self._by_last.get(w, ()))
        return {n: self.tables[n] for n in names}


def _catalog_gaps(catalog: Catalog, graph: LineageGraph, as_of: datetime | None) -> list[Gap]:
    gaps: list[Gap] = []
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
        if producer is not None and not _has_upstream(graph, ds.ref, as_of):
            gaps.append(
                Gap(
                    kind=GapKind.NO_EVENTS,
                    dataset=ds.ref,
                    detail=f"produced by {producer}, which never reported a run, and no SQL "
                    "declares its inputs: whether it derives from the subject is unknown",
                )
            )
    return gaps


def _has_upstream(graph: LineageGraph, ref: DatasetRef, as_of: datetime | None) -> bool:
    quick = getattr(graph, "has_upstream", None)
    if quick is not None:
        return bool(quick(ref, as_of=as_of))
    return bool(graph.upstream(ref, as_of=as_of))


def _declared_producer(ds: DatasetSpec) -> str | None:
    """The job the catalog says writes `ds`, when its lineage can only come from that job.

    Datasets that hold the subject are located directly, whatever writes them.
    """
    if ds.holds_subject:
        return None
    if ds.producer is not None:
        return ds.producer.name
    return None if ds.rebuild is None else ds.rebuild.producer()


def _target_from_file(path: Path) -> str:
    """`sql/marts.customer_ltv.sql` declares lineage into `marts.customer_ltv`."""
    return path.name.removesuffix(".sql").lower()


def _namespace_for(catalog: Catalog, name: str) -> str:
    try:
        return catalog.by_name(name).namespace
    except ErasureError:
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
    """Table -> columns for sqlglot: the catalog's, else the warehouse's (one catalog query
    per connection, never a reflection per table)."""
    schema: dict[str, list[str]] = {}
    if warehouse is not None:
        for connection in sorted({ds.connection for ds in catalog.datasets if ds.connection}):
            try:
                schema.update(warehouse.schema(connection))
            except ErasureError:  # an unusable connection is reported when the plan queries it
                continue
    for ds in catalog.datasets:
        if ds.columns is not None:
            schema[ds.name] = list(ds.columns)
    return {name: columns for name, columns in schema.items() if columns}


def _dialect(catalog: Catalog, warehouse: Warehouse | None, ds: DatasetSpec) -> str | None:
    if warehouse is None or ds.connection is None:
        return None
    try:
        return warehouse.dialect(ds.connection)
    except ErasureError:  # an unusable connection is reported when the plan queries it
        return None


def _scope(catalog: Catalog) -> str:
    return f"catalog:{catalog.base_dir}"


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _unique(gaps: list[Gap]) -> list[Gap]:
    seen: dict[tuple[str, DatasetRef | None, str], Gap] = {}
    for gap in gaps:
        seen.setdefault((gap.kind, gap.dataset, gap.detail), gap)
    return list(seen.values())
