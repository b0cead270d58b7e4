"""Catalog connections given as `airflow_conn_id`, resolved through the Postgres provider's
hook in gdpr_erasure, the rebuild DAGs and crm_ingest, on real Postgres under `dag.test()`.

The Airflow connection is defined the way the Helm chart does it: an `AIRFLOW_CONN_<ID>`
environment variable (from a Kubernetes Secret).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
import yaml

from erasure.catalog import load_catalog
from erasure.errors import CatalogError, WarehouseError
from erasure.keys.vault import EmbeddedOpenBao
from erasure.sample.embedded import open_demo
from erasure.services import Services
from erasure.store import open_store
from erasure.suppression import SuppressionList
from erasure_airflow.connections import postgres_url, warehouse
from local.demo.runner import REPO, erasure_environment, load_decisions, run_erasure
from tests.integration.test_crm_ingest import (
    CUSTOMERS,
    KEPT,
    TABLE_DDL,
    V1,
    V2,
    tombstone_the_erased,
    write_csv,
)
from tests.integration.workflow_support import sealed

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.postgres]

CONN_ID = "erasure_warehouse"
CANARY = "Alice.SMITH@example.com"
PASSWORD = "not-the-real-one-7c1f"


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    """A database of its own (the demo estate recreates its schemas), dropped afterwards."""
    name = f"erasure_wh_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = postgres_url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def environment() -> Iterator[dict[str, str]]:
    """os.environ, restored afterwards."""
    saved = dict(os.environ)
    try:
        yield os.environ  # type: ignore[misc]
    finally:
        os.environ.clear()
        os.environ.update(saved)


def use_airflow_connection(catalog_path: Path, conn_id: str = CONN_ID) -> None:
    """Rewrite the catalog's `warehouse` connection to name an Airflow connection."""
    doc = yaml.safe_load(catalog_path.read_text())
    doc["connections"]["warehouse"] = {"airflow_conn_id": conn_id}
    catalog_path.write_text(yaml.safe_dump(doc, sort_keys=False))


def count(url: str, sql: str) -> int:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql)).scalar_one())
    finally:
        engine.dispose()


def conf(settings: Any, ref: str) -> dict[str, str]:
    """The run's conf as the erasure desk leaves it: the reference and the sealed handle."""
    data = {
        "request_ref": ref,
        "identifier_type": "email",
        "identifier": CANARY,
        "received_on": "2026-11-20",
        "legal_ground": "art17_1_b",
        "notes": None,
        "dry_run": False,
    }
    with Services.open(settings) as svc:
        return sealed(svc, data)


def test_gdpr_erasure_and_its_rebuilds_use_the_airflow_connection(
    tmp_path: Path,
    openbao: EmbeddedOpenBao,
    airflow_db: Path,
    database: str,
    environment: dict[str, str],
) -> None:
    settings = open_demo(tmp_path / "demo", openbao, url=database)
    assert settings.catalog_path is not None
    use_airflow_connection(settings.catalog_path)
    environment.update(erasure_environment(settings))
    environment[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = database
    customers = count(database, "SELECT COUNT(*) FROM crm.customers")

    run = run_erasure(conf(settings, "CONN-PG-1"), load_decisions())

    assert str(run.state) == "success"
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["rebuild"] == "success", states  # build_marts/build_reports via the conn id
    assert count(database, "SELECT COUNT(*) FROM crm.customers") == customers - 1
    assert count(database, "SELECT COUNT(*) FROM crm.orders WHERE customer_id = 'C0001'") == 0
    for mart in ("customer_ltv", "customer_segments"):  # rebuilt by the rematerialisation DAG
        assert count(database, f"SELECT COUNT(*) FROM marts.{mart}") == customers - 1, mart
    with Services.open(settings, resolve=postgres_url) as svc:
        assert svc.requests.get("CONN-PG-1").status.value == "complete_with_exemptions"  # type: ignore[union-attr]
        assert svc.warehouse.engine("warehouse").dialect.name == "postgresql"


def test_crm_ingest_loads_through_the_airflow_connection(
    tmp_path: Path, airflow_db: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA crm")
        conn.execute(TABLE_DDL.format(table="crm.customers"))
    (tmp_path / "catalog.yaml").write_text(
        "version: 1\n"
        "identifiers: {email: {normalise: email}, phone: {normalise: e164, default_region: GB},"
        " customer_id: {normalise: strip}}\n"
        f"connections: {{warehouse: {{airflow_conn_id: {CONN_ID}}}}}\n"
        "datasets:\n"
        "  - {namespace: warehouse, name: crm.customers, connection: warehouse, kind: table,\n"
        "     holds_subject: {email: [email, alt_email], phone: phone, customer_id: id}}\n"
    )
    store_url = f"sqlite:///{tmp_path}/erasure.db"
    with open_store(store_url) as store:
        tombstone_the_erased(SuppressionList(store))
    monkeypatch.setenv("ERASURE_CATALOG_PATH", str(tmp_path / "catalog.yaml"))
    monkeypatch.setenv("ERASURE_STORE_URL", store_url)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", database)

    import dags.crm_ingest as module

    monkeypatch.setattr(module, "pepper_source", lambda: [V1, V2])
    run = module.crm_ingest_dag.test(
        run_conf={"export_path": str(write_csv(tmp_path / "crm.csv", CUSTOMERS))}
    )

    assert run.state == "success"
    with psycopg.connect(database) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM crm.customers ORDER BY id")]
    assert ids == KEPT


def test_a_missing_airflow_connection_says_how_to_create_it(
    tmp_path: Path, airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_ERASURE_NOWHERE", raising=False)
    (tmp_path / "catalog.yaml").write_text(
        "version: 1\nidentifiers: {email: {normalise: email}}\n"
        "connections: {warehouse: {airflow_conn_id: erasure_nowhere}}\n"
        "datasets: [{namespace: warehouse, name: crm.customers, connection: warehouse,"
        " kind: table, holds_subject: {email: email}}]\n"
    )
    catalog = load_catalog(tmp_path / "catalog.yaml")

    with pytest.raises(CatalogError) as raised:
        warehouse(catalog).engine("warehouse")

    message = str(raised.value)
    assert "'erasure_nowhere'" in message and "catalog connection 'warehouse'" in message
    assert "airflow connections add erasure_nowhere" in message
    assert "AIRFLOW_CONN_ERASURE_NOWHERE" in message


def test_the_rebuild_dag_fails_on_a_missing_connection(
    tmp_path: Path,
    airflow_db: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "catalog.yaml").write_text(
        "version: 1\nidentifiers: {email: {normalise: email}}\n"
        "connections: {warehouse: {airflow_conn_id: erasure_nowhere}}\n"
        "datasets: [{namespace: warehouse, name: marts.customer_ltv, connection: warehouse,"
        " kind: table, rebuild: {dag_id: build_marts}}]\n"
    )
    monkeypatch.setenv("ERASURE_CATALOG_PATH", str(tmp_path / "catalog.yaml"))
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(REPO / "dags")).get_dag("build_marts")
    assert dag is not None

    run = dag.test()

    assert str(run.state) == "failed"
    # Under dag.test() the task's exception stays in its log; the message itself is the
    # previous test's (the same resolver raised it here).


def test_a_failing_connection_never_shows_its_password(
    tmp_path: Path, airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on port 1: the connection fails, and the message must not carry the URI.
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}", f"postgresql://erasure:{PASSWORD}@127.0.0.1:1/wh"
    )
    (tmp_path / "catalog.yaml").write_text(
        "version: 1\nidentifiers: {email: {normalise: email}}\n"
        f"connections: {{warehouse: {{airflow_conn_id: {CONN_ID}}}}}\n"
        "datasets: [{namespace: warehouse, name: crm.customers, connection: warehouse,"
        " kind: table, holds_subject: {email: email}}]\n"
    )
    catalog = load_catalog(tmp_path / "catalog.yaml")
    wh = warehouse(catalog)

    engine = wh.engine("warehouse")
    with pytest.raises(WarehouseError) as raised, wh.connect(catalog.datasets[0]):
        pass

    assert engine.url.password == PASSWORD  # resolved through the hook, password and all
    assert PASSWORD not in str(raised.value)
    assert PASSWORD not in repr(engine.url) and PASSWORD not in str(engine)
    assert engine.hide_parameters  # a failing statement's message never carries its values
