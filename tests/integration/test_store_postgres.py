"""The erasure store on a real PostgreSQL: migrations, constraints, suppression round trip."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from erasure.pseudonym import Pepper, normalise
from erasure.store import Store, head_revision, metadata, open_store, suppression_list
from erasure.suppression import SuppressionList, Tombstone

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

V1 = Pepper(version=1, secret=b"\x11" * 32)
V2 = Pepper(version=2, secret=b"\x22" * 32)


@pytest.fixture
def store_url(postgres_schema_url: str) -> str:
    return postgres_schema_url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as store:
        yield store


def test_open_migrates_an_empty_database_to_head(store: Store) -> None:
    assert store.dialect == "postgresql"
    assert store.revision() == head_revision()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], "schema.py and migrations/versions disagree on Postgres"


def test_concurrent_opens_migrate_once_across_threads(store_url: str) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        stores = list(pool.map(lambda _: open_store(store_url), range(4)))
    try:
        assert {s.revision() for s in stores} == {head_revision()}
    finally:
        for s in stores:
            s.close()


def test_concurrent_opens_migrate_once_across_processes(store_url: str) -> None:
    code = "import sys; from erasure.store import open_store; open_store(sys.argv[1]).close()"
    workers = [
        subprocess.Popen([sys.executable, "-c", code, store_url], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [w.communicate(timeout=120)[1].decode() for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], errors
    with open_store(store_url) as store:
        assert store.revision() == head_revision()


def test_the_database_refuses_a_raw_identifier(store: Store) -> None:
    row = {
        "subject_hash": "jane.doe@example.com",
        "pepper_version": 1,
        "identifier_type": "email",
        "created_at": datetime.now(UTC),
    }
    with (
        pytest.raises(sa.exc.IntegrityError, match="ck_suppression_list_hex_hash"),
        store.engine.begin() as conn,
    ):
        conn.execute(suppression_list.insert().values(**row))


def test_suppression_round_trip_across_a_pepper_rotation(store: Store) -> None:
    suppression = SuppressionList(store)
    email = normalise("email", "Jane.Doe@Example.com")
    written = datetime(2025, 6, 1, 9, 30, tzinfo=timezone(timedelta(hours=-4)))
    old = Tombstone.for_subject(V1, "email", email, request_ref="req-7").model_copy(
        update={"created_at": written}
    )
    assert suppression.add(old) is True
    assert suppression.add(old) is False  # idempotent
    new = Tombstone.for_subject(V2, "phone", "+442079460958", request_ref="req-8")
    assert suppression.add(new) is True

    assert suppression.count() == 2
    assert suppression.contains(old.subject_hash, 1)
    assert not suppression.contains(old.subject_hash, 2)
    assert suppression.hashes_by_version() == {1: {old.subject_hash}, 2: {new.subject_hash}}
    [found] = suppression.check(
        "email", " JANE.DOE@example.COM", [V1, V2], lambda v: normalise("email", v)
    )
    assert found == old
    assert found.created_at == written and found.created_at.tzinfo == UTC


def test_raw_events_are_compressed_with_lz4_where_the_server_has_it(store: Store) -> None:
    with store.engine.connect() as conn:
        has_lz4 = conn.exec_driver_sql(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        ).scalar()
        method = conn.exec_driver_sql(
            "SELECT attcompression FROM pg_attribute "
            "WHERE attrelid = 'lineage_events'::regclass AND attname = 'raw'"
        ).scalar()
    assert method == ("l" if has_lz4 else "")  # lz4, or the server's default
