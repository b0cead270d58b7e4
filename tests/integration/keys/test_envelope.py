"""Envelope encryption over real key stores: format, AAD binding, tampering, the key cache."""

from __future__ import annotations

import time
from collections.abc import Callable

import hvac
import pytest

from erasure.errors import DecryptionError
from erasure.keys import blob
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import DataKey, KvKeyStore, KvKeyStoreConfig, SubjectKeyStore

pytestmark = [pytest.mark.integration, pytest.mark.vault]

DATASET = "lake.orders_archive"


@pytest.fixture
def subject(keystore: SubjectKeyStore, new_subject: Callable[[], str]) -> str:
    value = new_subject()
    keystore.create(value, dataset=DATASET)
    return value


def test_round_trip(keystore: SubjectKeyStore, subject: str) -> None:
    cipher = EnvelopeCipher(keystore)
    for plaintext in (b"", b"x", b"order 42: 3 items" * 100, bytes(range(256)) * 300):
        record = cipher.encrypt(subject, DATASET, plaintext)
        assert cipher.decrypt(subject, DATASET, record) == plaintext
        assert len(plaintext) < 8 or plaintext[:64] not in record


def test_each_record_gets_a_fresh_nonce(keystore: SubjectKeyStore, subject: str) -> None:
    cipher = EnvelopeCipher(keystore)
    records = {cipher.encrypt(subject, DATASET, b"same bytes") for _ in range(50)}
    assert len(records) == 50
    assert len({blob.parse(r).nonce for r in records}) == 50


def test_blob_layout(kv_store: KvKeyStore, new_subject: Callable[[], str]) -> None:
    subject = new_subject()
    kv_store.create(subject)
    record = EnvelopeCipher(kv_store).encrypt(subject, DATASET, b"12345")
    # version 1, no wrapped key (kv), 12-byte nonce, 5 bytes of ciphertext, 16-byte tag
    assert record[:3] == b"\x01\x00\x00"
    assert len(record) == 3 + 12 + 5 + 16


def test_transit_blob_carries_the_vault_wrapped_data_key(
    transit_store: SubjectKeyStore, new_subject: Callable[[], str]
) -> None:
    subject = new_subject()
    transit_store.create(subject)
    cipher = EnvelopeCipher(transit_store)
    parsed = blob.parse(cipher.encrypt(subject, DATASET, b"12345"))
    assert parsed.wrapped.startswith(b"vault:v1:")
    # A reader without the cache unwraps through Vault.
    fresh = EnvelopeCipher(transit_store, cache_size=0)
    record = cipher.encrypt(subject, DATASET, b"abc")
    assert fresh.decrypt(subject, DATASET, record) == b"abc"


def test_record_opens_only_for_its_subject_and_dataset(
    keystore: SubjectKeyStore, subject: str, new_subject: Callable[[], str]
) -> None:
    other = new_subject()
    keystore.create(other)
    cipher = EnvelopeCipher(keystore)
    record = cipher.encrypt(subject, DATASET, b"secret")

    with pytest.raises(DecryptionError, match="another subject or dataset"):
        cipher.decrypt(subject, "lake.other_dataset", record)
    with pytest.raises(DecryptionError):
        cipher.decrypt(other, DATASET, record)


def test_tampering_anywhere_is_detected(keystore: SubjectKeyStore, subject: str) -> None:
    cipher = EnvelopeCipher(keystore)
    record = cipher.encrypt(subject, DATASET, b"a record worth protecting")
    for position in range(len(record)):
        tampered = bytearray(record)
        tampered[position] ^= 0x01
        with pytest.raises(DecryptionError):
            cipher.decrypt(subject, DATASET, bytes(tampered))


def test_malformed_blobs_are_decryption_errors(keystore: SubjectKeyStore, subject: str) -> None:
    cipher = EnvelopeCipher(keystore)
    record = cipher.encrypt(subject, DATASET, b"payload")
    for bad in (b"", b"\x01", record[:-1][:20], b"\x02" + record[1:], b"\x01\xff\xff" + record[3:]):
        with pytest.raises(DecryptionError):
            cipher.decrypt(subject, DATASET, bad)


def test_missing_key_is_a_decryption_error(
    keystore: SubjectKeyStore, subject: str, new_subject: Callable[[], str]
) -> None:
    record = EnvelopeCipher(keystore).encrypt(subject, DATASET, b"payload")
    never_created = new_subject()
    with pytest.raises(DecryptionError):
        EnvelopeCipher(keystore).decrypt(never_created, DATASET, record)


class CountingKvKeyStore(KvKeyStore):
    """The real KV store, counting how often Vault is asked for a key."""

    calls = 0

    def get(self, subject_hash: str) -> DataKey:
        self.calls += 1
        return super().get(subject_hash)


def test_cache_saves_vault_round_trips_and_forgets_at_shred(
    vault: hvac.Client, kv_store: KvKeyStore, new_subject: Callable[[], str]
) -> None:
    store = CountingKvKeyStore(KvKeyStoreConfig(mount=kv_store.mount), vault)
    subject = new_subject()
    store.create(subject)
    cipher = EnvelopeCipher(store, cache_size=16)
    records = [cipher.encrypt(subject, DATASET, f"row {i}".encode()) for i in range(100)]
    assert [cipher.decrypt(subject, DATASET, r) for r in records][-1] == b"row 99"
    assert store.calls == 1
    assert subject in cipher.cache

    cipher.shred(subject)
    assert subject not in cipher.cache
    with pytest.raises(DecryptionError):
        cipher.decrypt(subject, DATASET, records[0])


def test_another_process_cache_forgets_a_shredded_key_within_its_ttl(
    keystore: SubjectKeyStore, subject: str
) -> None:
    reader = EnvelopeCipher(keystore, ttl_seconds=0.3)  # e.g. a long-running consumer
    record = reader.encrypt(subject, DATASET, b"payload")
    assert reader.decrypt(subject, DATASET, record) == b"payload"

    EnvelopeCipher(keystore).shred(subject)  # shredded by the erasure worker
    time.sleep(0.4)
    with pytest.raises(DecryptionError):
        reader.decrypt(subject, DATASET, record)


def test_cache_is_bounded(kv_store: KvKeyStore, new_subject: Callable[[], str]) -> None:
    cipher = EnvelopeCipher(kv_store, cache_size=3)
    subjects = [new_subject() for _ in range(5)]
    for s in subjects:
        kv_store.create(s)
        cipher.encrypt(s, DATASET, b"x")
    assert len(cipher.cache) == 3
    assert subjects[0] not in cipher.cache and subjects[-1] in cipher.cache
