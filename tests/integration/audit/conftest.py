"""Audit fixtures over the session OpenBao: every test signs with its own transit mount."""

from __future__ import annotations

import uuid

import hvac
import pytest

from erasure.audit.anchor import VaultAnchorBoard
from erasure.audit.signing import TransitSigner
from erasure.keys.vault import EmbeddedOpenBao, ensure_kv_v2


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


@pytest.fixture
def kv_mount(vault: hvac.Client) -> str:
    mount = f"anchors-{uuid.uuid4().hex[:8]}"
    ensure_kv_v2(vault, mount)
    return mount


@pytest.fixture
def anchor_board(vault: hvac.Client, kv_mount: str) -> VaultAnchorBoard:
    """The chain-head board in a KV v2 mount of its own."""
    return VaultAnchorBoard(vault, kv_mount)
