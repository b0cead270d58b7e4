"""After an erasure the deleted rows are gone from storage too, or the record says by when.

Postgres: the erasure VACUUMs the tables it deleted from, and no dead tuple is left
(pgstattuple). Where it cannot (a role that does not own the table, the table's lock held, a
transaction older than the delete still open) the record says `scheduled` with a date, the
table is listed in the store, and the daily pass (the erasure_reprove DAG) runs it once it
can, records when, and fails loudly once it is overdue. SQLite: secure_delete overwrites the
rows in the database file at the delete; no VACUUM is run there.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure import workflow
from erasure.actions.reclaim import ReclaimOverdue
from erasure.audit.records import CompletionRecord
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action
from erasure.registry.vacuums import PendingVacuums
from erasure.sample.embedded import open_demo
from erasure.services import Services
from erasure.warehouse import sqlite_schema_path
from local.demo.runner import erasure_environment, import_airflow_models
from tests.integration.workflow_support import CANARY, CONF, item_named, register, run_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]
REF = str(CONF["request_ref"])
REPO = Path(__file__).resolve().parents[2]
ORDERS, CUSTOMERS = "crm.orders", "crm.customers"
ESTATE_SCHEMAS = ("crm", "ops", "marts", "agg", "reports", "archive", "backup", "ml")


# ---------------------------------------------------------------------------------------------
# Postgres


@pytest.fixture
def superuser(postgres_url: str) -> Iterator[sa.Engine]:
    """The test server's superuser on the demo's database, with pgstattuple installed."""
    engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pgstattuple"))
    yield engine
    engine.dispose()


@pytest.fixture
def eraser_role(superuser: sa.Engine) -> Iterator[str]:
    """A login role that is not a superuser, dropped afterwards with whatever it owns."""
    role = f"erasure_wh_{uuid.uuid4().hex[:10]}"
    with superuser.connect() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER'))
    yield role
    with superuser.connect() as conn:
        conn.execute(sa.text(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER'))
        conn.execute(sa.text(f'DROP OWNED BY "{role}"'))
        conn.execute(sa.text(f'DROP ROLE "{role}"'))


def dead_tuples(superuser: sa.Engine, table: str) -> int:
    """Dead row versions still in the table's heap, counted page by page (pgstattuple)."""
    with superuser.connect() as conn:
        query = sa.text("SELECT dead_tuple_count FROM pgstattuple(CAST(:t AS regclass))")
        return int(conn.execute(query, {"t": table}).scalar_one())


def last_vacuum(superuser: sa.Engine, table: str) -> Any:
    with superuser.connect() as conn:
        query = sa.text(
            "SELECT last_vacuum FROM pg_stat_user_tables WHERE relid = CAST(:t AS regclass)"
        )
        return conn.execute(query, {"t": table}).scalar_one()


def space_of(svc: Services, ref: str, table: str) -> dict[str, Any]:
    entry = svc.action_log.get(ref, item_named(svc, ref, table), Action.ERASE_ROWS)
    assert entry is not None
    return dict(entry.evidence["space"])


def storage_of(record: CompletionRecord, table: str) -> list[dict[str, Any]]:
    artefact = next(a for a in record.body["artefacts"] if a["dataset"] == table)
    return list(artefact["storage"])


@pytest.mark.postgres
def test_after_an_erasure_no_dead_tuple_of_the_subject_is_left(
    tmp_path: Path, openbao: EmbeddedOpenBao, postgres_url: str, superuser: sa.Engine
) -> None:
    settings = open_demo(tmp_path / "demo", openbao, url=postgres_url)
    # The measure sees a dead tuple where one is: a row deleted without a VACUUM.
    with superuser.connect() as conn:
        conn.execute(
            sa.text(
                "DELETE FROM ops.stock_levels WHERE (product_id, depot) IN "
                "(SELECT product_id, depot FROM ops.stock_levels LIMIT 1)"
            )
        )
    assert dead_tuples(superuser, "ops.stock_levels") == 1

    with Services.open(settings) as svc:
        record = run_request(svc, CONF)
        spaces = {table: space_of(svc, REF, table) for table in (ORDERS, CUSTOMERS)}
        assert PendingVacuums(svc.store).list() == []
        assert svc.ledger.verify().ok

    for table, space in spaces.items():
        assert dead_tuples(superuser, table) == 0
        assert last_vacuum(superuser, table) is not None
        assert space["state"] == "reclaimed" and space["engine"] == "postgresql"
        assert space["statement"] == f"VACUUM {table}"
        assert space["dead_tuples_left"] == 0 and space["snapshots_checked"] is True
        assert [g["guarantee"] for g in storage_of(record, table)] == [
            "rows_deleted",
            "space_reclaimed",
        ]
        assert storage_of(record, table)[1]["since"] == datetime.now(UTC).date().isoformat()
    # The DPO's "delete the artefact" empties a table through the same step.
    deleted = next(
        a for a in record.body["artefacts"] if a["dataset"] == "agg.customers_by_postcode"
    )
    assert deleted["evidence"]["deletion"]["space"]["state"] == "reclaimed"
    assert dead_tuples(superuser, "agg.customers_by_postcode") == 0
    assert CANARY not in str(record.body)


def hand_the_estate_to(superuser: sa.Engine, role: str, *, except_table: str) -> None:
    """`role` owns the estate, as a warehouse role should, but for one table it only may
    read and write (ALL privileges), the way a table another team created is."""
    with superuser.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = ANY(:schemas) "
                "AND c.relkind IN ('r', 'v', 'm')"
            ),
            {"schemas": list(ESTATE_SCHEMAS)},
        ).all()
        quote = conn.dialect.identifier_preparer.quote
        for schema in {r.nspname for r in rows}:
            conn.execute(sa.text(f"ALTER SCHEMA {quote(schema)} OWNER TO {quote(role)}"))
        for schema, name, relkind in rows:
            qualified = f"{quote(schema)}.{quote(name)}"
            if f"{schema}.{name}" == except_table:
                conn.execute(sa.text(f"GRANT ALL ON {qualified} TO {quote(role)}"))
                continue
            what = {"r": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW"}[relkind]
            conn.execute(sa.text(f"ALTER {what} {qualified} OWNER TO {quote(role)}"))


def as_role(settings: Any, postgres_url: str, role: str) -> None:
    """Point the demo catalog's warehouse at `role` (the store stays where it is)."""
    url = sa.make_url(postgres_url).set(username=role).render_as_string(hide_password=False)
    path = Path(settings.catalog_path)
    text = path.read_text()
    assert postgres_url in text
    path.write_text(text.replace(postgres_url, url))


@pytest.mark.postgres
def test_a_table_the_role_may_not_vacuum_is_scheduled_then_run_by_the_daily_pass(
    tmp_path: Path,
    openbao: EmbeddedOpenBao,
    postgres_url: str,
    superuser: sa.Engine,
    eraser_role: str,
    airflow_db: Path,
) -> None:
    settings = open_demo(tmp_path / "demo", openbao, url=postgres_url)
    hand_the_estate_to(superuser, eraser_role, except_table=ORDERS)
    with superuser.connect() as conn:  # the runbook's grant: it sees every session's age
        conn.execute(sa.text(f'GRANT pg_read_all_stats TO "{eraser_role}"'))
    as_role(settings, postgres_url, eraser_role)
    today = datetime.now(UTC).date()

    with Services.open(settings) as svc:
        record = run_request(svc, CONF)
        orders, customers = space_of(svc, REF, ORDERS), space_of(svc, REF, CUSTOMERS)
        assert customers["state"] == "reclaimed"
        assert orders["state"] == "scheduled" and orders["reason"] == "not_permitted"
        assert orders["by"] == (today + timedelta(days=1)).isoformat()
        assert orders["statement"] == "VACUUM crm.orders"
        assert storage_of(record, ORDERS)[1] == {
            "guarantee": "space_reclaim_scheduled",
            "means": storage_of(record, ORDERS)[1]["means"],
            "due": orders["by"],
            "detail": {"engine": "postgresql", "statement": "VACUUM crm.orders",
                       "reason": "not_permitted", "snapshots_checked": True},
        }  # fmt: skip
        [pending] = PendingVacuums(svc.store).pending()
        assert (pending.dataset.name, pending.reason, pending.request_ref) == (
            ORDERS,
            "not_permitted",
            REF,
        )
        assert last_vacuum(superuser, ORDERS) is None  # the server skipped it

        # The daily pass while the role still does not own it: pending, not yet overdue.
        again = workflow.reclaim_pending(svc).require()
        assert again.pending == {f"warehouse/{ORDERS}": "not_permitted"} and again.overdue == {}
        # Past its date the pass fails loudly, naming the table, never the subject.
        late = workflow.reclaim_pending(svc, today=pending.due_on + timedelta(days=1))
        with pytest.raises(ReclaimOverdue, match=r"crm\.orders \(due .*the server skipped VACUUM"):
            late.require()
        assert CANARY not in str(late) and "alice" not in str(late).lower()
        assert PendingVacuums(svc.store).pending()[0].attempts == 3

    # The operator does what the runbook says: the warehouse role owns the table.
    with superuser.connect() as conn:
        conn.execute(sa.text(f'ALTER TABLE crm.orders OWNER TO "{eraser_role}"'))
    # The daily DAG runs it (its other task, reprove, proves the request again).
    import_airflow_models()
    from airflow.dag_processing.dagbag import DagBag

    saved = dict(os.environ)
    os.environ.update(erasure_environment(settings))
    try:
        dag = DagBag(str(REPO / "dags")).get_dag("erasure_reprove")
        assert dag is not None and {"reprove", "reclaim_space"} <= set(dag.task_ids)
        assert str(dag.test().state) == "success"
    finally:
        os.environ.clear()
        os.environ.update(saved)

    with Services.open(settings) as svc:
        [ran] = PendingVacuums(svc.store).list()
        assert ran.vacuumed_by == "daily_pass" and ran.vacuumed_at is not None
        assert ran.vacuumed_at.date() == today and ran.attempts == 3
        assert PendingVacuums(svc.store).pending() == []
        assert svc.ledger.verify().ok  # the record itself is never touched
    assert last_vacuum(superuser, ORDERS) is not None
    assert dead_tuples(superuser, ORDERS) == 0


@pytest.mark.postgres
def test_a_held_lock_or_an_older_transaction_leaves_it_to_the_pass(
    tmp_path: Path, openbao: EmbeddedOpenBao, postgres_url: str, superuser: sa.Engine
) -> None:
    settings = open_demo(tmp_path / "demo", openbao, url=postgres_url)
    with Services.open(settings) as svc:
        svc.settings = svc.settings.model_copy(update={"vacuum_lock_timeout_seconds": 0.5})
        register(svc, CONF, f"erasure-{REF}")
        workflow.plan_request(svc, REF)
        workflow.tombstone(svc, REF)
        for dataset in workflow.items_for(svc.plans.get(REF, 1), Action.ERASE_ROWS):
            if dataset.name not in (ORDERS, CUSTOMERS):
                workflow.erase(svc, REF, dataset)
                continue
            with superuser.connect() as other:
                other.execute(sa.text("BEGIN ISOLATION LEVEL REPEATABLE READ"))
                if dataset.name == ORDERS:
                    # Another VACUUM, an ALTER or an explicit lock holds the table's lock.
                    other.execute(sa.text("LOCK TABLE crm.orders IN SHARE UPDATE EXCLUSIVE MODE"))
                else:
                    # A report that began before the delete still sees the customer's row.
                    other.execute(sa.text("SELECT count(*) FROM crm.customers")).scalar_one()
                workflow.erase(svc, REF, dataset)
                if dataset.name == CUSTOMERS:
                    assert dead_tuples(superuser, CUSTOMERS) >= 1  # VACUUM ran, had to keep it
                other.execute(sa.text("COMMIT"))
        assert space_of(svc, REF, ORDERS)["reason"] == "lock_timeout"
        assert space_of(svc, REF, CUSTOMERS)["reason"] == "older_transaction"
        assert {e.dataset.name: e.reason for e in PendingVacuums(svc.store).pending()} == {
            ORDERS: "lock_timeout",
            CUSTOMERS: "older_transaction",
        }

        done = workflow.reclaim_pending(svc).require()

        assert sorted(done.vacuumed) == [f"warehouse/{CUSTOMERS}", f"warehouse/{ORDERS}"]
        assert done.pending == {} and done.entries_covered == 2
    assert dead_tuples(superuser, ORDERS) == dead_tuples(superuser, CUSTOMERS) == 0


# ---------------------------------------------------------------------------------------------
# SQLite


def test_on_sqlite_the_delete_overwrites_the_rows_and_nothing_is_vacuumed(
    tmp_path: Path, openbao: EmbeddedOpenBao
) -> None:
    settings = open_demo(tmp_path / "demo", openbao)
    crm_file = sqlite_schema_path(tmp_path / "demo" / "warehouse.db", "crm")
    with sqlite3.connect(crm_file) as conn:
        row = conn.execute(
            "SELECT email, alt_email, phone, full_name FROM customers WHERE lower(trim(email)) = ?",
            (CANARY,),
        ).fetchone()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    held = [str(v).strip().encode() for v in row if v]  # each once in the file: hers alone
    assert len(held) == 4 and all(crm_file.read_bytes().count(v) == 1 for v in held)

    with Services.open(settings) as svc:
        run_request(svc, CONF)
        space = space_of(svc, REF, CUSTOMERS)
        assert PendingVacuums(svc.store).list() == []

    assert space["state"] == "reclaimed" and space["engine"] == "sqlite"
    assert space["statement"] == "PRAGMA secure_delete = ON"  # no VACUUM on a SQLite file
    assert not [value for value in held if value in crm_file.read_bytes()]
    with sqlite3.connect(crm_file) as conn:
        assert conn.execute("PRAGMA page_count").fetchone()[0] == pages  # not rewritten

    # What the setting prevents: with it off, a deleted row stays in the file's free space.
    with sqlite3.connect(crm_file, isolation_level=None) as conn:
        conn.execute("PRAGMA secure_delete = OFF")
        conn.execute("INSERT INTO customers (id, email) VALUES ('T1', 'left.behind@example.org')")
        conn.execute("DELETE FROM customers WHERE id = 'T1'")
    assert b"left.behind@example.org" in crm_file.read_bytes()
