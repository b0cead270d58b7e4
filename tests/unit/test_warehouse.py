"""The warehouse's engines (`erasure.warehouse`): SQLite behaves like the production warehouse
(schemas, foreign keys, transactional DDL), connections are named and opened the way the catalog
says, tables and schemas are read once, and no error carries a bound value or a password."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import Catalog, load_catalog
from erasure.errors import CatalogError, WarehouseError
from erasure.model import GapKind, SubjectRef
from erasure.planner import make_plan
from erasure.warehouse import Warehouse, split_name, sqlite_schema_path
from tests.unit.estate import make_estate

CANARY = "canary.7c41e0b9d2@example.org"
CATALOG = """
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.people, connection: warehouse, kind: table,
     holds_subject: {email: [email]}}
"""


def test_a_failing_statement_shows_placeholders_never_the_bound_values(tmp_path: Path) -> None:
    _catalog, warehouse = make_estate(tmp_path, CATALOG, ["CREATE TABLE crm.people (email TEXT)"])
    with pytest.raises(sa.exc.DBAPIError) as failed, warehouse.engine("warehouse").connect() as c:
        c.execute(sa.text("SELECT * FROM crm.people WHERE nope = :v"), {"v": CANARY})
    assert CANARY not in str(failed.value)
    assert "parameters hidden" in str(failed.value)


def test_a_column_the_table_lacks_is_drift_named_by_dataset_not_value(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(
        tmp_path, CATALOG, ["CREATE TABLE crm.people (email TEXT)", "CREATE TABLE crm.x (a)"]
    )
    # The catalog names a column the table lacks: the error says so, without the value.
    broken = catalog.model_copy(
        update={
            "datasets": [
                catalog.datasets[0].model_copy(update={"holds_subject": {"email": ["mail"]}})
            ]
        }
    )
    plan = make_plan(broken, SubjectRef(type="email", value=SecretStr(CANARY)), warehouse=warehouse)
    [drift] = [g for g in plan.gaps if g.kind is GapKind.CATALOG_DRIFT]
    assert drift.dataset is not None and drift.dataset.name == "crm.people"
    assert "mail" in drift.detail
    assert CANARY not in plan.model_dump_json()


def test_the_cli_reports_a_failing_plan_without_the_identifier(tmp_path: Path) -> None:
    make_estate(tmp_path, CATALOG, ["CREATE TABLE crm.people (mail TEXT)"])
    done = subprocess.run(
        [sys.executable, "-m", "erasure.cli", "plan", "--catalog", str(tmp_path / "catalog.yaml"),
         "--subject", "email=-"],
        input=CANARY + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 3  # planned, but the catalog does not describe the warehouse
    assert "catalog drift" in done.stderr and "crm.people" in done.stderr
    assert CANARY not in done.stdout + done.stderr


# ---------------------------------------------------------------------------------------------
# Connections and engines

CONNECTIONS = """
version: 1
identifiers: {email: {normalise: email}}
connections:
  warehouse: {url: "sqlite:///wh.db"}
  lake: {airflow_conn_id: lake_postgres}
datasets:
  - {namespace: w, name: crm.people, connection: warehouse, kind: table,
     holds_subject: {email: [email]}}
  - {namespace: w, name: ops.stock, connection: warehouse, kind: table,
     columns: [sku, on_hand, warehouse_code]}
  - {namespace: w, name: files.export, kind: file}
  - {namespace: l, name: lake.events, connection: lake, kind: table}
"""


def test_sqlite_keeps_each_schema_in_a_file_beside_the_main_database(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(
        tmp_path,
        CONNECTIONS,
        [
            "CREATE TABLE crm.people (email TEXT)",
            "INSERT INTO crm.people VALUES ('warehouse.canary.8e3f1a6c27@example.org')",
        ],
    )
    assert sqlite_schema_path(tmp_path / "wh.db", "crm") == tmp_path / "wh.crm.db"
    assert (tmp_path / "wh.crm.db").exists() and (tmp_path / "wh.ops.db").exists()
    # Another Warehouse over the same catalog sees the same table by the same name.
    with Warehouse(catalog).engine("warehouse").connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM crm.people")).scalar_one() == 1
    assert warehouse.dialect("warehouse") == "sqlite"
    assert warehouse.engine("warehouse") is warehouse.engine("warehouse")  # built once


def test_sqlite_enforces_foreign_keys_and_rolls_back_ddl_like_the_production_warehouse(
    tmp_path: Path,
) -> None:
    _catalog, warehouse = make_estate(
        tmp_path,
        CONNECTIONS,
        [
            "CREATE TABLE crm.homes (id INTEGER PRIMARY KEY)",
            "CREATE TABLE crm.people (email TEXT, home_id INTEGER REFERENCES homes (id))",
            "INSERT INTO crm.homes VALUES (1)",
            "INSERT INTO crm.people VALUES ('a@example.org', 1)",
        ],
    )
    engine = warehouse.engine("warehouse")
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO crm.people VALUES ('b@example.org', 99)"))
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE crm.people"))
        raise RuntimeError("the rebuild failed after dropping the table")
    with engine.connect() as conn:  # the DROP was rolled back with the transaction
        assert conn.execute(sa.text("SELECT COUNT(*) FROM crm.people")).scalar_one() == 1


def test_an_undeclared_connection_is_named_with_the_declared_ones(tmp_path: Path) -> None:
    _catalog, warehouse = make_estate(tmp_path, CONNECTIONS, [])
    with pytest.raises(CatalogError, match=r"'archive' is not declared.*\['lake', 'warehouse'\]"):
        warehouse.engine("archive")


def test_an_airflow_connection_needs_the_resolver_and_is_opened_through_it(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(tmp_path, CONNECTIONS, [])
    with pytest.raises(CatalogError, match="airflow_conn_id 'lake_postgres': resolve it"):
        warehouse.engine("lake")
    asked: list[tuple[str, str]] = []

    def resolve(connection: str, conn_id: str) -> str:
        asked.append((connection, conn_id))
        return f"sqlite:///{tmp_path}/lake.db"

    resolved = Warehouse(catalog, resolve)
    with resolved.engine("lake").begin() as conn:
        conn.execute(sa.text("CREATE TABLE events (id INTEGER)"))
    assert asked == [("lake", "lake_postgres")]
    assert (tmp_path / "lake.db").exists()
    assert resolved.url("warehouse") == f"sqlite:///{tmp_path.resolve()}/wh.db"


def test_an_unusable_url_is_refused_without_its_password(tmp_path: Path) -> None:
    password = "pw-canary-0b7d5e91c3"
    catalog = load_catalog_text(
        tmp_path,
        CONNECTIONS.replace(
            'url: "sqlite:///wh.db"', f'url: "nosuchdb+nodriver://erasure:{password}@db/wh"'
        ),
    )
    with pytest.raises(CatalogError, match="cannot use its URL") as refused:
        Warehouse(catalog).engine("warehouse")
    assert password not in str(refused.value)


def test_an_unreachable_server_is_a_warehouse_error_naming_the_dataset_not_the_password(
    tmp_path: Path,
) -> None:
    password = "pw-canary-5a9c03e7d1"
    catalog = load_catalog_text(
        tmp_path,
        CONNECTIONS.replace(
            'url: "sqlite:///wh.db"',
            f'url: "postgresql://erasure:{password}@127.0.0.1:1/wh?connect_timeout=2"',
        ),
    )
    people = catalog.by_name("crm.people")
    with (
        pytest.raises(WarehouseError, match=r"'crm\.people'.*check the server is up") as failed,
        Warehouse(catalog).connect(people) as conn,
    ):
        conn.execute(sa.text("SELECT 1"))
    assert password not in str(failed.value)


def test_a_dataset_without_a_connection_cannot_be_queried(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(tmp_path, CONNECTIONS, [])
    export = catalog.by_name("files.export")
    with (
        pytest.raises(CatalogError, match=r"'files\.export' has no connection"),
        warehouse.connect(export),
    ):
        pass


# ---------------------------------------------------------------------------------------------
# Tables and schemas


def test_a_table_is_reflected_once_and_seen_again_after_forget_tables(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(tmp_path, CONNECTIONS, [])
    people = catalog.by_name("crm.people")
    assert warehouse.table(people) is None  # not there (yet)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.people (email TEXT, region TEXT)"))
    assert warehouse.table(people) is None  # the cached answer, until told the estate changed
    warehouse.forget_tables()
    table = warehouse.table(people)
    assert table is not None and [c.name for c in table.columns] == ["email", "region"]


def test_columns_come_from_the_catalog_else_from_the_warehouse(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(
        tmp_path,
        CONNECTIONS,
        ["CREATE TABLE crm.people (email TEXT, Region TEXT)", "CREATE TABLE ops.stock (x TEXT)"],
    )
    assert warehouse.columns(catalog.by_name("crm.people")) == ["email", "Region"]
    # The catalog's schema wins over the table's.
    assert warehouse.columns(catalog.by_name("ops.stock")) == ["sku", "on_hand", "warehouse_code"]
    assert warehouse.columns(catalog.by_name("files.export")) is None


def test_the_schema_lists_every_table_and_view_of_every_attached_schema(tmp_path: Path) -> None:
    _catalog, warehouse = make_estate(
        tmp_path,
        CONNECTIONS,
        [
            "CREATE TABLE crm.People (Email TEXT, region TEXT)",
            "CREATE VIEW crm.by_region AS SELECT region FROM People",
            "CREATE TABLE ops.stock (sku TEXT)",
            "CREATE TABLE scratch (note TEXT)",
        ],
    )
    assert warehouse.schema("warehouse") == {
        "crm.people": ["Email", "region"],  # keyed as datasets are named: lower-cased
        "crm.by_region": ["region"],
        "ops.stock": ["sku"],
        "scratch": ["note"],
    }


def test_postgres_schema_lists_public_tables_also_by_their_bare_name(postgres_url: str) -> None:
    schema = f"wh_{uuid.uuid4().hex[:10]}"
    bare = f"bare_{uuid.uuid4().hex[:10]}"
    catalog = Catalog.model_validate(
        {
            "version": 1,
            "identifiers": {"email": {"normalise": "email"}},
            "connections": {"warehouse": {"url": postgres_url}},
            "datasets": [
                {"namespace": "w", "name": f"{schema}.people", "connection": "warehouse",
                 "kind": "table", "holds_subject": {"email": ["email"]}},
            ],
        }
    )  # fmt: skip
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        conn.exec_driver_sql(f"CREATE TABLE {schema}.people (email TEXT, region TEXT)")
        conn.exec_driver_sql(f"CREATE TABLE public.{bare} (id INTEGER)")
    try:
        found = warehouse.schema("warehouse")
        assert warehouse.dialect("warehouse") == "postgres"
        assert found[f"{schema}.people"] == ["email", "region"]
        assert found[f"public.{bare}"] == found[bare] == ["id"]
        table = warehouse.table(catalog.datasets[0])
        assert table is not None and table.schema == schema
    finally:
        with warehouse.engine("warehouse").begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            conn.exec_driver_sql(f"DROP TABLE public.{bare}")
        warehouse.dispose()


def test_split_name_reads_schema_and_table() -> None:
    assert split_name("crm.customers") == ("crm", "customers")
    assert split_name("customers") == (None, "customers")
    assert split_name("db.crm.customers") == ("db.crm", "customers")


def load_catalog_text(tmp_path: Path, text: str) -> Catalog:
    (tmp_path / "catalog.yaml").write_text(text)
    return load_catalog(tmp_path / "catalog.yaml")


def test_a_lakehouse_table_is_held_by_its_own_id_however_it_is_catalogued(tmp_path: Path) -> None:
    """Two spellings of one Delta table (two catalog entries, a trailing slash) share a hold:
    while one worker holds it, another waits, then gives up saying so and having done
    nothing; a nested take in one thread fails at once instead of waiting for itself."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from erasure.lakehouse import LakehouseBusy
    from erasure.lakehouse.delta import DeltaLakeTable

    write_deltalake(str(tmp_path / "ledger"), pa.table({"customer_id": ["C1"]}))
    one = DeltaLakeTable(str(tmp_path / "ledger"), "ledger")
    other = DeltaLakeTable(f"{tmp_path}/./ledger/", "ledger_too")
    assert one.physical_id() == other.physical_id()
    catalog, _ = make_estate(tmp_path, CATALOG, [])
    holder = Warehouse(catalog, hold_wait=0.5)
    waiter = Warehouse(catalog, hold_wait=0.5)
    released = threading.Event()
    inside = threading.Event()

    def hold_it() -> None:
        with holder.holding(one):
            inside.set()
            released.wait(10)

    thread = threading.Thread(target=hold_it)
    thread.start()
    try:
        inside.wait(10)
        with pytest.raises(LakehouseBusy, match="changed nothing"), waiter.holding(other):
            pass
    finally:
        released.set()
        thread.join()
    with waiter.holding(other), pytest.raises(RuntimeError, match="nested"), waiter.holding(one):
        pass
