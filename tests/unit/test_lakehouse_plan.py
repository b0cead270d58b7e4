"""A lakehouse table in a plan: a column the subject cannot be compared in is a drift gap (the
plan stops there, it never passes over it), and a table the subject is in is erased with
its history (rule 2)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from erasure.catalog import Catalog
from erasure.drift import catalog_drift
from erasure.model import Action, GapKind, Plan, SubjectRef
from erasure.planner import make_plan
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate

CATALOG = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
lakehouses:
  lake: {kind: iceberg, properties: {type: sql, uri: "sqlite:///lake.db", warehouse: lake}}
datasets:
  - {namespace: wh, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: email}}
  - {namespace: lake, name: events.contacts, kind: table, holds_subject: {email: email},
     lakehouse: {catalog: lake, table: events.contacts}}
"""


def lake_table(tmp_path: Path, email: pa.DataType, value: object) -> None:
    (tmp_path / "lake").mkdir()
    catalog = SqlCatalog(
        "lake", uri=f"sqlite:///{tmp_path / 'lake.db'}", warehouse=(tmp_path / "lake").as_uri()
    )
    catalog.create_namespace("events")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("email", email)])
    table = catalog.create_table("events.contacts", schema=schema)
    table.append(pa.Table.from_pylist([{"id": 1, "email": value}], schema=schema))


def plan_for(tmp_path: Path) -> tuple[Catalog, Warehouse, Plan]:
    catalog, warehouse = make_estate(
        tmp_path,
        CATALOG,
        [
            "CREATE TABLE crm.customers (id INTEGER, email TEXT)",
            "INSERT INTO crm.customers VALUES (1, 'ada@example.com')",
        ],
    )
    subject = SubjectRef(type="email", value="ada@example.com")
    return catalog, warehouse, make_plan(catalog, subject, warehouse=warehouse)


def test_an_email_kept_as_bytes_is_a_drift_gap_not_a_table_without_the_subject(
    tmp_path: Path,
) -> None:
    lake_table(tmp_path, pa.binary(), b"ada@example.com")
    catalog, warehouse, plan = plan_for(tmp_path)
    ds = catalog.by_name("events.contacts")

    assert "binary, nested or other values" in (catalog_drift(catalog, warehouse, ds) or "")
    gaps = [g for g in plan.gaps if g.dataset is not None and g.dataset.name == "events.contacts"]
    assert [g.kind for g in gaps] == [GapKind.CATALOG_DRIFT]
    item = next(i for i in plan.items if i.dataset.name == "events.contacts")
    assert item.action is Action.ESCALATE


def test_an_email_kept_as_text_is_erased_with_its_history(tmp_path: Path) -> None:
    lake_table(tmp_path, pa.string(), "Ada@Example.com")
    _catalog, _warehouse, plan = plan_for(tmp_path)

    item = next(i for i in plan.items if i.dataset.name == "events.contacts")
    assert (item.action, item.rule, item.evidence["method"]) == (
        Action.ERASE_ROWS,
        "2",
        "lakehouse",
    )
    assert item.evidence["rows_before"] == 1


def test_an_unreadable_files_path_is_repeated_only_where_it_cannot_spell_the_person() -> None:
    from erasure.verify import _shown_path

    uuid_file = "00000-0-37f95b55-562a-4982-bd80-293f34889b11.parquet"
    assert _shown_path(f"data/{uuid_file}") == f"data/{uuid_file}"
    assert _shown_path("s3://bucket/ada@example.com/x.parquet") == "s3://bucket/…/x.parquet"
    assert "07700900123" not in _shown_path(f"07700900123/{uuid_file}")
