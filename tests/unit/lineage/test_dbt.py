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


def with_nodes(**nodes: dict[str, object]) -> dict[str, object]:
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["nodes"].update(nodes)
    return manifest


def lineage_of(tmp_path: Path, manifest: dict[str, object]) -> tuple[set[tuple[str, str]], list]:
    cat = catalog(tmp_path)
    path = tmp_path / "target" / "manifest.json"
    path.write_text(json.dumps(manifest))
    edges, gaps = manifest_lineage(cat, path, path.read_bytes(), DbtLineageSource(manifest=""), {})
    return {(str(e.source), str(e.target)) for e in edges}, gaps


def test_select_star_from_a_three_part_name_expands_to_the_sources_columns(
    tmp_path: Path,
) -> None:
    """Compiled SQL names `"db"."schema"."table"`; the manifest documents the source's columns
    by its own database, schema and identifier: `*` expands to them, column by column."""
    manifest = with_nodes(
        **{
            "model.shop.customers_copy": {
                "resource_type": "model", "database": "analytics", "schema": "marts",
                "name": "customers_copy", "config": {"materialized": "table"},
                "compiled_code": 'select * from "analytics"."crm"."customers"',
                "depends_on": {"nodes": ["source.shop.crm.customers"]},
            }
        }
    )  # fmt: skip
    edges, _ = lineage_of(tmp_path, manifest)
    into = {source for source, target in edges if target.startswith("marts.customers_copy")}
    assert into == {"crm.customers.id", "crm.customers.email", "crm.customers.region"}


def test_an_ephemeral_model_is_no_dataset_and_its_lineage_passes_through(tmp_path: Path) -> None:
    """dbt inlines an ephemeral model as a CTE: no relation exists, so nothing is planned for
    it, and what it reads reaches what reads it (by the compiled SQL, or table-level)."""
    manifest = with_nodes(
        **{
            "model.shop.stg_customers": {
                "resource_type": "model", "database": "analytics", "schema": "marts",
                "name": "stg_customers", "config": {"materialized": "ephemeral"},
                "compiled_code": 'select id, email from "analytics"."crm"."customers"',
                "depends_on": {"nodes": ["source.shop.crm.customers"]},
            },
            "model.shop.emails": {
                "resource_type": "model", "database": "analytics", "schema": "marts",
                "name": "emails", "config": {"materialized": "view"},
                "compiled_code": 'with __dbt__cte__stg_customers as (select id, email from '
                '"analytics"."crm"."customers") select email from __dbt__cte__stg_customers',
                "depends_on": {"nodes": ["model.shop.stg_customers"]},
            },
            "model.shop.ids": {  # no compiled SQL: table-level, through the ephemeral model
                "resource_type": "model", "database": "analytics", "schema": "marts",
                "name": "ids", "config": {"materialized": "table"},
                "depends_on": {"nodes": ["model.shop.stg_customers"]},
            },
        }
    )  # fmt: skip
    edges, gaps = lineage_of(tmp_path, manifest)
    assert not any(
        "stg_customers" in source or "stg_customers" in target for source, target in edges
    )
    assert not any("stg_customers" in str(g.dataset) for g in gaps)
    assert ("crm.customers.email", "marts.emails.email") in edges
    assert ("crm.customers.*", "marts.ids.*") in edges


def test_the_warehouses_columns_come_before_the_manifests_under_a_three_part_name(
    tmp_path: Path,
) -> None:
    """The manifest documents some columns; the warehouse has them all: `*` expands to the
    warehouse's, whether compiled SQL names the table in two parts or three."""
    cat = catalog(tmp_path)
    path = tmp_path / "target" / "manifest.json"
    warehouse = {"crm.customers": ["id", "email", "phone", "region"]}
    for written in ('"analytics"."crm"."customers"', "crm.customers"):
        manifest = with_nodes(
            **{
                "model.shop.customers_copy": {
                    "resource_type": "model", "database": "analytics", "schema": "marts",
                    "name": "customers_copy", "compiled_code": f"select * from {written}",
                    "depends_on": {"nodes": ["source.shop.crm.customers"]},
                }
            }
        )  # fmt: skip
        path.write_text(json.dumps(manifest))
        edges, _ = manifest_lineage(
            cat, path, path.read_bytes(), DbtLineageSource(manifest=""), warehouse
        )
        into = {str(e.source) for e in edges if e.target.dataset.name == "marts.customers_copy"}
        assert into == {f"crm.customers.{c}" for c in warehouse["crm.customers"]}, written
