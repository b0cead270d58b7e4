"""Declared lineage from a dbt project's `manifest.json` (what `dbt compile` writes).

Each model, snapshot and seed is a dataset `schema.alias` (an ephemeral model is none: dbt
inlines it, and what it reads reaches what reads it; with no catalog entry of its own, the
catalog describes it from the manifest); its upstreams are the nodes and sources in
`depends_on`. Column lineage comes from the model's compiled SQL through the same
parser as other declared SQL, with the manifest's documented columns and the catalog's
schema, so `*` expands where the columns are known. An upstream the SQL does not resolve to
columns still gets a table-level edge, so the closure never misses a dependency dbt knows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from erasure.catalog import Catalog, DbtLineageSource
from erasure.dbt_manifest import (
    MATERIALISED,
    catalog_columns,
    depends_on,
    materialization,
    parse_manifest,
    relation,
)
from erasure.errors import LineageError
from erasure.lineage.sql import sql_lineage, to_lineage_edges
from erasure.lineage.store import DeclaredSource
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

# dbt adapter type -> sqlglot dialect where the names differ
_DIALECTS = {"postgres": "postgres", "redshift": "redshift", "snowflake": "snowflake",
             "bigquery": "bigquery", "databricks": "databricks", "spark": "spark",
             "duckdb": "duckdb", "trino": "trino", "sqlite": "sqlite"}  # fmt: skip

Canonical = Callable[[Iterable[LineageEdge]], list[LineageEdge]]


def manifest_source(
    catalog: Catalog,
    path: Path,
    spec: DbtLineageSource,
    schema: dict[str, list[str]],
    canonical: Canonical,
) -> DeclaredSource:
    """The manifest as one declared source: parsed again only when it (or the schema) changes."""
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise LineageError(f"{path}: cannot read the dbt manifest: {exc}") from None
    try:  # `dbt docs generate` writes the warehouse's columns beside the manifest
        columns = catalog_columns((path.parent / "catalog.json").read_bytes())
    except OSError:
        columns = {}
    digest = hashlib.sha256(
        blob
        + json.dumps(
            [spec.namespace, spec.dialect, sorted(schema.items()), sorted(columns.items())]
        ).encode()
    ).hexdigest()

    def parse() -> tuple[list[LineageEdge], list[Gap]]:
        edges, gaps = manifest_lineage(catalog, path, blob, spec, {**columns, **schema})
        return canonical(edges), gaps

    return DeclaredSource(
        key=f"dbt:{path.resolve()}", kind="dbt_manifest", digest=digest, parse=parse
    )


def manifest_lineage(
    catalog: Catalog,
    path: Path,
    blob: bytes,
    spec: DbtLineageSource,
    schema: dict[str, list[str]],
) -> tuple[list[LineageEdge], list[Gap]]:
    """Edges and gaps of every model in a manifest."""
    nodes, sources, adapter = parse_manifest(path, blob)
    dialect = spec.dialect or _DIALECTS.get(adapter)
    # An ephemeral model is inlined by dbt as a CTE of what reads it: no relation exists.
    ephemeral = {uid for uid, node in nodes.items() if materialization(node) == "ephemeral"}
    relations = {
        uid: relation(node) for uid, node in {**sources, **nodes}.items() if uid not in ephemeral
    }
    databases = {str(n.get("database") or "").lower() for n in {**sources, **nodes}.values()}
    databases.discard("")
    # Compiled SQL names `"database"."schema"."table"`: each relation's columns are known by
    # that name too, the catalog's schema (or dbt's catalog.json) first (under each database
    # the manifest puts that relation in), then the manifest's documented columns of the
    # first node naming it.
    documented = dict(schema)
    for uid, node in {**sources, **nodes}.items():
        name, database = relations.get(uid), str(node.get("database") or "").lower()
        if name in schema and database:
            documented.setdefault(f"{database}.{name}", schema[name])
    for uid, node in {**sources, **nodes}.items():
        columns = [c.lower() for c in (node.get("columns") or {})]
        name = relations.get(uid)
        if not name or not columns:
            continue
        database = str(node.get("database") or "").lower()
        for key in (name, f"{database}.{name}" if database else None):
            if key is not None and key not in documented:
                documented[key] = columns

    edges: list[LineageEdge] = []
    gaps: list[Gap] = []
    for uid, node in nodes.items():
        if node.get("resource_type") not in MATERIALISED:
            continue
        target = relations.get(uid)
        if not target:
            continue
        namespace = _namespace(catalog, spec, target)
        producer = f"dbt:{uid}"
        dataset = catalog.canonical(DatasetRef(namespace, target))
        upstreams = [
            name
            for u in _through_ephemeral(nodes, ephemeral, uid)
            if (name := relations.get(u)) is not None
        ]
        code = node.get("compiled_code") or node.get("compiled_sql")
        reached: set[str] = set()
        if code:
            lineage = sql_lineage(
                str(code), dialect=dialect, schema=documented, default_target=target
            )
            for edge in to_lineage_edges(lineage, namespace=namespace, producer=producer):
                edge = _strip_database(edge, databases, catalog, spec)
                reached.add(edge.source.dataset.name)
                edges.append(edge)
            gaps += [
                Gap(kind=gap.kind, dataset=dataset, detail=f"{producer}: {gap}")
                for gap in lineage.gaps
            ]
        elif upstreams:
            gaps.append(
                Gap(
                    kind=GapKind.TABLE_ONLY_LINEAGE,
                    dataset=dataset,
                    detail=f"{producer}: the manifest has no compiled SQL (run `dbt compile`); "
                    "only table-level lineage is known",
                )
            )
        for upstream in upstreams:
            if upstream not in reached:
                edges.append(
                    LineageEdge(
                        source=FieldRef(
                            DatasetRef(_namespace(catalog, spec, upstream), upstream), None
                        ),
                        target=FieldRef(DatasetRef(namespace, target), None),
                        type=EdgeType.DIRECT,
                        subtype=EdgeSubtype.UNKNOWN,
                        origin=EdgeOrigin.DECLARED,
                        producer=producer,
                    )
                )
    return edges, gaps


def _through_ephemeral(nodes: dict[str, Any], ephemeral: set[str], uid: str) -> list[str]:
    """The nodes and sources `uid` depends on, an ephemeral model replaced by what it depends
    on (dbt inlines it), in order, each once."""
    found: dict[str, None] = {}
    seen = {uid}
    pending = list(depends_on(nodes.get(uid)))
    while pending:
        upstream = pending.pop(0)
        if upstream in seen:
            continue
        seen.add(upstream)
        if upstream in ephemeral:
            pending[:0] = depends_on(nodes.get(upstream))
        else:
            found[upstream] = None
    return list(found)


def _strip_database(
    edge: LineageEdge, databases: set[str], catalog: Catalog, spec: DbtLineageSource
) -> LineageEdge:
    """Compiled SQL names `database.schema.table`; the catalog names `schema.table`."""

    def fix(ref: FieldRef) -> FieldRef:
        parts = ref.dataset.name.split(".")
        if len(parts) == 3 and parts[0] in databases:
            name = ".".join(parts[1:])
            return FieldRef(DatasetRef(_namespace(catalog, spec, name), name), ref.column)
        return ref

    source, target = fix(edge.source), fix(edge.target)
    if (source, target) == (edge.source, edge.target):
        return edge
    return LineageEdge(
        source=source,
        target=target,
        type=edge.type,
        subtype=edge.subtype,
        origin=edge.origin,
        producer=edge.producer,
    )


def _namespace(catalog: Catalog, spec: DbtLineageSource, name: str) -> str:
    """The node's namespace as the catalog tells it; "dbt" when it cannot (set the dbt
    source's `namespace`): never one that depends on the order of the catalog's entries."""
    return catalog.dbt_namespace(spec, name) or "dbt"
