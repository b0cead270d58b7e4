"""Signatures on completion records: Ed25519 in Vault transit, verified with the public key alone.

The private key is a non-exportable transit key: it never leaves Vault and never sits in the
erasure store. Vault signs the record hash and answers `vault:v<version>:<base64 signature>`;
anyone holding the public key of that version (`GET <mount>/keys/<name>`, raw 32 bytes in
base64) can check it offline with `verify_with_public_key`.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Protocol

import hvac
import hvac.exceptions
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from erasure.errors import ConfigError, ErasureError, VaultError
from erasure.keys.vault import (
    address_of,
    ensure_transit,
    read_transit_key,
    vault_errors,
)

DEFAULT_KEY_NAME = "completion-records"
KEY_TYPE = "ed25519"

_VAULT_SIGNATURE = re.compile(r"^vault:v(\d+):([A-Za-z0-9+/=]+)$")


class SignatureFormatError(ErasureError):
    """A public key or signature is not in a form this module can read."""


class RecordSigner(Protocol):
    """What the ledger needs from a signer: sign record hashes, publish public keys."""

    def latest_version(self) -> int:
        """The key version new signatures are made with."""
        ...

    def sign(self, payload: bytes, key_version: int | None = None) -> tuple[str, int]:
        """Sign `payload`; returns the signature (`vault:v<n>:<base64>`) and the version used."""
        ...

    def public_keys(self) -> dict[int, str]:
        """Every public key version still held, as base64 of the raw 32 bytes."""
        ...


class TransitSigner:
    """Signs with a non-exportable ed25519 key in Vault transit, created on first use."""

    def __init__(self, client: hvac.Client, mount: str, key_name: str = DEFAULT_KEY_NAME) -> None:
        self._client = client
        self._mount = mount
        self._name = key_name
        self._ready = False

    @property
    def key_id(self) -> str:
        """Where the key lives, for messages and evidence: `transit:<mount>/keys/<name>`."""
        return f"transit:{self._mount}/keys/{self._name}"

    @property
    def address(self) -> str:
        return address_of(self._client)

    def ensure_key(self) -> None:
        """Enable the mount and create the key unless present; refuse a key that could leak."""
        if self._ready:
            return
        # An existing key needs no mount check: the signer identity reads only its key.
        try:
            info = self._read()
        except VaultError as exc:
            if not isinstance(exc.__cause__, hvac.exceptions.InvalidPath):
                raise
            info = None  # no transit mount yet: enabled below
        if info is None:
            ensure_transit(self._client, self._mount)
            with vault_errors(self.address, f"create the signing key {self.key_id}"):
                self._client.secrets.transit.create_key(
                    name=self._name,
                    key_type=KEY_TYPE,
                    exportable=False,
                    allow_plaintext_backup=False,
                    mount_point=self._mount,
                )
            info = self._read()
            if info is None:
                raise VaultError(f"Vault at {self.address} did not keep {self.key_id}")
        self._check(info)
        self._ready = True

    def latest_version(self) -> int:
        self.ensure_key()
        info = self._read()
        if info is None:
            raise VaultError(f"the signing key {self.key_id} at {self.address} has disappeared")
        return int(info["latest_version"])

    def sign(self, payload: bytes, key_version: int | None = None) -> tuple[str, int]:
        self.ensure_key()
        with vault_errors(self.address, f"sign with {self.key_id}"):
            response = self._client.secrets.transit.sign_data(
                name=self._name,
                hash_input=base64.b64encode(payload).decode("ascii"),
                key_version=key_version,
                mount_point=self._mount,
            )
        signature = str(response["data"]["signature"])
        version = signature_version(signature)
        if key_version is not None and version != key_version:
            raise VaultError(
                f"Vault at {self.address} signed with version {version} of {self.key_id}, "
                f"not the requested {key_version}"
            )
        return signature, version

    def public_keys(self) -> dict[int, str]:
        """Public keys by version; {} when the key does not exist (nothing was signed yet)."""
        info = self._read()
        if info is None:
            return {}
        self._check(info)
        keys: dict[str, dict[str, Any]] = info.get("keys") or {}
        return {int(v): str(k["public_key"]) for v, k in keys.items() if k.get("public_key")}

    def _read(self) -> dict[str, Any] | None:
        return read_transit_key(self._client, self._mount, self._name)

    def _check(self, info: dict[str, Any]) -> None:
        if info.get("type") != KEY_TYPE:
            raise ConfigError(
                f"{self.key_id} at {self.address} is a {info.get('type')} key, not {KEY_TYPE}: "
                "choose another signing key name"
            )
        if info.get("exportable") or info.get("allow_plaintext_backup"):
            # A copy may exist outside Vault: its signatures would prove nothing.
            raise VaultError(
                f"{self.key_id} at {self.address} is exportable or allows plaintext backup: "
                "records signed with it could be forged; create a new non-exportable key"
            )


def signature_version(signature: str) -> int:
    """The key version in a Vault signature `vault:v<n>:...`."""
    match = _VAULT_SIGNATURE.match(signature.strip())
    if match is None:
        raise SignatureFormatError("a signature must look like vault:v<version>:<base64>")
    return int(match.group(1))


def load_public_key(public_key: str) -> Ed25519PublicKey:
    """An Ed25519 public key from Vault's base64 of the raw 32 bytes, or from PEM."""
    text = public_key.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise SignatureFormatError("the PEM public key cannot be read") from None
        if not isinstance(key, Ed25519PublicKey):
            raise SignatureFormatError("the PEM public key is not an Ed25519 key")
        return key
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureFormatError("the public key is neither PEM nor base64") from None
    if len(raw) != 32:
        raise SignatureFormatError(f"an Ed25519 public key has 32 bytes, not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def public_key_pem(public_key: str) -> str:
    """The PEM (SubjectPublicKeyInfo) form of a public key, for tools like openssl."""
    return (
        load_public_key(public_key)
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def verify_with_public_key(
    public_key: str | Ed25519PublicKey, payload: bytes, signature: str
) -> bool:
    """True if `signature` (Vault form or bare base64) signs `payload` under `public_key`.

    No Vault call: the public key is all an auditor needs. A malformed signature is False;
    a malformed public key raises SignatureFormatError.
    """
    key = public_key if isinstance(public_key, Ed25519PublicKey) else load_public_key(public_key)
    text = signature.strip()
    match = _VAULT_SIGNATURE.match(text)
    encoded = match.group(2) if match else text
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return False
    try:
        key.verify(raw, payload)
    except InvalidSignature:
        return False
    return True
