"""Every key-store kind, built the way the settings and mappings build it, creates, shreds and
proves against a real OpenBao; so does a kind a test module registers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Literal

import hvac
import pytest

from erasure.config import KEYSTORES, KeyStoreConfig, Settings
from erasure.keys.keystore import (
    KvKeyStore,
    KvKeyStoreConfig,
    SubjectKeyStore,
    keystore_from_config,
    keystore_from_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.vault]


class PrefixedKvConfig(KeyStoreConfig):
    """A test's own kind: KV v2 keys on `<prefix>-kv`."""

    kind: Literal["prefixed_kv"] = "prefixed_kv"
    prefix: str


def prefixed_kv(config: PrefixedKvConfig, client: hvac.Client) -> SubjectKeyStore:
    kv = KvKeyStoreConfig(
        mount=f"{config.prefix}-kv", snapshot_retention_days=config.snapshot_retention_days
    )
    return KvKeyStore(kv, client)


@pytest.fixture
def prefixed_kind() -> Iterator[None]:
    KEYSTORES.register(PrefixedKvConfig, prefixed_kv)
    yield
    KEYSTORES.unregister("prefixed_kv")


def create_shred_prove(store: SubjectKeyStore, subject: str) -> None:
    store.ensure_mount()
    assert store.create(subject).created
    result = store.shred(subject)
    assert not result.already_absent and not store.exists(subject)
    assert result.kind == store.kind


@pytest.mark.parametrize("kind", ["kv", "transit"])
def test_each_built_in_kind_builds_from_a_mapping_and_from_settings(
    vault: hvac.Client, new_subject: Callable[[], str], kind: str
) -> None:
    mount = f"{kind}-{uuid.uuid4().hex[:8]}"
    create_shred_prove(keystore_from_config({"kind": kind, "mount": mount}, vault), new_subject())
    settings = Settings(
        keystore_kind=kind, vault_kv_mount=f"s{mount}", vault_transit_mount=f"s{mount}"
    )
    store = keystore_from_settings(settings, vault)
    assert store.kind == kind and store.key_id("0" * 64).startswith(f"{kind}:s{mount}/")
    create_shred_prove(store, new_subject())


@pytest.mark.usefixtures("prefixed_kind")
def test_a_kind_from_outside_erasure_creates_and_shreds_for_real(
    vault: hvac.Client, new_subject: Callable[[], str]
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}"
    store = keystore_from_config({"kind": "prefixed_kv", "prefix": prefix}, vault)
    create_shred_prove(store, new_subject())
    assert f"{prefix}-kv/" in vault.sys.list_mounted_secrets_engines()["data"]
