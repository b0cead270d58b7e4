"""Audit fixtures over the session OpenBao: every test signs with its own transit mount."""

from __future__ import annotations

import uuid

import hvac
import pytest

from erasure.audit.signing import TransitSigner
from erasure.keys.vault import EmbeddedOpenBao


@pytest.fixture(scope="session")
def vault(openbao: EmbeddedOpenBao) -> hvac.Client:
    """A root client on the session server."""
    return openbao.client()


@pytest.fixture
def transit_mount() -> str:
    return f"records-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def transit_signer(vault: hvac.Client, transit_mount: str) -> TransitSigner:
    return TransitSigner(vault, transit_mount, "completion-records")
