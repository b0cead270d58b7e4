"""Declared lineage from a dbt manifest.json: models, sources, column lineage from compiled SQL."""

from __future__ import annotations

import json
from pathlib import Path

from erasure.catalog import Catalog, DbtLineageSource
from erasure.lineage.dbt import manifest_lineage
from erasure.lineage.sources import build_lineage
from erasure.model import DatasetRef, GapKind

MANIFEST = {
    "metadata": {"adapter_type": "postgres", "dbt_version": "1.8.0"},
    "sources": {
        "source.shop.crm.customers": {
            "resource_type": "source", "database": "analytics", "schema": "crm",
            "name": "customers", "identifier": "customers",
            "columns": {"id": {}, "email": {}, "region": {}},
        },
    },
    "nodes": {
        "model.shop.customer_regions": {
            "resource_type": "model", "database": "analytics", "schema": "marts",
            "name": "customer_regions", "alias": "customer_regions",
            "compiled_code": 'select c.id as customer_id, c.region as region '
            'from "analytics"."crm"."customers" as c',
            "depends_on": {"nodes": ["source.shop.crm.customers"]},
            "columns": {},
        },
        "model.shop.region_counts": {
            "resource_type": "model", "database": "analytics", "schema": "marts",
            "name": "region_counts",
            "depends_on": {"nodes": ["model.shop.customer_regions"]},
        },
        "test.shop.not_null": {"resource_type": "test", "schema": "marts", "name": "t"},
    },
}  # fmt: skip


def catalog(tmp_path: Path) -> Catalog:
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "manifest.json").write_text(json.dumps(MANIFEST))
    return Catalog.model_validate(
        {
            "version": 1,
            "identifiers": {"email": {"normalise": "email"}},
            "datasets": [
                {"namespace": "wh", "name": "crm.customers", "kind": "table"},
                {"namespace": "wh", "name": "marts.customer_regions", "kind": "table"},
                {"namespace": "wh", "name": "marts.region_counts", "kind": "table"},
            ],
            "lineage": {"dbt": [{"manifest": "target/manifest.json"}]},
            "base_dir": tmp_path,
        }
    )


def test_compiled_sql_gives_column_edges_between_catalog_datasets(tmp_path: Path) -> None:
    cat = catalog(tmp_path)
    path = tmp_path / "target" / "manifest.json"
    edges, gaps = manifest_lineage(cat, path, path.read_bytes(), DbtLineageSource(manifest=""), {})
    columns = {(str(e.source), str(e.target)) for e in edges if e.target.column is not None}
    assert ("crm.customers.id", "marts.customer_regions.customer_id") in columns
    assert ("crm.customers.region", "marts.customer_regions.region") in columns
    assert all(e.source.dataset.namespace == "wh" for e in edges)
    # no compiled SQL: a table-level edge from depends_on, and a gap that says so
    table = {(str(e.source), str(e.target)) for e in edges if e.target.column is None}
    assert table == {("marts.customer_regions.*", "marts.region_counts.*")}
    assert [(g.kind, str(g.dataset)) for g in gaps] == [
        (GapKind.TABLE_ONLY_LINEAGE, "marts.region_counts")
    ]


def test_a_manifest_is_a_lineage_source_the_closure_walks(tmp_path: Path) -> None:
    lineage = build_lineage(catalog(tmp_path))
    closure = lineage.graph.forward_closure([DatasetRef("wh", "crm.customers")])
    assert [d.name for d in closure.datasets] == [
        "crm.customers",
        "marts.customer_regions",
        "marts.region_counts",
    ]
