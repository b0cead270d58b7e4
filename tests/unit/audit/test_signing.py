"""Offline signature checks: the public key alone, in Vault's base64 form or as PEM."""

from __future__ import annotations

import base64

import pytest

from erasure.audit.signing import (
    SignatureFormatError,
    load_public_key,
    public_key_pem,
    signature_version,
    verify_with_public_key,
)
from tests.unit.audit.support import LocalSigner

PAYLOAD = b"4f2a" * 16  # a record hash, as signed


def test_a_signature_verifies_with_the_public_key_in_either_form() -> None:
    signer = LocalSigner()
    signature, version = signer.sign(PAYLOAD)
    public = signer.public_keys()[version]
    assert verify_with_public_key(public, PAYLOAD, signature)
    assert verify_with_public_key(public_key_pem(public), PAYLOAD, signature)
    assert verify_with_public_key(public, PAYLOAD, signature.split(":", 2)[2])  # bare base64


def test_a_changed_payload_or_another_key_does_not_verify() -> None:
    signer, other = LocalSigner(), LocalSigner()
    signature, version = signer.sign(PAYLOAD)
    assert not verify_with_public_key(signer.public_keys()[version], PAYLOAD[:-1] + b"0", signature)
    assert not verify_with_public_key(other.public_keys()[1], PAYLOAD, signature)
    assert not verify_with_public_key(signer.public_keys()[1], PAYLOAD, "vault:v1:not*base64")


def test_a_malformed_public_key_is_an_error_not_a_silent_false() -> None:
    with pytest.raises(SignatureFormatError, match="32 bytes"):
        load_public_key(base64.b64encode(b"short").decode())
    with pytest.raises(SignatureFormatError, match="neither PEM nor base64"):
        load_public_key("not a key!")


def test_the_key_version_is_read_from_the_vault_signature() -> None:
    assert signature_version("vault:v12:AAAA") == 12
    with pytest.raises(SignatureFormatError):
        signature_version("AAAA")
