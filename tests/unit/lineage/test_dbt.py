"""Declared lineage from a dbt manifest.json: models, sources, column lineage from compiled SQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from erasure.catalog import Catalog, DbtLineageSource
from erasure.errors import LineageError
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
        "original_file_path": f"models/marts/{name}.sql",
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


def described(tmp_path: Path, *models: dict[str, object], **source: object) -> Catalog:
    """The test catalog with `models` added to its manifest and the dbt source's options."""
    manifest = json.loads(json.dumps(MANIFEST))
    for added in models:
        manifest["nodes"].update(added)
    cat = catalog(tmp_path)
    (tmp_path / "target" / "manifest.json").write_text(json.dumps(manifest))
    return cat.model_copy(
        update={
            "lineage": cat.lineage.model_copy(
                update={
                    "dbt": [
                        DbtLineageSource(
                            manifest="target/manifest.json",
                            **{"connection": "warehouse", **source},  # type: ignore[arg-type]
                        )
                    ]
                }
            )
        }
    )


def test_a_manifest_describes_each_node_by_its_materialisation(tmp_path: Path) -> None:
    """Models with no catalog entry: a view is computed on read, a table or materialized view
    rebuilt by `dbt run`, what keeps history escalates with the reason, an ephemeral model or
    a node with an unusable name is no dataset."""
    snapshot = {
        "snapshot.shop.people_history": {
            "resource_type": "snapshot", "schema": "snapshots", "name": "people_history",
            "alias": "people_history", "fqn": ["shop", "people_history", "people_history"],
            "config": {"materialized": "snapshot"},
        },
        "seed.shop.regions": {"resource_type": "seed", "schema": "marts", "name": "regions"},
        "model.shop.bad": {"resource_type": "model", "schema": "marts", "name": "a\nb",
                           "config": {"materialized": "table"}},
    }  # fmt: skip
    cat = described(
        tmp_path,
        model("v", materialized="view"),
        model("t", materialized="table"),
        model("mv", materialized="materialized_view"),
        model("inc", materialized="incremental"),
        model("eph", materialized="ephemeral"),
        model("custom", materialized="my_special_table"),
        model("unsaid", materialized=""),
        snapshot,
    )

    def entry(name: str) -> tuple[str, str | None, str | None] | None:
        ref = DatasetRef("wh", name)
        found, why = cat.dataset(ref), cat.description(ref)
        if found is None:
            return None
        assert why is not None
        return found.kind.value, found.rebuild.kind if found.rebuild else None, why.note

    assert entry("marts.v") == ("view", None, None)
    assert entry("marts.t") == ("table", "dbt", None)
    assert entry("marts.mv") == ("materialized_view", "dbt", None)
    kind, rebuild, note = entry("marts.inc") or ("", "", "")
    assert (kind, rebuild) == ("table", None) and note is not None
    assert "incremental model keeps the rows of its earlier runs" in note
    assert "no run removes them" in (entry("snapshots.people_history") or ("", "", ""))[2]
    assert "CSV file" in (entry("marts.regions") or ("", "", ""))[2]
    assert "'my_special_table' is not one this system" in (entry("marts.custom") or ("",) * 3)[2]
    assert "(none given) is not one" in (entry("marts.unsaid") or ("",) * 3)[2]
    assert entry("marts.eph") is None
    assert entry("marts.a\nb") is None
    # the catalog's own entries win over the manifest's description
    assert cat.description(DatasetRef("wh", "marts.customer_regions")) is None
    rebuilt = cat.dataset(DatasetRef("wh", "marts.t"))
    assert rebuilt is not None and rebuilt.rebuild is not None
    assert rebuilt.rebuild.model_dump(
        include={"select", "node", "full_refresh", "project_dir", "materialized", "depends_on"}
    ) == {
        "select": "path:models/marts/t.sql",  # one file: one model, nothing else
        "node": "model.shop.t",
        "depends_on": ["source.shop.crm.customers"],
        "materialized": "table",
        "full_refresh": False,
        "project_dir": str(tmp_path.resolve()),
    }


def test_a_dbt_source_may_rebuild_by_a_dag_or_describe_nothing(tmp_path: Path) -> None:
    ref = DatasetRef("wh", "marts.t")
    by_dag = described(tmp_path, model("t"), dag_id="dbt_shop")
    found = by_dag.dataset(ref)
    assert found is not None and found.rebuild is not None
    assert found.rebuild.plan_detail() == {"dag_id": "dbt_shop"}
    assert described(tmp_path, model("t"), describe=False).dataset(ref) is None
    full = described(tmp_path, model("inc", materialized="incremental"), incremental="full_refresh")
    inc = full.dataset(DatasetRef("wh", "marts.inc"))
    assert inc is not None and inc.rebuild is not None
    assert inc.rebuild.plan_detail() == {
        "select": "path:models/marts/inc.sql",
        "full_refresh": True,
    }


def test_an_unreadable_manifest_describes_nothing_and_the_lineage_build_says_why(
    tmp_path: Path,
) -> None:
    cat = described(tmp_path, model("t"))
    (tmp_path / "target" / "manifest.json").write_text("{not json")
    assert cat.dataset(DatasetRef("wh", "marts.t")) is None
    with pytest.raises(LineageError, match=r"not a dbt manifest\.json"):
        build_lineage(cat)


def test_dbts_catalog_json_gives_the_columns_a_select_star_expands_to(tmp_path: Path) -> None:
    """`dbt docs generate` writes catalog.json beside the manifest: the warehouse's columns of
    each relation (a source the manifest documents no column of included)."""
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["sources"]["source.shop.crm.customers"]["columns"] = {}
    manifest["nodes"].update(model("customers_copy", 'select * from "analytics"."crm"."customers"'))
    cat = catalog(tmp_path)
    (tmp_path / "target" / "manifest.json").write_text(json.dumps(manifest))
    columns = {
        name: {"type": "text", "index": index, "name": name.upper()}
        for index, name in enumerate(["id", "email", "phone"], start=1)
    }
    (tmp_path / "target" / "catalog.json").write_text(json.dumps({
        "metadata": {"dbt_version": "1.11.16"},
        "sources": {"source.shop.crm.customers": {
            "metadata": {"type": "BASE TABLE", "schema": "crm", "name": "customers",
                         "database": "analytics"},
            "columns": columns,
        }},
        "nodes": {},
    }))  # fmt: skip
    edges = {(str(e.source), str(e.target)) for e in build_lineage(cat).graph.edges()}
    into = {source for source, target in edges if target.startswith("marts.customers_copy.")}
    assert into == {"crm.customers.id", "crm.customers.email", "crm.customers.phone"}


def test_a_hostile_manifest_describes_nothing_it_cannot_read_and_never_crashes(
    tmp_path: Path,
) -> None:
    """Catalog.dataset is asked everywhere: a node of the wrong shape is left undescribed
    (rule 1), a manifest nested past reading describes nothing."""
    odd = {
        "model.shop.listy": {"resource_type": ["model"], "schema": "marts", "name": "listy"},
        "model.shop.stringy": {"resource_type": "model", "schema": "marts", "name": "stringy",
                               "config": "table"},
        "model.shop.badname": {"resource_type": "model", "schema": ["marts"], "name": "x",
                               "config": {"materialized": "table"}},
        "": {"resource_type": "model", "schema": "marts", "alias": "noid",
             "config": {"materialized": "table"}},
    }  # fmt: skip
    cat = described(tmp_path, model("t"), odd)
    for name in ("marts.listy", "marts.stringy", "marts.x"):
        assert cat.dataset(DatasetRef("wh", name)) is None, name
    noid = cat.dataset(DatasetRef("wh", "marts.noid"))  # described, but no run can name it
    assert noid is not None and noid.rebuild is None
    assert cat.dataset(DatasetRef("wh", "marts.t")) is not None
    (tmp_path / "target" / "manifest.json").write_text("[" * 100_000)
    deep = described(tmp_path, describe=True)
    (tmp_path / "target" / "manifest.json").write_text("[" * 100_000)
    assert deep.dataset(DatasetRef("wh", "marts.t")) is None


def test_nothing_is_described_without_a_warehouse_to_check_it_in(tmp_path: Path) -> None:
    assert (
        described(tmp_path, model("t"), connection=None).dataset(DatasetRef("wh", "marts.t"))
        is None
    )


def test_two_nodes_written_as_one_dataset_describe_neither(tmp_path: Path) -> None:
    """The same schema.alias in two databases is one catalog name: neither is described, so
    neither is rebuilt on the other's behalf."""
    other_db = model("t")
    node = other_db["model.shop.t"]
    assert isinstance(node, dict)
    twin = {"model.other.t": {**node, "database": "elsewhere"}}
    cat = described(tmp_path, model("t"), twin, openlineage_namespace="postgres://wh:5432")
    assert cat.dataset(DatasetRef("wh", "marts.t")) is None
    # nor under either's OpenLineage name: two relations would be one dataset there
    for database in ("analytics", "elsewhere"):
        assert cat.dataset(DatasetRef("postgres://wh:5432", f"{database}.marts.t")) is None


def test_a_namespace_the_catalog_cannot_tell_leaves_the_node_undescribed(tmp_path: Path) -> None:
    """With entries in several namespaces and no `namespace:` on the dbt source, the order of
    the entries must not decide a model's identity."""
    cat = described(tmp_path, model("t"))
    mixed = cat.model_copy(
        update={
            "datasets": [
                *cat.datasets,
                cat.datasets[0].model_copy(update={"namespace": "lake", "name": "other.x"}),
            ]
        }
    )
    assert mixed.dataset(DatasetRef("wh", "marts.t")) is None
    named = described(tmp_path, model("t"), namespace="wh")
    assert named.dataset(DatasetRef("wh", "marts.t")) is not None


def test_a_plan_keeps_its_description_across_runs_that_change_nothing_of_it(
    tmp_path: Path,
) -> None:
    """dbt rewrites the manifest on every run (generated_at, invocation_id): what a plan
    recorded of a model stays true until the model itself changes."""
    ref = DatasetRef("wh", "marts.t")
    first = described(tmp_path, model("t"))
    before = first.described_as(ref)
    manifest = json.loads((tmp_path / "target" / "manifest.json").read_text())
    manifest["metadata"].update(generated_at="2026-12-05T02:00:00Z", invocation_id="next")
    (tmp_path / "target" / "manifest.json").write_text(json.dumps(manifest))
    again = catalog(tmp_path).model_copy(update={"lineage": first.lineage})  # reads it anew
    (tmp_path / "target" / "manifest.json").write_text(json.dumps(manifest))
    assert again.described_as(ref) == before and before["described_digest"]
    assert described(tmp_path, model("t", materialized="view")).described_as(ref) != before


def test_a_model_whose_hooks_may_write_rows_is_not_rebuilt_by_dbt(tmp_path: Path) -> None:
    granted = model("granted")
    granted["model.shop.granted"]["config"]["post-hook"] = ["grant select on {{ this }} to bi"]  # type: ignore[index]
    refilled = model("refilled")
    refilled["model.shop.refilled"]["config"]["post-hook"] = [  # type: ignore[index]
        {"sql": "insert into {{ this }} select * from archive.refilled", "transaction": True}
    ]
    cat = described(tmp_path, granted, refilled)
    grant = cat.dataset(DatasetRef("wh", "marts.granted"))
    assert grant is not None and grant.rebuild is not None
    refill = cat.dataset(DatasetRef("wh", "marts.refilled"))
    why = cat.description(DatasetRef("wh", "marts.refilled"))
    assert refill is not None and refill.rebuild is None
    assert why is not None and "runs 1 hook statement(s)" in str(why.note)


def test_a_deploy_that_moves_the_project_keeps_what_a_plan_recorded(tmp_path: Path) -> None:
    """git-sync swaps the checkout on every commit: the same project elsewhere is described
    the same."""
    ref = DatasetRef("wh", "marts.t")
    here = described(tmp_path, model("t"), project_dir="release-1").described_as(ref)
    there = described(tmp_path, model("t"), project_dir="release-2").described_as(ref)
    assert here == there
