"""Issue 24, item 2: a backup taken before erasures is restored; the replay erases again.

The demo estate with real OpenBao, its warehouse and erasure store on SQLite and on Postgres.
A copy of the CRM tables is taken before anything is erased (the pre-erasure backup); three
requests complete end to end through `erasure.workflow`, the pepper rotated after the first;
the copy is restored over the tables, bringing the three subjects back; `erasure restore
replay` (the domain for crm.orders, the command for crm.customers, children first) erases
them again. Their rows are gone, everybody else's are there, the records are signed, chained
and cite exactly the three completion records, the subject hashed under the old pepper is
found too, and no identifier of theirs is in any record, log line, output or store file.
The operator's DAG does the same under dag.test(), refusing a conf that names a person.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.audit.export import export_json
from erasure.audit.records import CompletionRecord, RecordKind
from erasure.cli import main
from erasure.keys.vault import EmbeddedOpenBao
from erasure.replay import NO_SUBJECT, ReplayBody, dataset_named, replay, replay_lines
from erasure.sample.embedded import open_demo
from erasure.services import Services
from erasure.store.schema import restore_replays
from local.demo.runner import erasure_environment, import_airflow_models
from tests.integration.workflow_support import CONF, run_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]

REPO = Path(__file__).resolve().parents[2]
CRM = ("crm.addresses", "crm.customers", "crm.orders")  # the CRM database, as backed up
# ref -> (identifier type, as typed, the customer it is); the first under pepper v1.
REQUESTS = {
    "DSR-RESTORE-1": ("email", " Alice.Smith@Example.com", "C0001"),
    "DSR-RESTORE-2": ("customer_id", "C0005", "C0005"),
    "DSR-RESTORE-3": ("phone", "07700 900010", "C0010"),
}
ERASED = {customer for _, _, customer in REQUESTS.values()}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def svc(
    request: pytest.FixtureRequest, tmp_path: Path, openbao: EmbeddedOpenBao
) -> Iterator[Services]:
    """The demo estate: warehouse and erasure store both on SQLite, or both on Postgres."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    settings = open_demo(tmp_path / "demo", openbao, url=url)
    if url is not None:
        settings = settings.model_copy(
            update={"store_url": request.getfixturevalue("postgres_schema_url")}
        )
    with Services.open(settings) as services:
        yield services


def table_rows(svc: Services, name: str) -> list[dict[str, Any]]:
    ds = svc.catalog.by_name(name)
    table = svc.warehouse.table(ds)
    assert table is not None
    with svc.warehouse.connect(ds) as conn:
        return [dict(r) for r in conn.execute(sa.select(table)).mappings()]


def restore(svc: Services, copies: dict[str, list[dict[str, Any]]]) -> None:
    """The backup restored over the CRM tables, as a database restore does: every row as it
    was then (rows added since are gone; the erased subjects are back)."""
    svc.warehouse.forget_tables()
    tables = {name: svc.warehouse.table(svc.catalog.by_name(name)) for name in CRM}
    with svc.warehouse.engine("warehouse").begin() as conn:
        for name in ("crm.orders", "crm.customers"):  # children first: foreign keys
            conn.execute(sa.delete(tables[name]))
        kept = set(conn.execute(sa.select(tables["crm.addresses"].c.id)).scalars())
        gone = [row for row in copies["crm.addresses"] if row["id"] not in kept]
        if gone:
            conn.execute(sa.insert(tables["crm.addresses"]), gone)
        for name in ("crm.customers", "crm.orders"):
            conn.execute(sa.insert(tables[name]), copies[name])


def canaries(copies: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every identifier value of the erased customers, as the backup holds them."""
    values = []
    for row in copies["crm.customers"]:
        if row["id"] in ERASED:
            values += [str(row[c]).strip() for c in ("id", "email", "alt_email", "phone") if row[c]]
    return values


def leaks(text: str, values: list[str]) -> list[str]:
    """The values found in `text`: emails and phones in any case, customer ids as written
    (lower-cased, `c0005` is hex and may sit inside a hash)."""
    found = []
    for value in values:
        if value[:1] == "C" and value[1:].isdigit():
            if value in text:
                found.append(value)
        elif value.lower() in text.lower() or value.replace(" ", "") in text.replace(" ", ""):
            found.append(value)
    return found


def test_a_restored_backup_is_replayed_and_nobody_erased_comes_back(
    svc: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    copies = {name: table_rows(svc, name) for name in CRM}  # the pre-erasure backup
    values = canaries(copies)
    assert len(values) >= 9
    old = svc.peppers.current().version  # the session's OpenBao may have rotated it before
    completed: dict[str, CompletionRecord] = {}
    for ref, (id_type, typed, _customer) in REQUESTS.items():
        conf = {**CONF, "request_ref": ref, "identifier_type": id_type, "identifier": typed}
        completed[ref] = run_request(svc, conf)
        if ref == "DSR-RESTORE-1":
            svc.peppers.rotate()  # the later requests hash under pepper v2
    assert {r.kind for r in completed.values()} == {RecordKind.COMPLETED}
    assert {c["id"] for c in table_rows(svc, "crm.customers")}.isdisjoint(ERASED)

    restore(svc, copies)
    assert {c["id"] for c in table_rows(svc, "crm.customers")} >= ERASED  # they are back
    caplog.set_level("DEBUG")

    # The children first (orders point at customers), through the domain ...
    orders = replay(svc, dataset_named(svc.catalog, "crm.orders"))
    # ... then the parents, as the operator runs it, then once more: nothing is left.
    for name, value in erasure_environment(svc.settings).items():
        monkeypatch.setenv(name, value)
    assert main(["restore", "replay", "--dataset", "crm.customers", "--json"]) == 0
    printed = capsys.readouterr()
    customers = json.loads(printed.out)
    assert main(["restore", "replay", "--dataset", "crm.customers"]) == 0
    again = capsys.readouterr()
    assert "nothing to erase: no row hashes to a tombstone" in again.out
    output = printed.out + printed.err + again.out + again.err

    # The erased subjects' rows are gone again; everybody else's are all there.
    assert {c["id"] for c in table_rows(svc, "crm.customers")} == {
        c["id"] for c in copies["crm.customers"] if c["id"] not in ERASED
    }
    assert {o["id"] for o in table_rows(svc, "crm.orders")} == {
        o["id"] for o in copies["crm.orders"] if o["customer_id"] not in ERASED
    }

    # Signed, chained, citing exactly the three completion records, old pepper included.
    replayed = svc.ledger.list(kind=RecordKind.REPLAYED)
    assert [r.request_ref for r in replayed[:2]] == [
        orders.record.request_ref,
        customers["replay_ref"],
    ]
    assert all(r.subject_hash == NO_SUBJECT and r.status is None for r in replayed)
    assert svc.ledger.verify().ok
    for record, rows_each in ((replayed[0], 3), (replayed[1], 1)):
        body = ReplayBody.model_validate(record.body)
        assert body.rows_erased == 3 * rows_each and body.verification.passed
        assert body.pepper_versions == [old, old + 1]
        cited = {c.request_ref: c for c in body.cited}
        assert set(cited) == set(REQUESTS)
        for ref, c in cited.items():
            assert c.rows == rows_each and c.completion is not None
            assert (c.completion.seq, c.completion.record_hash) == (
                completed[ref].seq,
                completed[ref].record_hash,
            )
            versions = {t.pepper_version for t in c.tombstones}
            assert versions == ({old} if ref == "DSR-RESTORE-1" else {old + 1}), ref
    nothing = ReplayBody.model_validate(replayed[2].body)
    assert nothing.rows_erased == 0 and nothing.cited == [] and nothing.verification.passed
    # The addresses only the erased customers pointed at are left, counted, never erased.
    parents = ReplayBody.model_validate(replayed[1].body)
    [left] = parents.references_not_replayed
    pointed = {c["address_id"] for c in copies["crm.customers"] if c["id"] in ERASED}
    shared = {c["address_id"] for c in copies["crm.customers"] if c["id"] not in ERASED}
    assert (left.dataset, left.column, left.key) == ("crm.addresses", "address_id", "id")
    assert left.rows_unreferenced == len(pointed - shared - {None})
    assert {a["id"] for a in table_rows(svc, "crm.addresses")} >= pointed - {None}
    assert left.rows_unreferenced > 0  # the demo's erased customers lived alone
    shown = [line for line in replay_lines(parents) if line.startswith("NOT ERASED")]
    assert len(shown) == 1 and "crm.addresses" in shown[0] and "you must erase them" in shown[0]
    for ref in (*REQUESTS, customers["replay_ref"]):  # each chain of evidence still checks out
        assert export_json(svc.ledger, ref)["verify"]["ok"], ref

    # No identifier of theirs in any record, log line, output, replay log or store file.
    records = json.dumps([r.model_dump(mode="json") for r in svc.ledger.list()])
    with svc.store.engine.connect() as conn:
        logged = json.dumps(
            [dict(r._mapping) for r in conn.execute(sa.select(restore_replays))], default=str
        )
    for where, text in (("records", records), ("log", caplog.text), ("output", output)):
        assert leaks(text, values) == [], where
    assert leaks(logged, values) == []
    if svc.store.dialect == "sqlite":
        demo = tmp_path / "demo"
        for db in (demo / "erasure.db", demo / "warehouse.crm.db"):
            text = db.read_bytes().decode("latin-1")
            assert leaks(text, values) == [], db.name


def test_the_operators_dag_replays_a_restored_table_and_refuses_a_person_in_its_conf(
    tmp_path: Path, openbao: EmbeddedOpenBao, airflow_db: Path
) -> None:
    settings = open_demo(tmp_path / "demo", openbao)
    with Services.open(settings) as svc:
        copies = {name: table_rows(svc, name) for name in CRM}
        done = run_request(svc, CONF)
        restore(svc, copies)
    import_airflow_models()
    from airflow.dag_processing.dagbag import DagBag
    from airflow.exceptions import ParamValidationError

    saved = dict(os.environ)
    os.environ.update(erasure_environment(settings))
    try:
        bag = DagBag(str(REPO / "dags"))
        assert not bag.import_errors, bag.import_errors
        dag = bag.get_dag("erasure_restore_replay")
        assert dag is not None and dag.schedule is None
        form = dag.params.get_param("dataset").schema
        assert {"crm.customers", "crm.orders"} <= set(form["enum"])
        assert "crm.addresses" not in form["enum"]  # no identifier column: nothing to replay
        assert dag.params.get_param("namespace").schema["enum"] == [None, "warehouse"]
        for conf in (
            {"dataset": "alice.smith@example.com"},
            {"dataset": "crm.orders", "namespace": "alice.smith@example.com"},
        ):
            with pytest.raises(ParamValidationError):
                dag.test(run_conf=conf)
        # A key the form does not have: Airflow takes it, the task refuses it before anything.
        run = dag.test(run_conf={"dataset": "crm.orders", "ticket": "INC-4711"})
        assert str(run.state) == "failed"
        run = dag.test(run_conf={"dataset": "crm.orders"})
        assert str(run.state) == "success"
        run = dag.test(run_conf={"dataset": "crm.customers", "namespace": "warehouse"})
        assert str(run.state) == "success"
    finally:
        os.environ.clear()
        os.environ.update(saved)

    # Parsed where the catalog cannot be read, the form offers no table: nothing validates.
    os.environ.update({**erasure_environment(settings), "ERASURE_CATALOG_PATH": str(tmp_path)})
    try:
        blind = DagBag(str(REPO / "dags")).get_dag("erasure_restore_replay")
        assert blind is not None and blind.params.get_param("dataset").schema["enum"] == []
        with pytest.raises(ParamValidationError):
            blind.test(run_conf={"dataset": "crm.orders"})
    finally:
        os.environ.clear()
        os.environ.update(saved)

    with Services.open(settings) as svc:
        assert "C0001" not in {c["id"] for c in table_rows(svc, "crm.customers")}
        replayed = svc.ledger.list(kind=RecordKind.REPLAYED)
        assert len(replayed) == 2 and svc.ledger.verify().ok
        cited = ReplayBody.model_validate(replayed[1].body).cited
        assert [(c.request_ref, c.completion.seq if c.completion else None) for c in cited] == [
            (done.request_ref, done.seq)
        ]
    from tests.integration.test_dag import tables_holding

    assert tables_holding(airflow_db, "alice.smith@example.com") == []
