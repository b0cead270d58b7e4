"""erasure/replay.py: a restored table's rows of erased subjects erased again, on record.

A real warehouse table and a real erasure store, on SQLite and on Postgres; tombstones made
the way the tombstone step makes them, under two pepper versions; completed records signed
by an in-memory Ed25519 key (the ledger's signer, as the audit tests use it).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.audit.records import CompletionRecord, RecordError, RecordKind, RecordLedger
from erasure.catalog import Catalog, load_catalog
from erasure.errors import ErasureError, WarehouseError
from erasure.model import DatasetRef
from erasure.pseudonym import Pepper, normalise
from erasure.registry.replays import ReplayLog, ReplayStatus
from erasure.replay import (
    NO_SUBJECT,
    REPLAY_REF_PREFIX,
    Attempt,
    ReplayBody,
    ReplayFailed,
    ReplayRefused,
    dataset_named,
    render_replay,
    replay_restore,
)
from erasure.replay_attribution import Verdict
from erasure.store import Store, open_store
from erasure.suppression import SuppressionList, Tombstone
from erasure.warehouse import Warehouse
from tests.unit.audit.support import LocalSigner, completion_body, received_body

V1 = Pepper(version=1, secret=b"\x11" * 32)
V2 = Pepper(version=2, secret=b"\x22" * 32)
CANARY = "Ada.Canary-9e1f@Example.org"  # an erased subject: in no record, log or error
PEOPLE = [  # id, email, alt_email, phone
    ("C001", f"  {CANARY.upper()} ", None, "+44 20 7946 0001"),  # erased by email (v1)
    ("C002", "bob@example.net", f"{CANARY}", None),  # her alternate address on another row
    ("C003", "cy@example.net", None, "020 7946 0003"),  # erased by phone, under pepper v2
    *[(f"C1{n:02d}", f"person{n}@example.net", None, f"+44 7700 900{n:03d}") for n in range(12)],
]
ERASED_ROWS = {"C001", "C002", "C003"}


@dataclass
class Estate:
    catalog: Catalog
    warehouse: Warehouse
    store: Store
    ledger: RecordLedger
    dataset: DatasetRef
    table: str  # schema.table, as SQL names it

    @property
    def schema(self) -> str:
        return self.table.split(".")[0]

    @property
    def dialect(self) -> str:
        return self.warehouse.engine("warehouse").dialect.name

    def ref(self, name: str) -> DatasetRef:
        return DatasetRef("warehouse", f"{self.schema}.{name}")

    def replay(self, dataset: str | None = None, **kwargs: Any) -> Any:
        return replay_restore(
            self.catalog,
            self.warehouse,
            self.dataset if dataset is None else self.ref(dataset),
            suppression=SuppressionList(self.store),
            peppers=[V1, V2],
            ledger=kwargs.pop("ledger", self.ledger),
            replays=kwargs.pop("replays", ReplayLog(self.store)),
            **kwargs,
        )

    def ids(self) -> set[str]:
        with self.warehouse.engine("warehouse").connect() as conn:
            return set(conn.execute(sa.text(f"SELECT id FROM {self.table}")).scalars())

    def rows(self, name: str, columns: str) -> list[tuple[Any, ...]]:
        with self.warehouse.engine("warehouse").connect() as conn:
            query = sa.text(f"SELECT {columns} FROM {self.schema}.{name} ORDER BY 1")
            return [tuple(r) for r in conn.execute(query)]

    def execute(self, *statements: str) -> None:
        with self.warehouse.engine("warehouse").begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement.format(s=self.schema)))


CATALOG = """
version: 1
identifiers:
  email: {{normalise: email}}
  customer_id: {{normalise: strip, one_per_person: true}}
  phone: {{normalise: e164, default_region: GB}}
connections:
  warehouse: {{url: "{url}"}}
  mart: {{url: "mysql+pymysql://erasure@127.0.0.1:3306/mart"}}
datasets:
  - {{namespace: warehouse, name: {s}.customers, connection: warehouse, kind: table,
     holds_subject: {{email: [email, alt_email], customer_id: id, phone: phone}}}}
  - {{namespace: warehouse, name: {s}.archive, connection: warehouse, kind: table,
     storage: immutable, retention_days: 30, holds_subject: {{email: email}}}}
  - {{namespace: warehouse, name: {s}.customer_view, connection: warehouse, kind: view,
     holds_subject: {{email: email}}}}
  - {{namespace: warehouse, name: {s}.products, connection: warehouse, kind: table}}
  - {{namespace: warehouse, name: {s}.legacy, connection: warehouse, kind: table,
     holds_subject: {{customer_id: cust}}, stored_forms: {{cust: {{prefix: "CUST-"}}}}}}
  - {{namespace: warehouse, name: {s}.missing, connection: warehouse, kind: table,
     holds_subject: {{email: email}}}}
  - {{namespace: warehouse, name: {s}.renamed, connection: warehouse, kind: table,
     holds_subject: {{email: email}}}}
  - {{namespace: warehouse, name: {s}.codes, connection: warehouse, kind: table,
     holds_subject: {{customer_id: code}}}}
  - {{namespace: warehouse, name: {s}.loose_codes, connection: warehouse, kind: table,
     holds_subject: {{customer_id: code}}}}
  - {{namespace: warehouse, name: {s}.accounts, connection: warehouse, kind: table,
     holds_subject: {{email: email}},
     references: [{{column: address_id, dataset: {s}.addresses, key: id}}]}}
  - {{namespace: warehouse, name: {s}.addresses, connection: warehouse, kind: table}}
  - {{namespace: warehouse, name: {s}.shipments, connection: warehouse, kind: table,
     references: [{{column: address_id, dataset: {s}.addresses, key: id}}]}}
  - {{namespace: warehouse, name: {s}.mart_customers, connection: mart, kind: table,
     holds_subject: {{email: email}}}}
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def estate(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Estate]:
    """The customers table in a warehouse and a migrated store, both on SQLite or both on
    Postgres (the warehouse in a schema of its own)."""
    yield from _estate(request, tmp_path, request.param)


@pytest.fixture
def pg_estate(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Estate]:
    """The estate on Postgres only."""
    yield from _estate(request, tmp_path, "postgres")


def _estate(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> Iterator[Estate]:
    if kind == "sqlite":
        schema, url, store_url = "crm", "sqlite:///warehouse.db", f"sqlite:///{tmp_path}/e.db"
    else:
        schema = f"w_{uuid.uuid4().hex[:10]}"
        url = request.getfixturevalue("postgres_url")
        store_url = request.getfixturevalue("postgres_schema_url")
    (tmp_path / "catalog.yaml").write_text(CATALOG.format(url=url, s=schema))
    catalog = load_catalog(tmp_path / "catalog.yaml")
    warehouse = Warehouse(catalog)
    engine = warehouse.engine("warehouse")
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        conn.execute(
            sa.text(
                f"CREATE TABLE {schema}.customers (id VARCHAR(12) PRIMARY KEY, email "
                "VARCHAR(200), alt_email VARCHAR(200), phone VARCHAR(40))"
            )
        )
        conn.execute(
            sa.text(f"INSERT INTO {schema}.customers VALUES (:i, :e, :a, :p)"),
            [{"i": i, "e": e, "a": a, "p": p} for i, e, a, p in PEOPLE],
        )
        for name in ("archive", "customer_view", "products", "legacy"):
            conn.execute(sa.text(f"CREATE TABLE {schema}.{name} (cust VARCHAR(20))"))
        conn.execute(sa.text(f"CREATE TABLE {schema}.renamed (mail VARCHAR(200))"))
        # An identifier column whose own equality ignores case: SQLite NOCASE, Postgres citext.
        loose = "VARCHAR(12) COLLATE NOCASE" if kind == "sqlite" else "citext"
        if kind != "sqlite":
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS citext"))
        for name, key in (("codes", " PRIMARY KEY"), ("loose_codes", "")):
            conn.execute(
                sa.text(f"CREATE TABLE {schema}.{name} (n INTEGER{key}, code {loose}, who TEXT)")
            )
            conn.execute(
                sa.text(f"INSERT INTO {schema}.{name} VALUES (1, 'ab12', 'subject'), "
                        "(2, 'AB12', 'someone else')")
            )  # fmt: skip
        # Rows pointed at: 1 only by Ada; 2 by Ada and Bob; 3 by Ada and a shipment; 4 by none.
        conn.execute(sa.text(f"CREATE TABLE {schema}.addresses (id INTEGER PRIMARY KEY)"))
        conn.execute(sa.text(f"INSERT INTO {schema}.addresses VALUES (1), (2), (3), (4)"))
        conn.execute(
            sa.text(
                f"CREATE TABLE {schema}.accounts (id VARCHAR(4) PRIMARY KEY, email "
                "VARCHAR(200), address_id INTEGER)"
            )
        )
        conn.execute(
            sa.text(f"INSERT INTO {schema}.accounts VALUES ('A1', :ada, 1), ('A2', :ada, 2), "
                    "('A3', 'bob@example.net', 2), ('A4', :ada, 3)"),
            {"ada": CANARY},
        )  # fmt: skip
        conn.execute(
            sa.text(f"CREATE TABLE {schema}.shipments (id INTEGER PRIMARY KEY, address_id INTEGER)")
        )
        conn.execute(sa.text(f"INSERT INTO {schema}.shipments VALUES (1, 3)"))
    with open_store(store_url) as store:
        yield Estate(
            catalog,
            warehouse,
            store,
            RecordLedger(store, LocalSigner()),
            DatasetRef("warehouse", f"{schema}.customers"),
            f"{schema}.customers",
        )
    warehouse.dispose()


NORMALISE = {"email": "email", "phone": "e164", "customer_id": "strip"}


def tombstone(store: Store, pepper: Pepper, id_type: str, value: str, ref: str) -> Tombstone:
    stone = Tombstone.for_subject(
        pepper, id_type, normalise(NORMALISE[id_type], value, default_region="GB"),
        request_ref=ref,
    )  # fmt: skip
    SuppressionList(store).add(stone)
    return stone


def completed_body(
    stones: Sequence[Tombstone],
    erased: Sequence[DatasetRef],
    rulings: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A completed record's body, as the workflow signs it: the tombstone step's evidence
    lists `stones`; the plan erased the rows of `erased` (erase_rows)."""
    body = completion_body()
    body["artefacts"] = [a for a in body["artefacts"] if a["action"] != "erase_rows"] + [
        {
            "dataset": d.name, "namespace": d.namespace, "kind": "table",
            "action": "erase_rows", "rule": "2", "reason": "root: holds the subject",
            "evidence": {"rows_deleted": 1}, "upstreams": [],
        }
        for d in erased
    ]  # fmt: skip
    body["rulings"] += list(rulings)
    body["tombstone"] = {
        "tombstones": [
            {"subject_hash": t.subject_hash, "identifier_type": t.identifier_type,
             "pepper_version": t.pepper_version, "new": True}
            for t in stones
        ]
    }  # fmt: skip
    return body


def complete(
    estate: Estate,
    ref: str,
    *stones: Tombstone,
    erased: Sequence[DatasetRef] | None = None,
    rulings: Sequence[dict[str, Any]] = (),
) -> CompletionRecord:
    """Request `ref` signed complete: it tombstoned `stones` and erased `erased` (by default
    the estate's table)."""
    subject = stones[0].subject_hash
    body = completed_body(stones, [estate.dataset] if erased is None else erased, rulings)
    status = "complete_with_exemptions" if any(r.get("exemption") for r in rulings) else "complete"
    estate.ledger.append(ref, subject, "received", received_body(ref))
    return estate.ledger.append(ref, subject, "completed", body, status=status)


def erase_three(estate: Estate) -> dict[str, Any]:
    """Ada erased by email (REQ-ADA, pepper v1), Cy by phone after a rotation (REQ-CY, v2),
    and Zed, who is in no row of this table (REQ-ZED): their tombstones and records."""
    ada = tombstone(estate.store, V1, "email", CANARY, "REQ-ADA")
    cy = tombstone(estate.store, V2, "phone", "+442079460003", "REQ-CY")
    zed = tombstone(estate.store, V2, "email", "zed@example.com", "REQ-ZED")
    return {
        "ada": ada,
        "cy": cy,
        "zed": zed,
        "REQ-ADA": complete(estate, "REQ-ADA", ada),
        "REQ-CY": complete(estate, "REQ-CY", cy),
        "REQ-ZED": complete(estate, "REQ-ZED", zed),
    }


def test_the_erased_subjects_rows_go_again_everybody_elses_stay_and_the_record_cites_them(
    estate: Estate, caplog: pytest.LogCaptureFixture
) -> None:
    erased = erase_three(estate)
    everyone = estate.ids()
    caplog.set_level("DEBUG")

    done = estate.replay()

    assert estate.ids() == everyone - ERASED_ROWS
    record, body = done.record, done.body
    assert record.kind is RecordKind.REPLAYED and record.status is None
    assert record.request_ref.startswith(REPLAY_REF_PREFIX) and record.subject_hash == NO_SUBJECT
    assert body.dataset == estate.dataset and body.rows_erased == 3
    assert body.pepper_versions == [1, 2] and body.tombstones_checked == 3
    by_ref = {c.request_ref: c for c in body.cited}
    assert set(by_ref) == {"REQ-ADA", "REQ-CY"}  # Zed is in no row: not cited, not hashed
    assert by_ref["REQ-ADA"].rows == 2 and by_ref["REQ-CY"].rows == 1
    for ref in by_ref:
        completion = by_ref[ref].completion
        assert completion is not None and by_ref[ref].on_record == "complete"
        assert (completion.seq, completion.record_hash) == (
            erased[ref].seq,
            erased[ref].record_hash,
        )
    assert [
        (t.identifier_type, t.pepper_version, t.subject_hash) for t in by_ref["REQ-CY"].tombstones
    ] == [("phone", 2, erased["cy"].subject_hash)]
    text = json.dumps(record.model_dump(mode="json"))
    assert erased["zed"].subject_hash not in text  # no hash of anyone not in the table
    [attempt] = body.attempts
    assert (attempt.rows_before, attempt.rows_matched, attempt.rows_deleted) == (15, 3, 3)
    assert attempt.rows_after == 12 and attempt.deleted_by == "primary_key"
    [statement] = attempt.statements  # by primary key, never by an identifier's value
    assert f"{estate.table}.id IN (" in statement and "email" not in statement
    # The deleted rows' space reclaimed as an erasure's is (VACUUM; SQLite: secure_delete).
    assert attempt.space is not None and attempt.space.engine == estate.dialect
    assert attempt.space.state in ("reclaimed", "scheduled")
    assert body.held == [] and attempt.rows_held == 0
    check = body.verification
    assert check.passed and check.tombstoned_rows_remaining == 0
    assert check.others_before == check.others_after == 12 and check.rows_read == 12
    # Signed and chained: the whole chain verifies, the erased requests' records unchanged.
    assert estate.ledger.verify().ok
    assert [r.kind for r in estate.ledger.show("REQ-ADA")] == [
        RecordKind.RECEIVED,
        RecordKind.COMPLETED,
    ]
    assert ReplayLog(estate.store).get(record.request_ref).status is ReplayStatus.RECORDED  # type: ignore[union-attr]
    for said in (text, caplog.text):
        assert CANARY.lower() not in said.lower() and "+44 20 7946" not in said


def test_a_replay_that_finds_nothing_is_on_record_too(estate: Estate) -> None:
    erase_three(estate)
    first = estate.replay()
    everyone = estate.ids()

    again = estate.replay()  # the operator runs it again: a new replay, which finds nobody

    assert estate.ids() == everyone
    assert again.record.request_ref != first.record.request_ref
    assert again.body.rows_erased == 0 and again.body.cited == []
    assert again.body.verification.passed and again.body.attempts[0].statements == []
    assert again.record.seq == first.record.seq + 1 and estate.ledger.verify().ok


def test_a_crash_after_the_delete_committed_still_ends_with_the_record(estate: Estate) -> None:
    erase_three(estate)
    everyone = estate.ids()
    unsigned = RecordLedger(estate.store)  # Vault gone: the delete commits, the append fails
    with pytest.raises(RecordError, match="signing key"):
        estate.replay(ledger=unsigned)
    assert estate.ids() == everyone - ERASED_ROWS
    [entry] = _entries(estate.store)
    assert entry["status"] == "erased"

    done = estate.replay()  # the retry: nothing left to delete, the evidence logged stands

    assert done.resumed and done.record.request_ref == entry["replay_ref"]
    assert done.body.rows_erased == 3
    assert {c.request_ref: c.rows for c in done.body.cited} == {"REQ-ADA": 2, "REQ-CY": 1}
    assert done.body.verification.passed and estate.ledger.verify().ok


def test_a_retry_after_the_record_was_appended_returns_that_record(estate: Estate) -> None:
    erase_three(estate)
    done = estate.replay()
    entry = ReplayLog(estate.store).get(done.record.request_ref)
    assert entry is not None
    # The append succeeded, closing the log did not (the store went away in between).
    ReplayLog(estate.store).note(
        entry.replay_ref, entry.dataset, ReplayStatus.ERASED, entry.evidence
    )

    again = estate.replay()

    assert again.resumed and again.record == done.record
    assert len(estate.ledger.list(kind=RecordKind.REPLAYED)) == 1


def test_a_delete_that_never_committed_is_done_again_by_the_retry(estate: Estate) -> None:
    """The log says `erasing` (evidence written before the commit) and the rows are still
    there: the commit never happened, and the retry's own delete stands in for it."""
    erase_three(estate)
    never = Attempt(
        erased_at="2026-12-01T10:00:00+00:00",  # type: ignore[arg-type]
        rows_before=15, rows_matched=3, rows_deleted=3, rows_after=12, statements=[],
        pepper_versions=[1, 2], tombstones_checked=3, cited=[],
    )  # fmt: skip
    log = ReplayLog(estate.store)
    log.note("REPLAY-20261201T100000-abc123", estate.dataset, ReplayStatus.ERASING,
             {"attempts": [never.model_dump(mode="json")]})  # fmt: skip

    done = estate.replay()

    assert done.record.request_ref == "REPLAY-20261201T100000-abc123"
    assert estate.ids().isdisjoint(ERASED_ROWS)
    [attempt] = done.body.attempts
    assert attempt.erased_at != never.erased_at and attempt.rows_deleted == 3


def test_the_log_is_written_before_the_commit_or_nothing_is_deleted(
    estate: Estate, tmp_path: Path
) -> None:
    erase_three(estate)
    everyone = estate.ids()
    with open_store(f"sqlite:///{tmp_path}/log.db"):
        pass  # migrated, then opened read-only: the log reads, its note before the commit fails
    read_only = f"sqlite:///file:{tmp_path}/log.db?mode=ro&uri=true"
    with (
        open_store(read_only, migrate=False) as ro,
        pytest.raises(ErasureError, match="log the restore replay"),
    ):
        estate.replay(replays=ReplayLog(ro))
    assert estate.ids() == everyone  # rolled back: nothing deleted without its evidence
    assert estate.ledger.list(kind=RecordKind.REPLAYED) == []


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("archive", "immutable storage"),
        ("customer_view", "is a view, not a table"),
        ("products", "names no identifier column"),
        ("legacy", "store identifiers in a form of their own"),
    ],
)
def test_a_dataset_a_replay_cannot_erase_in_is_refused_saying_why(
    estate: Estate, name: str, why: str
) -> None:
    schema = estate.table.split(".")[0]
    with pytest.raises(ReplayRefused, match=why):
        replay_restore(
            estate.catalog,
            estate.warehouse,
            DatasetRef("warehouse", f"{schema}.{name}"),
            suppression=SuppressionList(estate.store),
            peppers=[V1],
            ledger=estate.ledger,
            replays=ReplayLog(estate.store),
        )
    assert estate.ledger.list(kind=RecordKind.REPLAYED) == []


def test_a_missing_table_or_column_and_an_unknown_name_are_refused(estate: Estate) -> None:
    schema = estate.table.split(".")[0]

    def of(name: str) -> Estate:
        return Estate(**{**estate.__dict__, "dataset": DatasetRef("warehouse", f"{schema}.{name}")})

    with pytest.raises(WarehouseError, match="restore it first"):
        of("missing").replay()
    with pytest.raises(ReplayRefused, match=r"lacks the identifier column\(s\) \['email'\]"):
        of("renamed").replay()
    for typed in (CANARY, f"{schema}.nowhere"):
        with pytest.raises(ErasureError) as refused:
            dataset_named(estate.catalog, typed)
        assert CANARY.lower() not in str(refused.value).lower()
        with pytest.raises(ReplayRefused) as refused:
            dataset_named(estate.catalog, typed, namespace=CANARY)
        assert CANARY.lower() not in str(refused.value).lower()
    assert dataset_named(estate.catalog, estate.table, "warehouse") == estate.dataset
    assert dataset_named(estate.catalog, estate.table.upper()) == estate.dataset


def test_the_body_reads_back_as_its_model(estate: Estate) -> None:
    erase_three(estate)
    done = estate.replay()
    assert ReplayBody.model_validate(done.record.body) == done.body


def _entries(store: Store) -> list[dict[str, Any]]:
    from erasure.store.schema import restore_replays

    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(restore_replays))]


def test_the_auditor_sees_a_replay_as_one_and_every_cited_request_still_verifies(
    estate: Estate,
) -> None:
    from erasure.audit.export import export_json, render_html
    from erasure.audit.outcome import OutcomeStatus, outcome_of, requests_on_record

    erased = erase_three(estate)
    ref = estate.replay().record.request_ref

    assert outcome_of(estate.ledger.show(ref)).status is OutcomeStatus.REPLAYED
    on_record = {
        r.request_ref: r.outcome.status for r in requests_on_record(estate.ledger.list(), {})
    }
    assert on_record[ref] is OutcomeStatus.REPLAYED
    assert on_record["REQ-ADA"] is OutcomeStatus.COMPLETE  # its own chain, as it was
    pack = export_json(estate.ledger, ref)
    assert pack["verify"]["ok"] and [r["kind"] for r in pack["records"]] == ["replayed"]
    page = render_html(pack)
    assert "Restore replay" in page and "Cited requests" in page
    assert erased["REQ-ADA"].record_hash in page and "REQ-CY" in page
    assert CANARY.lower() not in page.lower()
    for cited in ("REQ-ADA", "REQ-CY"):
        assert export_json(estate.ledger, cited)["verify"]["ok"]


# ---------------------------------------------------------------------------------------------
# One replay at a time, and a delete that takes exactly the rows it read


def test_a_second_replay_of_the_table_while_one_runs_is_refused(estate: Estate) -> None:
    erase_three(estate)
    everyone = estate.ids()
    with ReplayLog(estate.store).hold(estate.dataset) as held:  # a replay running elsewhere
        assert held
        with pytest.raises(ReplayRefused, match=r"another restore replay of \S+ is running"):
            estate.replay()
        assert estate.ids() == everyone
        done = estate.replay("accounts")  # another table's replay is not held up
        # REQ-ADA erased customers, not accounts: Ada's three accounts stay, and it says so.
        assert done.body.rows_erased == 0
        assert [(h.reason, h.rows) for h in done.body.held] == [(Verdict.NOT_ERASED_HERE, 3)]
    assert estate.ledger.list(kind=RecordKind.REPLAYED) == [done.record]

    again = estate.replay()  # released: it runs

    assert again.body.rows_erased == 3 and estate.ids() == everyone - ERASED_ROWS


@pytest.mark.postgres
def test_rows_another_transaction_deletes_meanwhile_are_not_claimed(pg_estate: Estate) -> None:
    """An in-flight request's erase_rows deletes two of the rows while the replay reads them
    and commits while the replay's delete waits: the replay fails, rolled back, and claims
    nothing; run again, it records only the row it deleted itself."""
    estate = pg_estate
    erase_three(estate)
    engine = estate.warehouse.engine("warehouse")
    other = engine.connect()
    writing = other.begin()
    other.execute(sa.text(f"DELETE FROM {estate.table} WHERE id IN ('C001', 'C002')"))
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["done"] = estate.replay()
        except ErasureError as exc:
            outcome["error"] = exc

    replaying = threading.Thread(target=run)
    replaying.start()
    _until_a_lock_is_awaited(engine)
    writing.commit()
    other.close()
    replaying.join(60)

    assert isinstance(outcome.get("error"), ReplayFailed), outcome
    assert "Another transaction changed or deleted rows" in str(outcome["error"])
    assert "C003" in estate.ids()  # rolled back
    assert estate.ledger.list(kind=RecordKind.REPLAYED) == []
    done = estate.replay()
    assert done.body.rows_erased == 1
    assert {c.request_ref: c.rows for c in done.body.cited} == {"REQ-CY": 1}


def _until_a_lock_is_awaited(engine: sa.Engine) -> None:
    query = sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")  # a row's: no database
    for _ in range(300):
        with engine.connect() as conn:
            if conn.execute(query).scalar():
                return
        time.sleep(0.1)
    raise AssertionError("the replay's delete never waited for the other transaction")


# ---------------------------------------------------------------------------------------------
# Exact matching: a column compared loosely, a dialect that cannot be matched exactly


def test_a_column_that_compares_loosely_is_erased_exactly_or_refused(estate: Estate) -> None:
    """`ab12` was erased; `AB12` is another customer (customer ids are case-sensitive)."""
    ab = tombstone(estate.store, V1, "customer_id", "ab12", "REQ-AB")
    complete(estate, "REQ-AB", ab, erased=[estate.ref("codes"), estate.ref("loose_codes")])
    for name in ("codes", "loose_codes"):
        if estate.dialect == "postgresql":  # citext: refused, as locate refuses it
            with pytest.raises(WarehouseError, match="ignores case or accents"):
                estate.replay(name)
            assert estate.rows(name, "n, who") == [(1, "subject"), (2, "someone else")]
            continue
        done = estate.replay(name)  # SQLite NOCASE: by primary key, or by the exact value
        assert estate.rows(name, "n, who") == [(2, "someone else")], name
        assert done.body.rows_erased == 1
        how = done.body.attempts[0].deleted_by
        assert how == ("primary_key" if name == "codes" else "identifier_values")
    assert estate.ledger.verify().ok


def test_a_dialect_that_cannot_be_matched_exactly_is_refused_before_connecting(
    estate: Estate,
) -> None:
    with pytest.raises(WarehouseError, match="mysql dialect cannot be matched exactly"):
        estate.replay("mart_customers")


# ---------------------------------------------------------------------------------------------
# Who the record cites, and whose rows stay


def test_the_record_cites_every_request_that_erased_the_table_not_the_first_tombstone(
    estate: Estate,
) -> None:
    """Ada's tombstone was first added by a request that found her nowhere (the DPO ruled
    her not held), then two requests erased her here, the second after a pepper rotation."""
    ada = tombstone(estate.store, V1, "email", CANARY, "REQ-2025-NOTHELD")
    complete(estate, "REQ-2025-NOTHELD", ada, erased=[])
    erased = complete(estate, "REQ-2026-ERASED", ada)  # her tombstone was there already
    ada_v2 = tombstone(estate.store, V2, "email", CANARY, "REQ-2027-AGAIN")
    again = complete(estate, "REQ-2027-AGAIN", ada_v2)

    done = estate.replay()

    assert estate.ids() == {r[0] for r in PEOPLE} - {"C001", "C002"}
    cited = {c.request_ref: c for c in done.body.cited}
    assert set(cited) == {"REQ-2026-ERASED", "REQ-2027-AGAIN"}
    assert cited["REQ-2026-ERASED"].completion.seq == erased.seq
    assert cited["REQ-2027-AGAIN"].completion.record_hash == again.record_hash
    assert cited["REQ-2026-ERASED"].rows == cited["REQ-2027-AGAIN"].rows == 2
    assert [t.pepper_version for t in cited["REQ-2027-AGAIN"].tombstones] == [2]


def test_rows_of_a_request_in_flight_or_kept_by_a_ruling_stay(estate: Estate) -> None:
    """Ada's request is still running (its tombstone is in, its rows go in its own run); Cy's
    request kept this table's rows under a DPO ruling; Zed's erased them."""
    ada = tombstone(estate.store, V1, "email", CANARY, "REQ-INFLIGHT")
    estate.ledger.append("REQ-INFLIGHT", ada.subject_hash, "received", received_body())
    cy = tombstone(estate.store, V2, "phone", "+442079460003", "REQ-KEPT")
    kept = {
        "dataset": estate.dataset.as_dict(), "author": "M. Okafor (DPO)",
        "decided_at": "2026-11-21T08:30:00+00:00", "option": "retain_exemption",
        "exemption": "e", "justification": "Held for pending litigation.",
    }  # fmt: skip
    complete(estate, "REQ-KEPT", cy, erased=[], rulings=[kept])
    everyone = estate.ids()

    done = estate.replay()

    assert estate.ids() == everyone and done.body.rows_erased == 0
    held = {h.reason: (h.rows, h.requests) for h in done.body.held}
    assert held == {
        Verdict.RETAINED: (1, ["REQ-KEPT"]),
        Verdict.NOT_COMPLETED: (2, ["REQ-INFLIGHT"]),
    }
    assert done.body.verification.passed and done.body.verification.rows_held == 3
    text = render_replay(done.record, done.body)
    assert "kept: 1 row(s)" in text and "REQ-KEPT" in text
    assert "their own run erases them (in flight)" in text and "REQ-INFLIGHT" in text

    # A later request erased Cy here after the hold ended: the latest decision stands.
    complete(estate, "REQ-LATER", cy)
    later = estate.replay()
    assert estate.ids() == everyone - {"C003"}
    assert [c.request_ref for c in later.body.cited] == ["REQ-LATER"]


# ---------------------------------------------------------------------------------------------
# Other tables: foreign keys that cascade, rows pointed at


def test_a_foreign_key_that_would_cascade_refuses_the_replay_naming_its_table(
    estate: Estate,
) -> None:
    erase_three(estate)
    everyone = estate.ids()
    # Bob's referral names Ada as the referrer: a cascade would delete Bob's row unrecorded.
    other = estate.schema if estate.dialect == "sqlite" else f"{estate.schema}_other"
    parent = "customers" if estate.dialect == "sqlite" else f"{estate.schema}.customers"
    statements = [] if other == estate.schema else [f'CREATE SCHEMA "{other}"']
    for action in ("CASCADE", "SET NULL"):
        estate.execute(
            *statements,
            f"CREATE TABLE {other}.referrals (id INTEGER PRIMARY KEY, referred_by VARCHAR(12) "
            f"REFERENCES {parent}(id) ON DELETE {action})",
            f"INSERT INTO {other}.referrals VALUES (1, 'C001')",
        )
        statements = []
        with pytest.raises(ReplayRefused) as refused:
            estate.replay()
        assert f"{other}.referrals (ON DELETE {action})" in str(refused.value)
        assert estate.ids() == everyone
        assert estate.rows("customers", "count(*)") == [(len(PEOPLE),)]
        estate.execute(f"DROP TABLE {other}.referrals")
    assert estate.replay().body.rows_erased == 3


def test_rows_pointed_at_by_no_row_any_more_are_counted_and_left_to_the_operator(
    estate: Estate,
) -> None:
    ada = tombstone(estate.store, V1, "email", CANARY, "REQ-ADA")
    complete(estate, "REQ-ADA", ada, erased=[estate.ref("accounts")])

    done = estate.replay("accounts")

    assert estate.rows("accounts", "id") == [("A3",)]
    assert estate.rows("addresses", "id") == [(1,), (2,), (3,), (4,)]  # never erased here
    [left] = done.body.references_not_replayed
    # 1: pointed at by Ada's rows only; 2 by Bob's too; 3 by a shipment; 4 never was.
    assert (left.dataset, left.column, left.key, left.rows_unreferenced) == (
        f"{estate.schema}.addresses", "address_id", "id", 1,
    )  # fmt: skip
    text = render_replay(done.record, done.body)
    assert f"NOT ERASED: 1 row(s) of {estate.schema}.addresses" in text
    assert "you must erase them" in text
