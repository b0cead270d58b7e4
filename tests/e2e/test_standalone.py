"""One erasure request end to end through `airflow standalone`, then a sweep for the identifier.

The DPO submits the demo subject's email, typed in an odd letter case, on the erasure desk
(`POST /erasure/api/v1/requests`, what its form posts) and answers every escalation from
decisions.yaml through the HITL endpoint. When the run has succeeded, the raw identifier
(any case) and its normalised form must be nowhere the system writes: Airflow's metadata DB
(every row of every table, XCom included, and its files on disk), Airflow's logs and home,
the erasure store, Vault's paths and secrets. A second submission of the same reference is
refused; a submission the register step refuses leaves nothing behind either.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from erasure.catalog import load_catalog
from erasure.sample.seed import DEMO_SUBJECT
from erasure.warehouse import Warehouse
from local.bench.load import submission as erasure_request
from local.demo.runner import load_decisions
from local.up.stack import Stack
from tests.e2e.conftest import AirflowApi
from tests.e2e.sweep import (
    airflow_db,
    airflow_db_file,
    as_text,
    dump_rows,
    files_holding,
    hits_in_rows,
    secure_delete,
    store_file,
    vault_entries,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.airflow,
    pytest.mark.vault,
    pytest.mark.e2e,
]

REF = f"DSR-E2E-{uuid.uuid4().hex[:8]}"
RUN_ID = f"erasure-{REF}"
# A reference naming the customer id it is about: refused at register (the desk cannot know).
REJECTED_REF = f"{REF}-C0001"
REJECTED_RUN_ID = f"erasure-{REJECTED_REF}"
# The demo subject, as a person might type her address: a stray space, odd capitals.
CANARY = " ALICE.Smith@example.com"
NORMALISED = DEMO_SUBJECT[1]
assert CANARY.strip().lower() == NORMALISED
# Notes may not name the subject (refused at entry); what they do say is parked like it.
NOTE_CANARY = f"note-{uuid.uuid4().hex}"
# Looked for case-insensitively: the typed and the normalised form are the same letters; the
# URL-encoded form would show up in access logs and query strings.
NEEDLES = (NORMALISED, NORMALISED.replace("@", "%40"), NOTE_CANARY)


def holds_canary(text: str) -> bool:
    lowered = text.lower()
    return any(needle in lowered for needle in NEEDLES)


@dataclass
class Erasure:
    """What the module's two submissions left behind."""

    stack: Stack
    rows_before: int
    state: str
    answered: list[str]
    resubmitted: dict[str, Any]
    rejected: dict[str, Any]  # the desk's answer to a reference naming the customer


def customers_holding_subject(stack: Stack) -> int:
    """Rows of crm.customers that carry the subject's email (either column, any case)."""
    warehouse = Warehouse(load_catalog(stack.paths.estate_dir / "catalog.yaml"))
    try:
        with warehouse.engine("warehouse").connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT COUNT(*) FROM crm.customers "
                        "WHERE lower(trim(email)) = :e OR lower(trim(alt_email)) = :e"
                    ),
                    {"e": NORMALISED},
                ).scalar_one()
            )
    finally:
        warehouse.dispose()


@pytest.fixture(scope="module")
def erasure(airflow_standalone: Stack, dpo_api: AirflowApi) -> Erasure:
    """Submit the request on the desk, answer its prompts, wait; then submit it again (refused),
    with the address pasted into the phone field, and with a reference naming the customer id
    it is about (both refused by the desk: no run, nothing sealed)."""
    stack = airflow_standalone
    rows_before = customers_holding_subject(stack)
    assert rows_before >= 1, "the demo estate should hold the demo subject before the erasure"
    typed = erasure_request(REF, CANARY, notes=f"Asked by phone ({NOTE_CANARY}); confirm by email.")
    assert dpo_api.submit(typed)["run_id"] == RUN_ID
    state, answered = dpo_api.wait(RUN_ID, decisions=load_decisions())
    if state != "success":
        pytest.fail(f"{RUN_ID} ended {state}\n{dpo_api.explain_failure(RUN_ID)}", pytrace=False)
    resubmitted = dpo_api.submit(typed, expect=409)
    misfit = dpo_api.submit(
        erasure_request(f"{REF}-phone", CANARY, identifier_type="phone"), expect=422
    )
    assert "choose identifier type email" in misfit["detail"], misfit
    assert not holds_canary(str(misfit))
    rejected = dpo_api.submit(
        erasure_request(REJECTED_REF, "C0001", identifier_type="customer_id"), expect=422
    )
    return Erasure(stack, rows_before, state, answered, resubmitted, rejected)


# ---------------------------------------------------------------------------------------------
# The run


def test_the_run_succeeds_after_the_dpo_answers_every_escalation(
    erasure: Erasure, dpo_api: AirflowApi
) -> None:
    assert erasure.answered, "the demo plan escalates artefacts: the DPO must have been asked"
    assert len(set(erasure.answered)) == len(erasure.answered), "a prompt was answered twice"
    prompts = [ti for ti in dpo_api.task_instances(RUN_ID) if ti["task_id"] == "dpo_decides"]
    assert len(prompts) == len(erasure.answered)
    assert all(ti["state"] == "success" for ti in prompts)
    states = {ti["task_id"]: ti["state"] for ti in dpo_api.task_instances(RUN_ID)}
    assert states["verify"] == states["complete"] == "success"


def test_the_subjects_rows_are_gone_from_the_crm(erasure: Erasure) -> None:
    # The immutable warehouse.backup.db still holds her until its retention ends (the DPO's
    # recorded exemption): the warehouse is not part of the sweep, only the erased source.
    assert customers_holding_subject(erasure.stack) == 0


def test_the_completion_record_is_there_for_the_auditor(erasure: Erasure) -> None:
    token = erasure.stack.token("auditor")
    with httpx.Client(base_url=erasure.stack.base_url, trust_env=False, timeout=30) as client:
        response = client.get(
            f"/erasure/api/v1/records/{REF}", headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200, response.text
    kinds = [record["kind"] for record in response.json()]
    assert kinds[0] == "received" and "completed" in kinds, kinds
    assert not holds_canary(response.text)


def test_a_second_submission_of_the_reference_is_refused(erasure: Erasure) -> None:
    assert "already registered" in erasure.resubmitted["detail"]
    assert not holds_canary(str(erasure.resubmitted))
    with sqlite3.connect(f"file:{store_file(erasure.stack)}?mode=ro", uri=True) as conn:
        (owner_run,) = conn.execute(
            "SELECT run_id FROM requests WHERE request_ref = ?", (REF,)
        ).fetchone()
    assert owner_run == RUN_ID


def test_a_rejected_submission_says_what_to_fix_and_leaves_nothing(
    erasure: Erasure, dpo_api: AirflowApi
) -> None:
    """A reference naming the customer id it is about would become the run id and the log
    paths: the desk refuses it before any run exists, and says so without the value."""
    detail = erasure.rejected["detail"]
    assert "request_ref contains the subject's customer_id" in detail, detail
    assert "C0001" not in detail
    assert dpo_api.find_run(REJECTED_RUN_ID) is None  # no run was created
    with sqlite3.connect(f"file:{store_file(erasure.stack)}?mode=ro", uri=True) as conn:
        (sealed,) = conn.execute("SELECT COUNT(*) FROM submissions").fetchone()
    assert sealed == 0, "nothing was sealed for it, and every other submission was opened"


# ---------------------------------------------------------------------------------------------
# The sweep: the identifier is nowhere the system writes


def test_airflow_metadata_db_rows_do_not_hold_the_identifier(erasure: Erasure) -> None:
    counts, hits = hits_in_rows(airflow_db(erasure.stack), holds_canary)
    assert not hits, "\n".join(hits)
    for table in ("dag_run", "log", "xcom", "task_instance", "hitl_detail"):
        assert counts.get(table), f"no rows in {table}: the sweep would prove nothing there"
    # The conf holds the reference and the sealed submission's handle, nothing typed.
    engine = sa.create_engine(airflow_db(erasure.stack), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            confs = {
                run_id: as_text(conf)
                for run_id, conf in conn.execute(
                    sa.text("SELECT run_id, conf FROM dag_run WHERE run_id IN (:a, :b)"),
                    {"a": RUN_ID, "b": REJECTED_RUN_ID},
                )
            }
    finally:
        engine.dispose()
    assert set(confs) == {RUN_ID}  # the refused reference never became a run
    for conf in confs.values():
        assert '"submission"' in conf and REF in conf and "identifier" not in conf, conf


def test_xcom_does_not_hold_the_identifier(erasure: Erasure) -> None:
    rows = [row for table, row in dump_rows(airflow_db(erasure.stack)) if table == "xcom"]
    ours = [row for row in rows if RUN_ID in row]
    assert ours, "the run pushed no XCom: the sweep would prove nothing"
    assert not [row for row in rows if holds_canary(row)]


def test_airflow_logs_and_home_do_not_hold_the_identifier(erasure: Erasure) -> None:
    home = erasure.stack.paths.airflow_home
    read, hits = files_holding(home / "logs", holds_canary)
    task_logs = list((home / "logs" / "dag_id=gdpr_erasure").rglob("*.log"))
    assert task_logs and read >= len(task_logs)
    assert not hits, hits
    # Everything else Airflow wrote in its home: the standalone output, config, passwords.
    db_files = tuple(home.glob("airflow.db*"))  # on SQLite: read row by row above
    skip = (*db_files, *home.joinpath("logs").rglob("*"))
    read, hits = files_holding(home, holds_canary, skip=skip)
    assert read and not hits, hits


def test_airflow_metadata_db_files_on_disk(erasure: Erasure) -> None:
    """Below the rows: the database file's raw pages and its write-ahead log."""
    if airflow_db_file(erasure.stack) is None:
        pytest.skip("the metadata DB is Postgres: its files are the server's, not this stack's")
    home = erasure.stack.paths.airflow_home
    hits = [
        p.name
        for p in home.glob("airflow.db*")
        if holds_canary(p.read_bytes().decode("utf-8", errors="replace"))
    ]
    if not secure_delete():  # freed pages then keep old rows by design: only the rows count
        hits = [name for name in hits if name != "airflow.db"]
    assert not hits, hits  # nothing typed ever reached Airflow: no old page can hold it


def test_erasure_store_does_not_hold_the_identifier(erasure: Erasure) -> None:
    store = store_file(erasure.stack)
    counts, hits = hits_in_rows(store, holds_canary)
    assert not hits, "\n".join(hits)
    assert counts.get("requests") and counts.get("completion_records")
    for path in store.parent.glob(store.name + "*"):  # the file, and any -wal or -journal
        assert not holds_canary(path.read_bytes().decode("utf-8", errors="replace")), path


def test_vault_paths_and_secrets_do_not_hold_the_identifier(erasure: Erasure) -> None:
    mounts, paths, values = vault_entries(erasure.stack.bao.client())
    assert "erasure-kv/" in mounts and "erasure-transit/" in mounts, mounts
    assert any(p.startswith("erasure-kv/") for p in paths), paths
    assert not [p for p in paths if holds_canary(p)]
    assert not [v for v in values if holds_canary(v)]
