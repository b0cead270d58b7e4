"""Key-store selection and the subject-hash guard (no server needed)."""

from __future__ import annotations

import hvac
import pytest

from erasure.config import Settings
from erasure.errors import ConfigError, SubjectError
from erasure.keys.keystore import (
    KvKeyStore,
    KvKeyStoreConfig,
    TransitKeyStore,
    TransitKeyStoreConfig,
    check_subject_hash,
    keystore_config_from_settings,
    keystore_from_config,
)
from erasure.pseudonym import Pepper, subject_hash

# Building a client does not contact the server.
CLIENT = hvac.Client(url="http://127.0.0.1:9")


def test_a_keyed_hash_passes_the_guard() -> None:
    value = subject_hash(Pepper(1, b"k" * 32), "email", "jane@example.org")
    assert check_subject_hash(value) == value


@pytest.mark.parametrize(
    "value", ["jane@example.org", "", "A" * 64, "g" * 64, "ab" * 33, "../" + "a" * 61]
)
def test_anything_else_is_refused_without_being_echoed(value: str) -> None:
    with pytest.raises(SubjectError) as caught:
        check_subject_hash(value)
    assert not value or value not in str(caught.value)


def test_key_ids_hold_only_the_hash() -> None:
    h = "0f" * 32
    assert KvKeyStore(KvKeyStoreConfig(), CLIENT).key_id(h) == f"kv:erasure-kv/subjects/{h}"
    transit = TransitKeyStore(TransitKeyStoreConfig(), CLIENT)
    assert transit.key_id(h) == f"transit:erasure-transit/keys/subject-{h}"


def test_factory_picks_by_kind() -> None:
    assert isinstance(keystore_from_config(KvKeyStoreConfig(), CLIENT), KvKeyStore)
    assert isinstance(keystore_from_config({"kind": "transit"}, CLIENT), TransitKeyStore)
    assert keystore_from_config({"kind": "kv", "mount": "x"}, CLIENT).kind == "kv"


def test_factory_names_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match="kind is one of kv, transit"):
        keystore_from_config({"kind": "nope"}, CLIENT)
    with pytest.raises(ConfigError, match="mountpoint: Extra inputs are not permitted"):
        keystore_from_config({"kind": "kv", "mountpoint": "x"}, CLIENT)


def test_settings_select_backend_mount_and_retention() -> None:
    kv = keystore_config_from_settings(
        Settings(keystore_kind="kv", vault_snapshot_retention_days=7)
    )
    assert kv == KvKeyStoreConfig(mount="erasure-kv", snapshot_retention_days=7)
    transit = keystore_config_from_settings(Settings(vault_transit_mount="t"))  # the default
    assert transit == TransitKeyStoreConfig(mount="t", snapshot_retention_days=30)
