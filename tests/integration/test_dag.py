"""gdpr_erasure under dag.test(): the real DAG, real OpenBao, SQLite metadata DB, the demo
estate on SQLite and on Postgres; prompts answered programmatically as the DPO would."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.config import Settings
from erasure.keys.vault import EmbeddedOpenBao
from erasure.model import Action
from erasure.rulings import option_for_label
from erasure.sample.embedded import open_demo
from erasure.sample.seed import DEMO_SUBJECT
from erasure.services import Services
from erasure.store.schema import sealed_notes
from erasure.workflow import items_for
from local.demo.runner import (
    PromptAnswerer,
    decision_for,
    erasure_environment,
    load_decisions,
    run_erasure,
)
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
    yield from _tasks_use(open_demo(tmp_path / "demo", openbao))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def estate_on_each_store(
    request: pytest.FixtureRequest, tmp_path: Path, openbao: EmbeddedOpenBao, airflow_db: Path
) -> Iterator[Any]:
    """The demo estate, its erasure store on SQLite and on Postgres."""
    settings = open_demo(tmp_path / "demo", openbao)
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_schema_url")
        settings = settings.model_copy(update={"store_url": url})
    yield from _tasks_use(settings)


def _tasks_use(settings: Any) -> Iterator[Any]:
    """`settings`, with the environment the DAG's tasks read set to them meanwhile."""
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
    decisions = load_decisions()
    typed = {str(d["justification"]) for d in decisions.values() if d.get("justification")}
    run = run_erasure(conf(ref), decisions)
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
        # The justifications typed reach the rulings through sealed notes, each destroyed
        # once its prompt ruled; Airflow held only their handles.
        rulings = svc.rulings.for_request(ref)
        assert rulings and {r.justification for r in rulings} <= typed
        with svc.store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(sealed_notes)).scalar() == 0
    assert tables_holding(airflow_db, CANARY, DEMO_SUBJECT[1], NOTE_CANARY, *typed) == []


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


class MarksSomeAnswersTheRest(PromptAnswerer):
    """Waits until every prompt of the run is parked, then goes through them last first: the
    prompts of the datasets in `mark` are set to that state by hand (as the ✓ on the prompt
    page or the API does), the others answered from the decisions. Once."""

    def __init__(self, decisions: Mapping[str, Mapping[str, Any]], mark: dict[str, str]) -> None:
        super().__init__(decisions)
        self.mark, self.marked, self.done = mark, list[str](), False

    def answer_pending(self) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import State

        if self.done:
            return
        with create_session() as session:
            parked = self.parked(session)
            prompts = session.scalar(
                sa.select(sa.func.count())
                .select_from(TaskInstance)
                .where(
                    TaskInstance.task_id == "dpo_decides",
                    TaskInstance.map_index >= 0,
                    sa.or_(
                        TaskInstance.state.is_(None),
                        TaskInstance.state.notin_([str(s) for s in State.finished]),
                    ),
                )
            )
            if not parked or len(parked) < prompts:
                return
            for detail, ti in sorted(parked, key=lambda p: -p[1].map_index):
                dataset, _ = decision_for(detail.subject, detail.options, self.decisions)
                if dataset in self.mark:
                    ti.set_state(self.mark[dataset], session=session)
                    self.marked.append(dataset)
                else:
                    self.answer(session, detail, ti)
            self.done = True


def rulings_on_record(svc: Services, ref: str) -> dict[str, str]:
    """dataset -> the option its signed `decided` record names."""
    return {
        r.body["dataset"]["name"]: r.body["ruling"]["option"]
        for r in svc.ledger.show(ref)
        if r.kind.value == "decided"
    }


def test_a_ruling_is_the_answer_to_its_own_prompt_never_a_neighbours(
    estate_on_each_store: Any, airflow_db: Path
) -> None:
    """Issue 19: prompts marked success or skipped by hand, the rest answered last first. Each
    answer is signed as the ruling on the artefact its prompt asked about; the marked ones
    are no ruling, and the run stops naming them. Cleared and answered, it completes, and
    nothing signed before changes."""
    decisions = load_decisions()
    when = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    marking = MarksSomeAnswersTheRest(
        decisions,
        mark={"backup.crm_nightly": "success", "agg.customers_by_postcode": "skipped"},
    )
    first = run_erasure(conf("DAG-BOUND-1"), decisions, logical_date=when, answerer=marking)
    assert sorted(marking.marked) == ["agg.customers_by_postcode", "backup.crm_nightly"]
    assert str(first.state) == "failed"
    with Services.open(estate_on_each_store) as svc:
        expected = {  # each escalation's own answer in the decisions file
            item.dataset.name: option_for_label(
                (decisions.get(item.dataset.name) or decisions["default"])["option"]
            ).value
            for item in svc.plans.get("DAG-BOUND-1", 1).items
            if item.action is Action.ESCALATE
        }
        assert len(expected) >= 4 and len(set(expected.values())) >= 3, expected
        ruled = rulings_on_record(svc, "DAG-BOUND-1")
        assert ruled == {k: v for k, v in expected.items() if k not in marking.mark}, (
            "an answer was signed against another artefact"
        )
        kinds = [r.kind.value for r in svc.ledger.show("DAG-BOUND-1")]
        assert "completed" not in kinds
        [failed] = [r for r in svc.ledger.show("DAG-BOUND-1") if r.kind.value == "failed"]
        assert "record_rulings" in failed.body["reason"], failed.body
        signed_before = {r.seq: r.record_hash for r in svc.ledger.show("DAG-BOUND-1")}
    second = run_erasure(conf("DAG-BOUND-1"), decisions, logical_date=when)  # cleared, answered
    assert str(second.state) == "success"
    with Services.open(estate_on_each_store) as svc:
        assert rulings_on_record(svc, "DAG-BOUND-1") == expected
        after = {r.seq: r.record_hash for r in svc.ledger.show("DAG-BOUND-1")}
        assert all(after[seq] == digest for seq, digest in signed_before.items())
        decided = [r for r in svc.ledger.show("DAG-BOUND-1") if r.kind.value == "decided"]
        assert len(decided) == len(expected)  # answered again, signed once
        assert svc.requests.get("DAG-BOUND-1").status.value == "complete_with_exemptions"  # type: ignore[union-attr]
