"""Declared lineage from a dbt manifest.json: models, sources, column lineage from compiled SQL."""

from __future__ import annotations

import json
from pathlib import Path

from erasure.catalog import Catalog, DbtLineageSource
from erasure.lineage.dbt import manifest_lineage
from erasure.lineage.sources import build_lineage
from erasure.model import DatasetRef, Gap, GapKind

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
    (tmp_path / "target").mkdir(exist_ok=True)
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


def model(
    name: str,
    code: str | None = None,
    *,
    materialized: str = "table",
    depends_on: str = "source.shop.crm.customers",
) -> dict[str, object]:
    """A model node of the `marts` schema as a manifest holds it, keyed by its unique id."""
    node: dict[str, object] = {
        "resource_type": "model", "database": "analytics", "schema": "marts", "name": name,
        "config": {"materialized": materialized}, "depends_on": {"nodes": [depends_on]},
    }  # fmt: skip
    if code is not None:
        node["compiled_code"] = code
    return {f"model.shop.{name}": node}


def lineage_of(
    tmp_path: Path, *models: dict[str, object], schema: dict[str, list[str]] | None = None
) -> tuple[set[tuple[str, str]], list[Gap]]:
    """The manifest's edges (source, target as text) and gaps, with `models` added."""
    manifest = json.loads(json.dumps(MANIFEST))
    for added in models:
        manifest["nodes"].update(added)
    cat = catalog(tmp_path)
    path = tmp_path / "target" / "manifest.json"
    path.write_text(json.dumps(manifest))
    edges, gaps = manifest_lineage(
        cat, path, path.read_bytes(), DbtLineageSource(manifest=""), schema or {}
    )
    return {(str(e.source), str(e.target)) for e in edges}, gaps


def test_select_star_from_a_three_part_name_expands_to_the_sources_columns(
    tmp_path: Path,
) -> None:
    """Compiled SQL names `"db"."schema"."table"`; the manifest documents the source's columns
    by its own database, schema and identifier: `*` expands to them, column by column."""
    edges, _ = lineage_of(
        tmp_path, model("customers_copy", 'select * from "analytics"."crm"."customers"')
    )
    into = {source for source, target in edges if target.startswith("marts.customers_copy")}
    assert into == {"crm.customers.id", "crm.customers.email", "crm.customers.region"}


def test_an_ephemeral_model_is_no_dataset_and_its_lineage_passes_through(tmp_path: Path) -> None:
    """dbt inlines an ephemeral model as a CTE: no relation exists, so nothing is planned for
    it, and what it reads reaches what reads it (by the compiled SQL, or table-level)."""
    staged = "model.shop.stg_customers"
    edges, gaps = lineage_of(
        tmp_path,
        model(
            "stg_customers",
            'select id, email from "analytics"."crm"."customers"',
            materialized="ephemeral",
        ),
        model(
            "emails",
            'with __dbt__cte__stg_customers as (select id, email from "analytics"."crm".'
            '"customers") select email from __dbt__cte__stg_customers',
            materialized="view",
            depends_on=staged,
        ),
        model("ids", depends_on=staged),  # no compiled SQL: table-level, through it
    )
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
    warehouse = {"crm.customers": ["id", "email", "phone", "region"]}
    for written in ('"analytics"."crm"."customers"', "crm.customers"):
        edges, _ = lineage_of(
            tmp_path, model("customers_copy", f"select * from {written}"), schema=warehouse
        )
        into = {source for source, target in edges if target.startswith("marts.customers_copy")}
        assert into == {f"crm.customers.{c}" for c in warehouse["crm.customers"]}, written
