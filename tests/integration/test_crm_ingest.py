"""CRM ingest into a real Postgres table, and the crm_ingest DAG under `dag.test()`."""

from __future__ import annotations

import csv
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.crm_ingest import IngestCounts, ingest_crm_export
from erasure.errors import ConfigError, SuppressionError, WarehouseError
from erasure.pseudonym import Pepper, normalise
from erasure.store import Store, open_store
from erasure.suppression import IdentifierColumn, SuppressionList, Tombstone

V1 = Pepper(version=1, secret=b"\x31" * 32)
V2 = Pepper(version=2, secret=b"\x32" * 32)

COLUMNS = {
    "email": IdentifierColumn("email", "email"),
    "alt_email": IdentifierColumn("email", "email"),
    "phone": IdentifierColumn("phone", "e164", default_region="GB"),
    "id": IdentifierColumn("customer_id", "strip"),
}

CUSTOMERS: list[dict[str, Any]] = [
    {"id": 1, "email": "ann@example.com", "alt_email": "", "phone": "+44 20 7946 0001",
     "name": "Ann", "signed_up": "2024-01-02", "vip": "true"},
    {"id": 2, "email": "  BOB@Example.com ", "alt_email": "", "phone": "020 7946 0002",
     "name": "Bob", "signed_up": "2024-02-03", "vip": "false"},  # tombstoned, other case
    {"id": 3, "email": "cy@example.com", "alt_email": "bob.old@example.com",
     "phone": "", "name": "Cy", "signed_up": "", "vip": ""},  # tombstoned by the 2nd column
    {"id": 4, "email": "dee@example.com", "alt_email": "", "phone": "020 7946 0958",
     "name": "Dee", "signed_up": "2024-04-05", "vip": "0"},  # tombstoned phone, other format
    {"id": 5, "email": "not-an-email", "alt_email": "", "phone": "", "name": "Eve",
     "signed_up": "2024-05-06", "vip": "1"},  # invalid identifier: loaded, counted
]  # fmt: skip
KEPT = [1, 5]

TABLE_DDL = """
CREATE TABLE {table} (
    id integer PRIMARY KEY,
    email text,
    alt_email text,
    phone text,
    name text NOT NULL,
    signed_up date,
    vip boolean
)
"""


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    typed = [
        {**r, "vip": {"true": True, "1": True, "false": False, "0": False}.get(r["vip"]),
         "signed_up": r["signed_up"] or None, "alt_email": r["alt_email"] or None}
        for r in rows
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in typed))
    return path


def tombstone_the_erased(suppression: SuppressionList) -> None:
    """Bob by email under pepper v1 (before a rotation), Dee's phone under v2."""
    suppression.add(Tombstone.for_subject(V1, "email", normalise("email", "bob@example.com")))
    suppression.add(Tombstone.for_subject(V1, "email", "bob.old@example.com"))
    dee = normalise("e164", "+44 20 7946 0958")
    suppression.add(Tombstone.for_subject(V2, "phone", dee))


# -- ingest_crm_export on Postgres -----------------------------------------------------------

Ingest = Callable[..., IngestCounts]


@pytest.fixture
def store(postgres_schema_url: str) -> Iterator[Store]:
    with open_store(postgres_schema_url) as store:
        yield store


@pytest.fixture
def warehouse(postgres_url: str) -> Iterator[tuple[sa.Engine, str]]:
    """A Postgres engine and a fresh `crm_<hex>.customers` table."""
    engine = sa.create_engine(postgres_url)
    schema = f"crm_{uuid.uuid4().hex[:8]}"
    table = f"{schema}.customers"
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        conn.execute(sa.text(TABLE_DDL.format(table=table)))
    yield engine, table
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


@pytest.fixture
def ingest(store: Store, warehouse: tuple[sa.Engine, str]) -> Ingest:
    """`ingest_crm_export` into the warehouse table, with both peppers; overrides by keyword."""
    engine, table = warehouse

    def run(export: Path, **overrides: Any) -> IngestCounts:
        kwargs: dict[str, Any] = {
            "engine": engine,
            "table": table,
            "identifier_columns": COLUMNS,
            "peppers": [V1, V2],
            "suppression": SuppressionList(store),
            **overrides,
        }
        return ingest_crm_export(export, **kwargs)

    return run


def loaded(warehouse: tuple[sa.Engine, str]) -> list[dict[str, Any]]:
    engine, table = warehouse
    with engine.connect() as conn:
        result = conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY id"))
        return [dict(row) for row in result.mappings()]


@pytest.mark.integration
@pytest.mark.postgres
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_everyone_but_the_erased_is_loaded_and_a_rerun_changes_nothing(
    fmt: str,
    tmp_path: Path,
    store: Store,
    warehouse: tuple[sa.Engine, str],
    ingest: Ingest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tombstone_the_erased(SuppressionList(store))
    write = write_csv if fmt == "csv" else write_jsonl
    export = write(tmp_path / f"crm.{fmt}", CUSTOMERS)
    caplog.set_level(logging.INFO)

    counts = ingest(export, batch_rows=2)
    assert (counts.read, counts.loaded, counts.suppressed) == (5, 2, 3)
    assert counts.invalid_identifier == 1
    assert counts.suppressed_by_type == {"email": 2, "phone": 1}
    assert counts.pepper_versions == [1, 2] and counts.tombstones == 3
    first = loaded(warehouse)
    assert [r["id"] for r in first] == KEPT
    assert first[0]["vip"] is True and str(first[0]["signed_up"]) == "2024-01-02"

    assert ingest(export, batch_rows=2) == counts
    assert loaded(warehouse) == first

    for row in CUSTOMERS:
        for column in ("email", "alt_email", "phone"):
            if row[column]:
                assert row[column].strip() not in caplog.text


@pytest.mark.integration
@pytest.mark.postgres
def test_a_rerun_updates_changed_rows_by_primary_key(
    tmp_path: Path, warehouse: tuple[sa.Engine, str], ingest: Ingest
) -> None:
    ingest(write_csv(tmp_path / "a.csv", CUSTOMERS))
    ingest(write_csv(tmp_path / "b.csv", [{**CUSTOMERS[0], "name": "Ann B."}]))
    rows = loaded(warehouse)
    assert len(rows) == 5 and rows[0]["name"] == "Ann B."


@pytest.mark.integration
@pytest.mark.postgres
def test_a_bad_record_rolls_back_the_whole_load(
    tmp_path: Path, warehouse: tuple[sa.Engine, str], ingest: Ingest
) -> None:
    bad = [*CUSTOMERS[:4], {**CUSTOMERS[4], "name": None}]  # NOT NULL, after 4 batches
    with pytest.raises(WarehouseError, match="rolled back") as info:
        ingest(write_jsonl(tmp_path / "bad.jsonl", bad), batch_rows=1)
    assert "column name" in str(info.value)  # names the column, quotes no value
    assert loaded(warehouse) == []


@pytest.mark.integration
@pytest.mark.postgres
def test_a_tombstone_added_during_the_load_is_honoured(
    tmp_path: Path, store: Store, warehouse: tuple[sa.Engine, str], ingest: Ingest
) -> None:
    suppression = SuppressionList(store)
    real_count = suppression.count

    def count_then_erase_ann() -> int:  # the erasure DAG tombstones Ann mid-load
        suppression.add(Tombstone.for_subject(V1, "email", "ann@example.com"))
        return real_count()

    suppression.count = count_then_erase_ann  # type: ignore[method-assign]
    counts = ingest(write_csv(tmp_path / "crm.csv", CUSTOMERS), suppression=suppression)
    assert 1 not in [r["id"] for r in loaded(warehouse)]
    assert counts.suppressed == 1 and counts.tombstones == 1


@pytest.mark.integration
@pytest.mark.postgres
def test_export_problems_are_reported_without_values(
    tmp_path: Path, store: Store, warehouse: tuple[sa.Engine, str], ingest: Ingest
) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        ingest(tmp_path / "missing.csv")
    with pytest.raises(ConfigError, match="unknown format"):
        ingest(tmp_path / "crm.xlsx")
    (tmp_path / "broken.jsonl").write_text('{"id": 1, "email": "ann@example.com"\n')
    with pytest.raises(ConfigError, match="line 1: not JSON") as info:
        ingest(tmp_path / "broken.jsonl")
    assert "ann@" not in str(info.value)
    with pytest.raises(WarehouseError, match=r"columns \['shoe_size'\]"):
        ingest(write_csv(tmp_path / "extra.csv", [{**CUSTOMERS[0], "shoe_size": "9"}]))
    tombstone_the_erased(SuppressionList(store))
    typo = write_csv(
        tmp_path / "typo.csv",
        [CUSTOMERS[1], CUSTOMERS[2], {**CUSTOMERS[0], "signed_up": "ann@example.com"}],
    )  # Bob and Cy (lines 2, 3) are suppressed: the line named is still the export's
    with pytest.raises(WarehouseError, match="line 4 column 'signed_up': not a valid date") as info:
        ingest(typo)
    assert "ann@" not in str(info.value)
    with pytest.raises(WarehouseError, match="does not exist"):
        ingest(write_csv(tmp_path / "ok.csv", CUSTOMERS), table="no.such")
    with pytest.raises(SuppressionError, match=r"pepper version\(s\) \[2\]"):
        ingest(write_csv(tmp_path / "ok.csv", CUSTOMERS), peppers=[V1])  # fails closed
    assert loaded(warehouse) == []


# -- the DAG, under dag.test() with SQLite everywhere ----------------------------------------

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  phone: {normalise: e164, default_region: GB}
  customer_id: {normalise: strip}
connections:
  warehouse: {url: "sqlite:///warehouse.db"}
datasets:
  - namespace: warehouse
    name: crm.customers
    connection: warehouse
    kind: table
    holds_subject: {email: [email, alt_email], phone: phone, customer_id: id}
"""


@pytest.mark.integration
@pytest.mark.airflow
def test_the_dag_loads_the_export_without_the_erased(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from erasure.catalog import load_catalog
    from erasure.warehouse import Warehouse

    (tmp_path / "catalog.yaml").write_text(CATALOG)
    catalog = load_catalog(tmp_path / "catalog.yaml")
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text(TABLE_DDL.format(table="crm.customers")))
    store_url = f"sqlite:///{tmp_path}/erasure.db"
    with open_store(store_url) as store:
        tombstone_the_erased(SuppressionList(store))
    export = write_csv(tmp_path / "crm.csv", CUSTOMERS)
    monkeypatch.setenv("ERASURE_CATALOG_PATH", str(tmp_path / "catalog.yaml"))
    monkeypatch.setenv("ERASURE_STORE_URL", store_url)
    monkeypatch.setenv("ERASURE_CRM_EXPORT", str(tmp_path / "not-tonight.csv"))  # param wins

    import dags.crm_ingest as module

    monkeypatch.setattr(module, "pepper_source", lambda: [V1, V2])
    started = time.perf_counter()
    run = module.crm_ingest_dag.test(run_conf={"export_path": str(export)})
    took = time.perf_counter() - started
    print(f"crm_ingest dag.test(): {took:.1f} s")

    assert run.state == "success"
    [ti] = run.get_task_instances()
    with warehouse.engine("warehouse").connect() as conn:
        ids = conn.execute(sa.text("SELECT id FROM crm.customers ORDER BY id")).scalars().all()
    warehouse.dispose()
    assert ids == KEPT
    counts = ti.xcom_pull(task_ids="load_crm_export")
    assert (counts["read"], counts["loaded"], counts["suppressed"]) == (5, 2, 3)
    assert "@" not in json.dumps(counts)  # the XCom holds counts, no identifier
