"""An SQLite erasure store with a ledger signed by an in-memory Ed25519 key."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.audit.records import RecordLedger
from erasure.store import Store, open_store
from tests.unit.audit.support import LocalSigner


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "erasure.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{db_path}") as store:
        yield store


@pytest.fixture
def signer() -> LocalSigner:
    return LocalSigner()


@pytest.fixture
def ledger(store: Store, signer: LocalSigner) -> RecordLedger:
    return RecordLedger(store, signer)


@pytest.fixture
def tamper(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A raw connection to the store file: whoever holds the file can drop the triggers."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()
