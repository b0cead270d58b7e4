"""gdpr_erasure under dag.test(): the real DAG, real OpenBao, SQLite metadata DB, the demo
estate on SQLite and on Postgres; prompts answered programmatically as the DPO would."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.config import Settings
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action
from erasure.sample.embedded import open_demo
from erasure.sample.seed import DEMO_SUBJECT
from erasure.services import Services
from erasure.workflow import items_for
from local.demo.runner import erasure_environment, load_decisions, run_erasure
from tests.integration.workflow_support import sealed

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.vault]

CANARY = "Alice.SMITH@example.com"  # the demo customer, typed the way a person might
# Notes may not name the subject (refused at entry); what they say is still kept out of Airflow.
NOTE_CANARY = "note-canary-7f3c9e1a5b"


def submission(ref: str, **fields: Any) -> dict[str, Any]:
    return {
        "request_ref": ref,
        "identifier_type": "email",
        "identifier": CANARY,
        "received_on": "2026-11-20",
        "legal_ground": "art17_1_b",
        "notes": f"Wrote in through the web form ({NOTE_CANARY})",
        "dry_run": False,
        **fields,
    }


def conf(ref: str, **fields: Any) -> dict[str, str]:
    """The run's conf as the erasure desk leaves it: the reference and the sealed handle."""
    with Services.open(Settings()) as svc:  # the environment `estate` set
        return sealed(svc, submission(ref, **fields))


@pytest.fixture
def estate(tmp_path: Path, openbao: EmbeddedOpenBao, airflow_db: Path) -> Iterator[Any]:
    settings = open_demo(tmp_path / "demo", openbao)
    saved = dict(os.environ)
    os.environ.update(erasure_environment(settings))
    try:
        yield settings
    finally:
        os.environ.clear()
        os.environ.update(saved)


def count(engine: sa.Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql)).scalar_one())


def tables_holding(home: Path, *needles: str) -> list[str]:
    """Tables of Airflow's metadata DB with a row that contains any needle (case-insensitive)."""
    db = next(home.glob("*.db"))
    found = []
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            text = "\n".join(repr(row) for row in conn.execute(f'SELECT * FROM "{table}"')).lower()
            if any(needle.lower() in text for needle in needles):
                found.append(table)
    return found


def run_and_check(settings: Any, airflow_db: Path, ref: str) -> None:
    with Services.open(settings) as svc:
        engine = svc.warehouse.engine("warehouse")
        stock = count(engine, "SELECT COUNT(*) FROM ops.stock_levels")
        customers = count(engine, "SELECT COUNT(*) FROM crm.customers")
    run = run_erasure(conf(ref), load_decisions())
    assert str(run.state) == "success"
    with Services.open(settings) as svc:
        engine = svc.warehouse.engine("warehouse")
        plan = svc.plans.get(ref, 1)
        assert svc.requests.get(ref).status.value == "complete_with_exemptions"  # type: ignore[union-attr]
        assert count(engine, "SELECT COUNT(*) FROM crm.customers") == customers - 1
        assert count(engine, "SELECT COUNT(*) FROM ops.stock_levels") == stock
        for mart in ("customer_ltv", "customer_segments", "segment_history"):  # rebuilt, not lost
            assert count(engine, f"SELECT COUNT(*) FROM marts.{mart}") == customers - 1, mart
        for table in ("crm.customers", "marts.customer_ltv"):
            assert (
                count(engine, f"SELECT COUNT(*) FROM {table} WHERE lower(email) LIKE '%alice%'")
                == 0
            )
        assert count(engine, "SELECT COUNT(*) FROM crm.orders WHERE customer_id = 'C0001'") == 0
        assert (
            count(engine, "SELECT COUNT(*) FROM marts.customer_ltv WHERE customer_id = 'C0001'")
            == 0
        )
        assert [r.name for r in items_for(plan, Action.CRYPTO_SHRED)] == ["archive.customer_events"]
        shredded = next(a for a in svc.action_log.list(ref) if a.action == "crypto_shred")
        assert shredded.evidence["keys_shredded"] == 1
        assert svc.suppression.count() == 4  # email, alternate email, customer id, phone
        assert svc.ledger.verify().ok
    assert tables_holding(airflow_db, CANARY, DEMO_SUBJECT[1], NOTE_CANARY) == []


def test_erasure_run_on_sqlite_completes_and_airflow_never_holds_the_identifier(
    estate: Any, airflow_db: Path
) -> None:
    run_and_check(estate, airflow_db, "DAG-SQLITE-1")


@pytest.mark.postgres
def test_erasure_run_on_postgres_warehouse(
    tmp_path: Path, openbao: EmbeddedOpenBao, airflow_db: Path, postgres_url: str
) -> None:
    settings = open_demo(tmp_path / "pg", openbao, url=postgres_url)
    saved = dict(os.environ)
    os.environ.update(erasure_environment(settings))
    try:
        run_and_check(settings, airflow_db, "DAG-POSTGRES-1")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_failed_rebuild_resumes_without_double_effect(estate: Any, airflow_db: Path) -> None:
    sql = Path(estate.catalog_path).parent / "sql" / "reports.monthly_revenue.sql"
    good = sql.read_text()
    sql.write_text("SELECT no_such_column FROM marts.orders_daily")
    when = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    first = run_erasure(conf("DAG-RESUME-1"), load_decisions(), logical_date=when)
    assert str(first.state) == "failed"
    with Services.open(estate) as svc:
        assert svc.requests.get("DAG-RESUME-1").status.value != "complete"  # type: ignore[union-attr]
        kinds = [r.kind.value for r in svc.ledger.show("DAG-RESUME-1")]
        assert "failed" in kinds and "completed" not in kinds
        erased = {
            a.dataset: a.evidence
            for a in svc.action_log.list("DAG-RESUME-1")
            if a.action == "erase_rows"
        }
    sql.write_text(good)
    second = run_erasure(conf("DAG-RESUME-1"), load_decisions(), logical_date=when)  # cleared
    assert str(second.state) == "success"
    assert second.run_id == first.run_id
    with Services.open(estate) as svc:
        again = {
            a.dataset: a.evidence
            for a in svc.action_log.list("DAG-RESUME-1")
            if a.action == "erase_rows"
        }
        assert again == erased  # recorded once, not erased twice
        assert svc.suppression.count() == 4
        completed = [r for r in svc.ledger.show("DAG-RESUME-1") if r.kind.value == "completed"]
        assert len(completed) == 1


def test_second_submission_of_a_reference_does_nothing_new(estate: Any, airflow_db: Path) -> None:
    run_erasure(conf("DAG-TWICE-1"), load_decisions())
    with Services.open(estate) as svc:
        records = len(svc.ledger.show("DAG-TWICE-1"))
    second = run_erasure(conf("DAG-TWICE-1"), load_decisions())
    assert str(second.state) == "success"
    with Services.open(estate) as svc:
        assert len(svc.requests.list()) == 1
        assert len(svc.ledger.show("DAG-TWICE-1")) == records


def test_a_rejected_submission_keeps_no_identifier(estate: Any, airflow_db: Path) -> None:
    """A typo fails register with what to fix; the sealed copy is destroyed and Airflow never
    held it: the run's conf is the reference and the handle."""
    typo = "alice.smith-at-example.com"  # no @: not an email
    ticket = conf("DAG-TYPO-1", identifier=typo, notes=f"as {typo}")
    run = run_erasure(ticket, {})
    assert str(run.state) == "failed"
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        kept = session.scalars(sa.select(DagRun.conf).where(DagRun.run_id == run.run_id)).one()
    assert kept == ticket
    assert tables_holding(airflow_db, typo) == []
    with Services.open(estate) as svc:
        assert svc.requests.get("DAG-TYPO-1") is None  # nothing registered, nothing parked
        assert svc.ledger.show("DAG-TYPO-1") == []
        assert svc.submissions.held("DAG-TYPO-1") == 0


def test_a_run_not_started_by_the_desk_registers_nothing(estate: Any, airflow_db: Path) -> None:
    handle = "sub-" + "0" * 32  # the form's shape, but no submission was sealed under it
    run = run_erasure({"request_ref": "DAG-HAND-1", "submission": handle}, {})
    assert str(run.state) == "failed"
    with Services.open(estate) as svc:
        assert svc.requests.get("DAG-HAND-1") is None
        assert svc.ledger.show("DAG-HAND-1") == []


def test_a_one_character_customer_id_completes_through_the_dag(
    estate: Any, airflow_db: Path
) -> None:
    """Customer `1`: its digit is in every date, hash and count the run writes; records are
    typed and free text is checked by whole tokens, so the request completes."""
    with Services.open(estate) as svc, svc.warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("INSERT INTO crm.customers (id, email) VALUES ('1', 'one@x.example')"))
        conn.execute(
            sa.text("INSERT INTO crm.orders (id, customer_id, amount) VALUES (90001, '1', 5)")
        )
    run = run_erasure(
        conf("DAG-SHORT-ONE", identifier_type="customer_id", identifier="1"), load_decisions()
    )
    assert str(run.state) == "success"
    with Services.open(estate) as svc:
        assert svc.requests.get("DAG-SHORT-ONE").status.value.startswith("complete")  # type: ignore[union-attr]
        engine = svc.warehouse.engine("warehouse")
        assert count(engine, "SELECT COUNT(*) FROM crm.customers WHERE id = '1'") == 0
        assert count(engine, "SELECT COUNT(*) FROM crm.orders WHERE customer_id = '1'") == 0


def test_a_subject_found_nowhere_waits_for_the_dpo_then_completes_as_not_found(
    estate: Any, airflow_db: Path
) -> None:
    run = run_erasure(
        conf("DAG-NOWHERE-1", identifier="no.such.person.4d1e@example.org"), load_decisions()
    )
    assert str(run.state) == "success"
    with Services.open(estate) as svc:
        [completed] = [r for r in svc.ledger.show("DAG-NOWHERE-1") if r.kind.value == "completed"]
        assert completed.body["subject_found"] is False
        # The archive and the backup are in every plan (issue 18): the DPO confirms the
        # keyless archive never held the subject (rule 3a), retains the backup, and confirms
        # the subject is not held.
        assert sorted(r["option"] for r in completed.body["rulings"]) == [
            "not_held",
            "not_held",
            "retain_exemption",
        ]
