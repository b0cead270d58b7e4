"""Completion records on a real PostgreSQL: triggers, chain lock, tamper detection."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from erasure.audit.canonical import canonical_json
from erasure.audit.export import export_html, export_json
from erasure.audit.records import RecordLedger
from erasure.store import Store, metadata, open_store
from erasure.store.schema import completion_chain_head, completion_records
from tests.unit.audit.support import (
    CANARY,
    OTHER_SUBJECT,
    SUBJECT,
    LocalSigner,
    received_body,
    record_request,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def store_url(postgres_url: str) -> str:
    """An isolated, empty store: its own schema first on the search path."""
    schema = f"records_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    return f"{postgres_url}?options=-csearch_path%3D{schema}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as store:
        yield store


@pytest.fixture
def signer() -> LocalSigner:
    return LocalSigner()


@pytest.fixture
def ledger(store: Store, signer: LocalSigner) -> RecordLedger:
    record_request(RecordLedger(store, signer), "REQ-2026-000A")
    record_request(RecordLedger(store, signer), "REQ-2026-000B", with_tape=True)
    record_request(RecordLedger(store, signer), "REQ-2026-000C")
    return RecordLedger(store, signer)


@pytest.fixture
def superuser(store_url: str) -> Iterator[sa.Connection]:
    """A separate superuser session on the store's schema, in autocommit, for tampering."""
    engine = sa.create_engine(store_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        yield conn
    engine.dispose()


def test_the_schema_matches_and_the_chain_verifies(store: Store, ledger: RecordLedger) -> None:
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    report = ledger.verify()
    assert report.ok and report.records == 12, report.summary()


@pytest.mark.parametrize(
    "statement",
    [
        completion_records.update().where(completion_records.c.seq == 6).values(status=None),
        completion_records.delete().where(completion_records.c.seq == 6),
        sa.text("TRUNCATE completion_records"),
    ],
    ids=["update", "delete", "truncate"],
)
def test_the_application_connection_cannot_change_a_record(
    store: Store, ledger: RecordLedger, statement: sa.Executable
) -> None:
    with pytest.raises(sa.exc.IntegrityError, match="append-only"), store.engine.begin() as conn:
        conn.execute(statement)
    assert ledger.verify().ok


def test_the_head_only_moves_forward(store: Store, ledger: RecordLedger) -> None:
    with (
        pytest.raises(sa.exc.IntegrityError, match="only moves forward"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_chain_head.update().values(seq=4))
    with (
        pytest.raises(sa.exc.IntegrityError, match="cannot be deleted"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_chain_head.delete())


def test_a_fork_is_refused_by_the_database(store: Store, ledger: RecordLedger) -> None:
    fifth = ledger.list()[4]
    row = {**fifth.model_dump(), "seq": 13, "body": "{}", "record_hash": "e" * 64}
    with (
        pytest.raises(sa.exc.IntegrityError, match="must extend the chain head"),
        store.engine.begin() as conn,
    ):
        conn.execute(completion_records.insert().values(**row))


def test_an_edited_middle_record_is_named(ledger: RecordLedger, superuser: sa.Connection) -> None:
    superuser.execute(
        sa.text("ALTER TABLE completion_records DISABLE TRIGGER completion_records_append_only")
    )
    body = json.loads(
        superuser.execute(sa.text("SELECT body FROM completion_records WHERE seq = 8")).scalar_one()
    )
    body["artefacts"][0]["evidence"]["rows_deleted"] = 0  # "nothing was ever deleted"
    superuser.execute(
        sa.text("UPDATE completion_records SET body = :b WHERE seq = 8"),
        {"b": canonical_json(body).decode()},
    )
    report = ledger.verify()
    first = report.first_problem
    assert first is not None
    assert (first.seq, first.request_ref, first.problem) == (8, "REQ-2026-000B", "hash_mismatch")


def test_a_deleted_record_is_named_as_a_gap(ledger: RecordLedger, superuser: sa.Connection) -> None:
    superuser.execute(
        sa.text("ALTER TABLE completion_records DISABLE TRIGGER completion_records_append_only")
    )
    superuser.execute(sa.text("DELETE FROM completion_records WHERE seq = 5"))
    report = ledger.verify()
    first = report.first_problem
    assert first is not None and (first.seq, first.problem) == (5, "missing")
    assert report.summary().startswith("chain BROKEN at seq 5: record seq 5 is missing")


def test_concurrent_appenders_never_fork_the_chain(store_url: str, signer: LocalSigner) -> None:
    open_store(store_url).close()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with open_store(store_url, migrate=False) as store:
                ledger = RecordLedger(store, signer)
                for i in range(10):
                    subject = SUBJECT if i % 2 else OTHER_SUBJECT
                    ledger.append(f"REQ-{n:02d}-{i:02d}", subject, "received", received_body())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open_store(store_url, migrate=False) as store:
        ledger = RecordLedger(store, signer)
        assert [r.seq for r in ledger.list()] == list(range(1, 81))
        assert ledger.verify().ok


def test_exports_from_postgres_hold_no_identifier(ledger: RecordLedger) -> None:
    pack = export_json(ledger, "REQ-2026-000B")
    assert pack["verify"]["ok"] is True
    for text in (json.dumps(pack, ensure_ascii=False), export_html(ledger, "REQ-2026-000B")):
        assert CANARY.casefold() not in text.casefold()
