"""Per-subject keys and crypto-shredding against a real OpenBao, for both backends."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import hvac
import hvac.exceptions
import pytest

from erasure.config import Settings
from erasure.errors import (
    ConfigError,
    DecryptionError,
    KeyNotFoundError,
    ShredError,
    SubjectError,
    VaultError,
)
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import (
    KvKeyStore,
    SubjectKeyStore,
    TransitKeyStore,
    keystore_from_config,
    keystore_from_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.vault]


def test_create_is_idempotent_and_names_the_key_by_hash_only(
    keystore: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    first = keystore.create(subject, dataset="lake.events")
    second = keystore.create(subject)

    assert first.created and not second.created
    assert first.key_id == second.key_id == keystore.key_id(subject)
    assert first.key_id.startswith(f"{keystore.kind}:") and first.key_id.endswith(subject)
    assert first.dataset == "lake.events"
    assert keystore.exists(subject)
    assert any(subject in name for name in keystore.list_key_names())


def test_the_same_subject_gets_the_same_key_every_time(
    keystore: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    keystore.create(subject)
    cipher = EnvelopeCipher(keystore, cache_size=0)  # no cache: every call goes to Vault
    record = cipher.encrypt(subject, "lake.events", b"order 42")
    keystore.create(subject)  # a second create must not replace the key
    assert cipher.decrypt(subject, "lake.events", record) == b"order 42"


def test_absent_key_is_key_not_found(
    keystore: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    assert not keystore.exists(subject)
    with pytest.raises(KeyNotFoundError, match=subject):
        keystore.get(subject)


def test_shred_destroys_the_key_and_proves_it(
    keystore: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    keystore.create(subject, dataset="lake.events")
    cipher = EnvelopeCipher(keystore)
    record = cipher.encrypt(subject, "lake.events", b"jane's order history")
    assert cipher.decrypt(subject, "lake.events", record) == b"jane's order history"

    before = datetime.now(UTC)
    result = cipher.shred(subject)

    assert result.key_id == keystore.key_id(subject)
    assert result.kind == keystore.kind
    assert not result.already_absent
    assert result.proof.read == "404" and result.proof.decrypt == "failed"
    assert before <= result.shredded_at <= datetime.now(UTC)
    assert result.snapshot_expiry_date == (result.shredded_at + timedelta(days=30)).date()
    # The user-visible consequence: the record written before is unreadable, for good.
    assert not keystore.exists(subject)
    with pytest.raises(KeyNotFoundError):
        keystore.get(subject)
    with pytest.raises(DecryptionError, match="shredded"):
        cipher.decrypt(subject, "lake.events", record)
    with pytest.raises(DecryptionError):
        EnvelopeCipher(keystore).decrypt(subject, "lake.events", record)
    # And a producer can no longer write for the subject.
    with pytest.raises(KeyNotFoundError):
        cipher.encrypt(subject, "lake.events", b"new data")


def test_shred_twice_is_fine_and_says_so(
    keystore: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    keystore.create(subject)
    first = keystore.shred(subject)
    second = keystore.shred(subject)
    never_created = keystore.shred(new_subject())

    assert not first.already_absent
    assert second.already_absent and never_created.already_absent
    assert second.proof == first.proof
    assert second.key_id == first.key_id


def test_prove_shredded_refuses_a_live_key(
    keystore: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    keystore.create(subject)
    with pytest.raises(ShredError, match="still readable"):
        keystore.prove_shredded(subject)
    keystore.shred(subject)
    assert keystore.prove_shredded(subject).read == "404"


def test_snapshot_expiry_follows_the_configured_retention(
    vault: hvac.Client, kv_store: KvKeyStore, new_subject: Callable[[], str]
) -> None:
    store = keystore_from_config(
        {"kind": "kv", "mount": kv_store.mount, "snapshot_retention_days": 90}, vault
    )
    subject = new_subject()
    store.create(subject)
    result = store.shred(subject)
    assert result.snapshot_expiry_date == (result.shredded_at + timedelta(days=90)).date()


def test_a_raw_identifier_is_refused_before_it_reaches_vault(
    keystore: SubjectKeyStore,
) -> None:
    for not_a_hash in ("jane@example.org", "A" * 64, "ab" * 31):
        with pytest.raises(SubjectError) as caught:
            keystore.create(not_a_hash)
        assert not_a_hash not in str(caught.value)
    assert keystore.list_key_names() == []


def test_kv_shred_leaves_no_version_and_no_metadata(
    vault: hvac.Client, kv_store: KvKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    kv_store.create(subject)
    kv_store.shred(subject)
    kv = vault.secrets.kv.v2
    with pytest.raises(hvac.exceptions.InvalidPath):
        kv.read_secret_metadata(path=f"subjects/{subject}", mount_point=kv_store.mount)
    for version in (1, 2):
        with pytest.raises(hvac.exceptions.InvalidPath):
            kv.read_secret_version(
                path=f"subjects/{subject}",
                version=version,
                mount_point=kv_store.mount,
                raise_on_deleted_version=False,
            )


def test_kv_soft_deleted_key_is_not_reused(
    vault: hvac.Client, kv_store: KvKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    kv_store.create(subject)
    vault.secrets.kv.v2.delete_latest_version_of_secret(
        path=f"subjects/{subject}", mount_point=kv_store.mount
    )
    with pytest.raises(KeyNotFoundError, match="soft-deleted"):
        kv_store.create(subject)
    # A soft delete is not a shred: the metadata is still there until shred removes it.
    assert kv_store.exists(subject)
    assert not kv_store.shred(subject).already_absent
    assert not kv_store.exists(subject)


def test_transit_keys_cannot_leave_vault(
    vault: hvac.Client, transit_store: TransitKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    transit_store.create(subject)
    name = f"subject-{subject}"
    config = vault.secrets.transit.read_key(name=name, mount_point=transit_store.mount)["data"]
    assert config["exportable"] is False
    assert config["allow_plaintext_backup"] is False
    assert config["deletion_allowed"] is False
    with pytest.raises(hvac.exceptions.VaultError):
        vault.secrets.transit.export_key(
            name=name, key_type="encryption-key", mount_point=transit_store.mount
        )

    transit_store.shred(subject)
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.secrets.transit.read_key(name=name, mount_point=transit_store.mount)


def test_transit_refuses_to_adopt_an_exportable_key(
    vault: hvac.Client, transit_store: TransitKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    vault.secrets.transit.create_key(
        name=f"subject-{subject}", exportable=True, mount_point=transit_store.mount
    )
    with pytest.raises(VaultError, match="exportable"):
        transit_store.create(subject)


def test_factory_picks_the_backend_by_kind(vault: hvac.Client) -> None:
    assert isinstance(keystore_from_config({"kind": "kv"}, vault), KvKeyStore)
    assert isinstance(keystore_from_config({"kind": "transit"}, vault), TransitKeyStore)
    settings = Settings(keystore_kind="transit", vault_transit_mount="my-transit")
    store = keystore_from_settings(settings, vault)
    assert isinstance(store, TransitKeyStore) and store.mount == "my-transit"
    with pytest.raises(ConfigError, match="kind is one of kv, transit"):
        keystore_from_config({"kind": "hsm"}, vault)
    with pytest.raises(ConfigError, match="snapshot_retention_days"):
        keystore_from_config({"kind": "kv", "snapshot_retention_days": -1}, vault)


def test_a_missing_mount_says_which_and_what_to_do(
    vault: hvac.Client, new_subject: Callable[[], str]
) -> None:
    store = keystore_from_config({"kind": "kv", "mount": "never-enabled"}, vault)
    with pytest.raises(VaultError, match="no such mount") as caught:
        store.create(new_subject())
    assert vault.url in str(caught.value)
