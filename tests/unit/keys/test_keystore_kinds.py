"""Key stores are kinds: `ERASURE_KEYSTORE_KIND` takes any registered one, including one a
test module adds without touching erasure/, and refuses the rest naming the known kinds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal, Self

import hvac
import pytest

from erasure.config import KEYSTORES, KeyStoreConfig, Settings
from erasure.errors import ConfigError
from erasure.keys.keystore import (
    KvKeyStore,
    KvKeyStoreConfig,
    SubjectKeyStore,
    TransitKeyStore,
    keystore_config_from_settings,
    keystore_from_config,
    keystore_from_settings,
)
from erasure.kinds import KindConfig

CLIENT = hvac.Client(url="http://127.0.0.1:9")  # building a client does not contact it
SECRET = "s.9d2b7e41c0"


class TenantKvConfig(KeyStoreConfig):
    """A test's own kind: KV v2 keys on a mount per tenant, the tenant from its own variable."""

    kind: Literal["tenant_kv"] = "tenant_kv"
    tenant: str = "default"

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            tenant=os.environ.get("TENANT_KV_TENANT", "default"),
            snapshot_retention_days=settings.vault_snapshot_retention_days,
        )


def tenant_kv(config: TenantKvConfig, client: hvac.Client) -> SubjectKeyStore:
    kv = KvKeyStoreConfig(
        mount=f"{config.tenant}-kv", snapshot_retention_days=config.snapshot_retention_days
    )
    return KvKeyStore(kv, client)


@pytest.fixture
def tenant_kind() -> Iterator[None]:
    KEYSTORES.register(TenantKvConfig, tenant_kv)
    yield
    KEYSTORES.unregister("tenant_kv")


def test_the_built_in_kinds_are_registered_and_each_builds() -> None:
    assert KEYSTORES.names() == ["kv", "transit"]
    assert type(keystore_from_config({"kind": "kv"}, CLIENT)) is KvKeyStore
    assert type(keystore_from_config({"kind": "transit"}, CLIENT)) is TransitKeyStore
    for kind, store_type in (("kv", KvKeyStore), ("transit", TransitKeyStore)):
        store = keystore_from_settings(Settings(keystore_kind=kind), CLIENT)
        assert type(store) is store_type and store.kind == kind


@pytest.mark.usefixtures("tenant_kind")
def test_a_kind_registered_by_a_test_module_is_selected_by_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERASURE_KEYSTORE_KIND", "tenant_kv")
    monkeypatch.setenv("ERASURE_VAULT_SNAPSHOT_RETENTION_DAYS", "7")
    monkeypatch.setenv("TENANT_KV_TENANT", "acme")
    settings = Settings()

    assert keystore_config_from_settings(settings) == TenantKvConfig(
        tenant="acme", snapshot_retention_days=7
    )
    store = keystore_from_settings(settings, CLIENT)
    assert isinstance(store, KvKeyStore) and store.mount == "acme-kv"
    assert KEYSTORES.names() == ["kv", "tenant_kv", "transit"]


def test_an_unknown_kind_in_the_environment_names_the_variable_and_the_kinds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERASURE_KEYSTORE_KIND", "tenant_kv")  # not registered here
    with pytest.raises(ConfigError) as caught:
        Settings()
    message = str(caught.value)
    assert "ERASURE_KEYSTORE_KIND: unknown key store kind 'tenant_kv'" in message
    assert "kind is one of kv, transit" in message and "erasure.keystores" in message


def test_a_config_error_names_the_field_not_the_secret() -> None:
    with pytest.raises(ConfigError) as caught:
        keystore_from_config({"kind": "transit", "token": SECRET, "mount": [SECRET]}, CLIENT)
    message = str(caught.value)
    assert "token: Extra inputs are not permitted" in message
    assert "mount: Input should be a valid string" in message
    assert SECRET not in message


def test_a_key_store_kind_must_extend_the_family_config() -> None:
    class Loose(KindConfig):
        kind: Literal["loose"] = "loose"

    with pytest.raises(TypeError, match="must extend KeyStoreConfig"):
        KEYSTORES.register(Loose, lambda config, client: tenant_kv(TenantKvConfig(), client))  # type: ignore[arg-type]
    assert "loose" not in KEYSTORES.names()
