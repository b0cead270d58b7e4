"""The Iceberg tests run on pyiceberg's SQL catalog over SQLite and over Postgres."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.lakehouse import IcebergCatalogConfig
from tests.unit.lakehouse.iceberg_support import Lake


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A SQL catalog (a SQLite file in tmp_path, or a fresh Postgres schema) and a warehouse in
    tmp_path, both given as a catalog file would: relative to its directory."""
    uri = (
        request.getfixturevalue("postgres_schema_url")
        if request.param == "postgres"
        else "sqlite:///catalog.db"
    )
    config = IcebergCatalogConfig(properties={"type": "sql", "uri": uri, "warehouse": "warehouse"})
    return Lake(config, tmp_path)
