"""The store's tables (`erasure.store.schema`): the database itself refuses an identifier where
a ref or a hash belongs, and every table the migrations create is declared."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.store import Store, metadata, open_store
from erasure.store.schema import requests


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as opened:
        yield opened


def test_the_database_refuses_an_identifier_as_ref_or_hash(store: Store) -> None:
    row = {
        "request_ref": "REQ-9",
        "subject_hash": "a" * 64,
        "identifier_type": "email",
        "pepper_version": 1,
        "legal_ground": "art17_1_a",
        "received_on": date(2026, 1, 1),
        "due_on": date(2026, 1, 31),
        "status": "registered",
        "run_id": "r",
        "dry_run": False,
        "created_at": datetime.now(UTC),
        "updated_at": datetime.now(UTC),
    }
    for bad in ({"request_ref": "jane@example.com"}, {"subject_hash": "jane@example.com"}):
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
            conn.execute(requests.insert().values(**{**row, **bad}))


def test_every_store_table_is_known_to_the_schema(store: Store) -> None:
    names = set(sa.inspect(store.engine).get_table_names()) - {"alembic_version"}
    assert {"requests", "request_secrets", "plans", "action_log", "rulings"} <= names
    assert names <= set(metadata.tables)
