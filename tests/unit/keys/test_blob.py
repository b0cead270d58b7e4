"""The envelope blob format: layout, AAD binding, tamper and truncation detection."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from erasure.errors import DecryptionError
from erasure.keys import blob

SUBJECT = "ab" * 32
DATASET = "lake.events"


@pytest.fixture
def aead() -> AESGCM:
    return AESGCM(os.urandom(32))


def test_layout_is_version_wrapped_key_nonce_ciphertext(aead: AESGCM) -> None:
    sealed = blob.seal(aead, b"vault:v1:wrapped", SUBJECT, DATASET, b"hello")
    assert sealed[0] == blob.FORMAT_VERSION
    assert int.from_bytes(sealed[1:3], "big") == len(b"vault:v1:wrapped")
    parsed = blob.parse(sealed)
    assert parsed.wrapped == b"vault:v1:wrapped"
    assert len(parsed.nonce) == 12
    assert len(parsed.ciphertext) == len(b"hello") + 16
    assert len(sealed) == 3 + 16 + 12 + 5 + 16


def test_round_trip(aead: AESGCM) -> None:
    sealed = blob.seal(aead, b"", SUBJECT, DATASET, b"payload")
    assert blob.open_blob(aead, blob.parse(sealed), SUBJECT, DATASET) == b"payload"


@pytest.mark.parametrize(
    ("subject", "dataset"),
    [("cd" * 32, DATASET), (SUBJECT, "lake.other"), (SUBJECT, DATASET + "\x00")],
)
def test_aad_binds_subject_and_dataset(aead: AESGCM, subject: str, dataset: str) -> None:
    sealed = blob.parse(blob.seal(aead, b"", SUBJECT, DATASET, b"payload"))
    with pytest.raises(DecryptionError, match="another subject or dataset"):
        blob.open_blob(aead, sealed, subject, dataset)


def test_aad_fields_cannot_be_shifted_into_each_other() -> None:
    # Length prefixes: ("ab", "c") and ("a", "bc") must not give the same AAD.
    assert blob.associated_data(b"h", "ab", "c") != blob.associated_data(b"h", "a", "bc")


def test_every_flipped_bit_is_detected(aead: AESGCM) -> None:
    sealed = blob.seal(aead, b"wrapped-key", SUBJECT, DATASET, b"a record")
    for position in range(len(sealed)):
        for bit in (0x01, 0x80):
            tampered = bytearray(sealed)
            tampered[position] ^= bit
            with pytest.raises(DecryptionError):
                blob.open_blob(aead, blob.parse(bytes(tampered)), SUBJECT, DATASET)


def test_wrong_key_fails(aead: AESGCM) -> None:
    sealed = blob.parse(blob.seal(aead, b"", SUBJECT, DATASET, b"payload"))
    with pytest.raises(DecryptionError):
        blob.open_blob(AESGCM(os.urandom(32)), sealed, SUBJECT, DATASET)


@pytest.mark.parametrize("cut", [0, 1, 2, 3, 14, 30])
def test_truncated_blobs_are_refused(aead: AESGCM, cut: int) -> None:
    sealed = blob.seal(aead, b"", SUBJECT, DATASET, b"")
    with pytest.raises(DecryptionError):
        blob.parse(sealed[:cut])


def test_unknown_version_is_refused_with_both_versions_named(aead: AESGCM) -> None:
    sealed = blob.seal(aead, b"", SUBJECT, DATASET, b"x")
    with pytest.raises(DecryptionError, match="version 7; this code reads 1"):
        blob.parse(b"\x07" + sealed[1:])


def test_nonces_are_fresh(aead: AESGCM) -> None:
    nonces = {blob.parse(blob.seal(aead, b"", SUBJECT, DATASET, b"x")).nonce for _ in range(1000)}
    assert len(nonces) == 1000
