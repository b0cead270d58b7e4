"""Catalog by policy: `defaults` describe every dataset the lineage reaches that has no entry
of its own, by namespace and name pattern; an entry (or a dbt manifest's node) wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.catalog import Catalog, DatasetKind, DbtRebuild, load_catalog
from erasure.errors import CatalogError
from erasure.model import Action, DatasetRef
from erasure.planner import make_plan
from erasure.pseudonym import Pepper
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate
from tests.unit.test_planner import CATALOG, LINEAGE_SQL, NOW, ROWS, SUBJECT, _export_events

HEAD = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: wh, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: email}}
  - {namespace: wh, name: marts.special, connection: warehouse, kind: model}
"""


def catalog_with(tmp_path: Path, defaults: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(HEAD + defaults)
    return path


def test_the_first_matching_default_describes_a_dataset_with_no_entry(tmp_path: Path) -> None:
    catalog = load_catalog(
        catalog_with(
            tmp_path,
            """
defaults:
  - match: {namespace: wh, name: "Marts.*"}
    kind: table
    connection: warehouse
    rebuild: {dag_id: build_marts}
    owner: analytics
  - match: {name: "marts.*"}
    kind: model
  - match: {namespace: "s3://*", name: "exports/*"}
    kind: file
    storage: immutable
    retention_days: 30
""",
        )
    )
    mart = catalog.dataset(DatasetRef("wh", "marts.customer_ltv"))
    assert mart is not None and mart.kind is DatasetKind.TABLE and mart.owner == "analytics"
    assert mart.ref == DatasetRef("wh", "marts.customer_ltv")
    assert mart.rebuild is not None and mart.rebuild.plan_detail() == {"dag_id": "build_marts"}
    described = catalog.description(DatasetRef("wh", "marts.customer_ltv"))
    assert described is not None
    assert described.source == "catalog default #1 (namespace 'wh', name 'marts.*')"
    # the namespace is matched as written; the second default takes another namespace's marts
    other = catalog.dataset(DatasetRef("lake", "marts.customer_ltv"))
    assert other is not None and other.kind is DatasetKind.MODEL
    # `*` crosses slashes: every object under the prefix
    export = catalog.dataset(DatasetRef("s3://bucket", "exports/2026/11/people.csv"))
    assert export is not None and export.storage == "immutable" and export.retention_days == 30
    # an entry of its own wins, and has no description
    special = DatasetRef("wh", "marts.special")
    assert catalog.dataset(special) is catalog.by_name("marts.special")
    assert catalog.description(special) is None
    # what no default matches stays unknown (it escalates as uncatalogued)
    assert catalog.dataset(DatasetRef("wh", "staging.x")) is None
    assert catalog.description(DatasetRef("wh", "staging.x")) is None


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        (
            "  - {match: {name: 'a.*'}, kind: table, connection: nowhere}",
            "catalog default #1 (namespace '*', name 'a.*') field 'connection': 'nowhere' is "
            "not declared",
        ),
        (
            "  - {match: {name: 'a.*'}, kind: table, encryption: per_subject}",
            "field 'encryption': per_subject applies to immutable storage",
        ),
        (
            "  - {match: {name: 'a.*'}, kind: table, holds_subject: {email: email}}",
            "unknown field",
        ),
        (
            "  - {match: {name: 'a.*'}, kind: table, rebuild: {kind: view}}",
            "a view rebuild target cannot rebuild a table",
        ),
        ("  - {kind: table}", "match"),
    ],
)
def test_a_default_that_could_not_be_an_entry_is_refused_saying_why(
    tmp_path: Path, default: str, expected: str
) -> None:
    with pytest.raises(CatalogError) as refused:
        load_catalog(catalog_with(tmp_path, "defaults:\n" + default + "\n"))
    assert expected in str(refused.value)


def planner_estate(tmp_path: Path, defaults: str) -> tuple[Catalog, Warehouse]:
    """The planner tests' estate, with `defaults` added to its catalog."""
    (tmp_path / "sql").mkdir()
    for target, select in LINEAGE_SQL.items():
        (tmp_path / "sql" / f"{target}.sql").write_text(select)
    return make_estate(tmp_path, CATALOG.replace("lineage:", defaults + "lineage:"), ROWS)


def test_a_plan_acts_on_what_a_default_says_and_names_the_default(tmp_path: Path) -> None:
    """The planner's estate, whose `x.unknown` escalated as uncatalogued: under a default
    that says how such datasets are rebuilt it is rebuilt, and the item names the default."""
    defaults = """
defaults:
  - match: {namespace: w, name: "x.*"}
    kind: table
    connection: warehouse
    rebuild: {dag_id: build_x}
"""
    catalog, warehouse = planner_estate(tmp_path, defaults)
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)
    item = next(i for i in plan.items if i.dataset.name == "x.unknown")
    assert (item.action, item.rule) == (Action.REBUILD, "5")
    assert item.evidence["dag_id"] == "build_x"
    assert item.evidence["described_by"] == "catalog default #1 (namespace 'w', name 'x.*')"
    # an entry of its own is untouched by the default and carries no description
    assert all(
        "described_by" not in i.evidence for i in plan.items if i.dataset.name != "x.unknown"
    )


def test_an_immutable_default_escalates_with_its_retention(tmp_path: Path) -> None:
    defaults = """
defaults:
  - {match: {name: "x.*"}, kind: backup, storage: immutable, retention_days: 7}
"""
    catalog, warehouse = planner_estate(tmp_path, defaults)
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW)
    item = next(i for i in plan.items if i.dataset.name == "x.unknown")
    assert (item.action, item.rule, item.kind) == (Action.ESCALATE, "4", "backup")


def test_a_dbt_rebuild_may_be_written_as_an_entry(tmp_path: Path) -> None:
    catalog = load_catalog(
        catalog_with(
            tmp_path,
            """
  - {namespace: wh, name: marts.ltv, connection: warehouse, kind: table,
     rebuild: {select: "fqn:shop.marts.ltv", project_dir: dbt}}
""",
        )
    )
    entry = catalog.by_name("marts.ltv")
    assert isinstance(entry.rebuild, DbtRebuild)
    assert entry.rebuild.producer() == "dbt fqn:shop.marts.ltv"


def test_a_default_never_lets_a_name_that_names_the_subject_through(tmp_path: Path) -> None:
    """Rule 1a keeps only the catalog's own names: an export a default describes, named after
    the person, is planned under a keyed hash like any uncatalogued one."""
    defaults = """
defaults:
  - {match: {namespace: "s3://dsar-exports"}, kind: file, storage: immutable,
     retention_days: 30}
"""
    catalog, warehouse = planner_estate(tmp_path, defaults)
    plan = make_plan(
        catalog, SUBJECT, warehouse=warehouse, now=NOW, events=_export_events(),
        pepper=Pepper(1, b"k" * 32),
    )  # fmt: skip
    assert "ann@example.com" not in plan.model_dump_json().lower()
    [named] = [i for i in plan.items if i.dataset.namespace == "s3://dsar-exports"]
    assert (named.action, named.rule) == (Action.ESCALATE, "1a")


@pytest.mark.parametrize(
    ("rebuild", "why"),
    [
        ("{sql: 'CREATE TABLE x AS SELECT 1'}", "a sql rebuild names one dataset's"),
        ("{select: 'fqn:shop.marts.x', project_dir: dbt}", "a dbt rebuild names one dataset's"),
    ],
)
def test_a_default_may_not_give_many_datasets_one_datasets_rebuild(
    tmp_path: Path, rebuild: str, why: str
) -> None:
    default = f"  - {{match: {{name: 'marts.*'}}, kind: table, rebuild: {rebuild}}}"
    with pytest.raises(CatalogError, match=why):
        load_catalog(catalog_with(tmp_path, "defaults:\n" + default + "\n"))


def test_a_view_default_needs_a_connection_to_check_it_is_one(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="a default of kind view needs a connection"):
        load_catalog(catalog_with(tmp_path, "defaults:\n  - {match: {name: 'v.*'}, kind: view}\n"))


def test_a_name_no_entry_could_have_stays_unknown_and_is_not_repeated(tmp_path: Path) -> None:
    catalog = load_catalog(
        catalog_with(tmp_path, "defaults:\n  - {match: {namespace: 's3://x'}, kind: file}\n")
    )
    for name in ("exports/ada@example.com/../f.csv", "a" * 600, "tab\there"):
        assert catalog.dataset(DatasetRef("s3://x", name)) is None
