"""The registry tests' fixtures: an SQLite store, the books over it, an in-memory key store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.catalog import Catalog
from erasure.store import Store, open_store
from tests.unit.registry.support import CATALOG, MemoryKeyStore, Peppers
from tests.unit.registry_support import Books, books_for


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as opened:
        yield opened


@pytest.fixture
def keys() -> MemoryKeyStore:
    return MemoryKeyStore()


@pytest.fixture
def peppers() -> Peppers:
    return Peppers()


@pytest.fixture
def registry(store: Store, keys: MemoryKeyStore, peppers: Peppers) -> Books:
    return books_for(store, keys, peppers)


@pytest.fixture
def catalog() -> Catalog:
    return Catalog.model_validate(CATALOG)
