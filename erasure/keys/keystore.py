"""Per-subject keys in Vault, and crypto-shredding that proves itself.

Two backends behind one protocol, each declaring its `kind` and a typed config, registered
with the key-store family (erasure.config.KEYSTORES) that picks by kind:

- `transit` (default): one non-exportable transit key per subject, `subject-<hash>`, that
  wraps data keys inside Vault; the key never leaves it (exportable=false,
  allow_plaintext_backup=false). Shred = allow deletion, then delete the key: no copy of it
  exists anywhere else, so every data key it wrapped is unreadable from then on (a data key
  a worker held in memory while encrypting is the one thing Vault cannot vouch for).
- `kv`: a random 256-bit data key per subject in KV v2 at `subjects/<hash>`, read in the
  clear by the worker. Shred = delete the metadata and every version (a soft delete is not a
  shred). It proves the key gone from Vault, not that no copy of it survives elsewhere.

Only the keyed subject hash ever appears in a key name or path.
"""

from __future__ import annotations

import base64
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import hvac
import hvac.exceptions
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, ConfigDict

from erasure.config import (
    KEYSTORES,
    KeyStoreConfig,
    KvKeyStoreConfig,
    Settings,
    TransitKeyStoreConfig,
)
from erasure.errors import (
    ConfigError,
    DecryptionError,
    KeyNotFoundError,
    ShredError,
    SubjectError,
    VaultError,
)
from erasure.keys import blob
from erasure.keys.vault import (
    TRANSIT_KEY_GONE,
    address_of,
    ensure_kv_v2,
    ensure_transit,
    is_not_found,
    read_transit_key,
    vault_errors,
)

_SUBJECT_HASH = re.compile(r"^[0-9a-f]{64}$")
_PROBE_DATASET = "erasure:shred-probe"


def check_subject_hash(subject_hash: str) -> str:
    """The hash itself if it is a hex HMAC-SHA256; SubjectError otherwise (never echoing it).

    This is the guard that keeps a raw identifier out of Vault paths: anything that is not
    64 lowercase hex characters is refused before it can become part of a key name.
    """
    if not isinstance(subject_hash, str) or not _SUBJECT_HASH.match(subject_hash):
        length = len(subject_hash) if isinstance(subject_hash, str) else "?"
        raise SubjectError(
            f"a subject hash must be 64 lowercase hex characters (HMAC-SHA256 from "
            f"erasure.pseudonym.subject_hash); got a value of length {length}"
        )
    return subject_hash


# ---------------------------------------------------------------------------------------------
# Results


class KeyInfo(BaseModel):
    """A subject key as evidence records it: hashed key id, backend, whether this call made it."""

    model_config = ConfigDict(frozen=True)

    key_id: str
    kind: str
    created: bool  # False: the key already existed (create is idempotent)
    dataset: str | None = None


class ShredProof(BaseModel):
    """How destruction was proven: the key read answered 404, a decrypt attempt failed."""

    model_config = ConfigDict(frozen=True)

    read: Literal["404"] = "404"
    decrypt: Literal["failed"] = "failed"


class ShredResult(BaseModel):
    """Evidence of one crypto-shred."""

    model_config = ConfigDict(frozen=True)

    key_id: str
    kind: str
    shredded_at: datetime
    already_absent: bool  # the key was gone before this call: shredding twice is fine
    proof: ShredProof
    # After this date no Vault snapshot taken before the shred can still hold the key.
    snapshot_expiry_date: date


@dataclass(frozen=True, slots=True)
class DataKey:
    """A 256-bit data key in the clear, plus what a blob stores to get it back (b"" for kv)."""

    material: bytes
    wrapped: bytes

    def __repr__(self) -> str:
        return f"DataKey(material=<redacted>, wrapped={len(self.wrapped)} bytes)"


# ---------------------------------------------------------------------------------------------
# The protocol


@runtime_checkable
class SubjectKeyStore(Protocol):
    """Where per-subject keys live; every method takes the keyed subject hash, never a value."""

    kind: ClassVar[str]

    @property
    def address(self) -> str:
        """The Vault server, for messages."""
        ...

    def ensure_mount(self) -> None:
        """Enable the backend's secrets engine if absent (needs sys/mounts rights)."""
        ...

    def create(self, subject_hash: str, dataset: str | None = None) -> KeyInfo:
        """Create the subject's key, or return the existing one (idempotent)."""
        ...

    def get(self, subject_hash: str) -> DataKey:
        """A data key to encrypt the subject's records with; KeyNotFoundError if absent."""
        ...

    def unwrap(self, subject_hash: str, wrapped: bytes) -> bytes:
        """The data key a blob was written under; KeyNotFoundError if the key is gone."""
        ...

    def shred(self, subject_hash: str) -> ShredResult:
        """Destroy every version of the key permanently and prove it (idempotent)."""
        ...

    def prove_shredded(self, subject_hash: str, probe: bytes | None = None) -> ShredProof:
        """Show the key is gone: read is 404 and decrypting `probe` fails; ShredError if not."""
        ...

    def exists(self, subject_hash: str) -> bool:
        """Whether the subject's key exists."""
        ...

    def key_id(self, subject_hash: str) -> str:
        """The key's id as evidence records it: backend, mount and path, hash only."""
        ...

    def list_key_names(self) -> list[str]:
        """Every subject key name in the backend (small estates and tests: it lists them all)."""
        ...


class _VaultKeyStore(ABC):
    """Shred-and-prove, shared by both backends; subclasses say how to read, wrap and destroy."""

    kind: ClassVar[str]

    def __init__(self, client: hvac.Client, mount: str, snapshot_retention_days: int) -> None:
        self._client = client
        self._mount = mount
        self._retention = timedelta(days=snapshot_retention_days)

    @property
    def address(self) -> str:
        return address_of(self._client)

    @property
    def mount(self) -> str:
        return self._mount

    def shred(self, subject_hash: str) -> ShredResult:
        """Destroy the key, then prove it: read 404 and a record sealed just before won't open."""
        check_subject_hash(subject_hash)
        key_id = self.key_id(subject_hash)
        probe: bytes | None = None
        try:
            # A record sealed under the key right before its destruction: the decrypt proof.
            data_key = self.get(subject_hash)
            probe = blob.seal(
                AESGCM(data_key.material), data_key.wrapped, subject_hash, _PROBE_DATASET, b"p"
            )
            already_absent = False
        except KeyNotFoundError:
            # Unreadable is not necessarily gone: a soft-deleted kv key still has remains.
            already_absent = not self.exists(subject_hash)
        if not already_absent:
            self._destroy(subject_hash)
        # For a key found already gone this is when its absence was confirmed: later than the
        # real destruction, so the snapshot expiry derived from it errs on the safe side.
        shredded_at = datetime.now(UTC)
        proof = self.prove_shredded(subject_hash, probe)
        return ShredResult(
            key_id=key_id,
            kind=self.kind,
            shredded_at=shredded_at,
            already_absent=already_absent,
            proof=proof,
            snapshot_expiry_date=(shredded_at + self._retention).date(),
        )

    def prove_shredded(self, subject_hash: str, probe: bytes | None = None) -> ShredProof:
        check_subject_hash(subject_hash)
        key_id = self.key_id(subject_hash)
        if self.exists(subject_hash):
            raise ShredError(f"the key {key_id} is still readable at {self.address}: not shredded")
        if probe is None:
            probe = self._synthetic_probe(subject_hash)
        # Decrypt the probe the way a reader would: fetch its data key, then open it.
        parsed = blob.parse(probe)
        try:
            material = self.unwrap(subject_hash, parsed.wrapped)
        except KeyNotFoundError:
            return ShredProof()
        except DecryptionError:
            # Refused for another reason than the key being gone: that proves nothing.
            raise ShredError(
                f"the decrypt proof for {key_id} at {self.address} was inconclusive: "
                "the backend rejected the probe while still holding a key"
            ) from None
        try:
            blob.open_blob(AESGCM(material), parsed, subject_hash, _PROBE_DATASET)
        except DecryptionError:
            raise ShredError(
                f"a key named {key_id} exists again at {self.address} (re-created after the "
                "shred?): the shred cannot be proven"
            ) from None
        raise ShredError(f"a record under {key_id} still decrypts at {self.address}: not shredded")

    def _synthetic_probe(self, subject_hash: str) -> bytes:
        """A well-formed blob for a key that is already gone (nothing real to decrypt)."""
        return blob.seal(
            AESGCM(secrets.token_bytes(blob.KEY_BYTES)),
            self._placeholder_wrapped(),
            subject_hash,
            _PROBE_DATASET,
            b"probe",
        )

    def _placeholder_wrapped(self) -> bytes:
        return b""

    @abstractmethod
    def _destroy(self, subject_hash: str) -> None: ...

    @abstractmethod
    def exists(self, subject_hash: str) -> bool: ...

    @abstractmethod
    def key_id(self, subject_hash: str) -> str: ...

    @abstractmethod
    def get(self, subject_hash: str) -> DataKey: ...

    @abstractmethod
    def unwrap(self, subject_hash: str, wrapped: bytes) -> bytes: ...


# ---------------------------------------------------------------------------------------------
# kv


class KvKeyStore(_VaultKeyStore):
    """Random 256-bit data keys in KV v2 at `<mount>/subjects/<subject_hash>`."""

    kind: ClassVar[str] = "kv"

    def __init__(self, config: KvKeyStoreConfig, client: hvac.Client) -> None:
        super().__init__(client, config.mount, config.snapshot_retention_days)
        self._kv = client.secrets.kv.v2

    def _path(self, subject_hash: str) -> str:
        return f"subjects/{check_subject_hash(subject_hash)}"

    def key_id(self, subject_hash: str) -> str:
        return f"kv:{self._mount}/{self._path(subject_hash)}"

    def ensure_mount(self) -> None:
        ensure_kv_v2(self._client, self._mount)

    def create(self, subject_hash: str, dataset: str | None = None) -> KeyInfo:
        path = self._path(subject_hash)
        key_id = self.key_id(subject_hash)
        material = base64.b64encode(secrets.token_bytes(blob.KEY_BYTES)).decode()
        with vault_errors(self.address, f"create key {key_id}"):
            try:
                # cas=0: write only if no version exists, so concurrent creators agree on one key
                self._kv.create_or_update_secret(
                    path=path, secret={"key": material}, cas=0, mount_point=self._mount
                )
                created = True
            except hvac.exceptions.InvalidRequest as exc:
                if "check-and-set" not in "; ".join(exc.errors or []):
                    raise
                created = False
        if not created:
            self.get(subject_hash)  # it exists: make sure it is readable, not soft-deleted
        return KeyInfo(key_id=key_id, kind=self.kind, created=created, dataset=dataset)

    def get(self, subject_hash: str) -> DataKey:
        path = self._path(subject_hash)
        key_id = self.key_id(subject_hash)
        with vault_errors(self.address, f"read key {key_id}"):
            try:
                response = self._kv.read_secret_version(
                    path=path, mount_point=self._mount, raise_on_deleted_version=True
                )
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                raise KeyNotFoundError(
                    f"no key {key_id} at {self.address}: never created, shredded, or "
                    "soft-deleted (a soft-deleted key must be shredded, not reused)"
                ) from None
        try:
            material = base64.b64decode(response["data"]["data"]["key"], validate=True)
        except (KeyError, TypeError, ValueError):
            raise VaultError(f"the key {key_id} at {self.address} is malformed") from None
        if len(material) != blob.KEY_BYTES:
            raise VaultError(f"the key {key_id} at {self.address} is not 256 bits")
        return DataKey(material=material, wrapped=b"")

    def unwrap(self, subject_hash: str, wrapped: bytes) -> bytes:
        if wrapped:
            raise DecryptionError("the record carries a wrapped data key: it was not written by kv")
        return self.get(subject_hash).material

    def exists(self, subject_hash: str) -> bool:
        """True if any trace of the key remains: a version or just its metadata."""
        path = self._path(subject_hash)
        with vault_errors(self.address, f"read metadata of {self.key_id(subject_hash)}"):
            try:
                self._kv.read_secret_metadata(path=path, mount_point=self._mount)
                return True
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return False

    def _destroy(self, subject_hash: str) -> None:
        key_id = self.key_id(subject_hash)
        try:
            with vault_errors(self.address, f"destroy key {key_id}"):
                self._kv.delete_metadata_and_all_versions(
                    path=self._path(subject_hash), mount_point=self._mount
                )
        except VaultError as exc:
            raise ShredError(str(exc)) from exc

    def list_key_names(self) -> list[str]:
        with vault_errors(self.address, f"list keys under {self._mount}/subjects"):
            try:
                response = self._kv.list_secrets(path="subjects", mount_point=self._mount)
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return []
        return sorted(f"subjects/{name}" for name in response["data"]["keys"])


# ---------------------------------------------------------------------------------------------
# transit


class TransitKeyStore(_VaultKeyStore):
    """One non-exportable transit key per subject, `subject-<hash>`; it wraps data keys in Vault."""

    kind: ClassVar[str] = "transit"

    def __init__(self, config: TransitKeyStoreConfig, client: hvac.Client) -> None:
        super().__init__(client, config.mount, config.snapshot_retention_days)
        self._transit = client.secrets.transit

    def _name(self, subject_hash: str) -> str:
        return f"subject-{check_subject_hash(subject_hash)}"

    def key_id(self, subject_hash: str) -> str:
        return f"transit:{self._mount}/keys/{self._name(subject_hash)}"

    def ensure_mount(self) -> None:
        ensure_transit(self._client, self._mount)

    def create(self, subject_hash: str, dataset: str | None = None) -> KeyInfo:
        name = self._name(subject_hash)
        key_id = self.key_id(subject_hash)
        existing = self._read(subject_hash)
        if existing is None:
            with vault_errors(self.address, f"create key {key_id}"):
                # Transit key creation is an upsert: a concurrent creator leaves one key.
                self._transit.create_key(
                    name=name,
                    key_type="aes256-gcm96",
                    exportable=False,
                    allow_plaintext_backup=False,
                    mount_point=self._mount,
                )
        elif existing.get("exportable") or existing.get("allow_plaintext_backup"):
            # An exportable key may have copies outside Vault: shredding it would prove nothing.
            raise VaultError(
                f"the key {key_id} at {self.address} is exportable or allows plaintext backup: "
                "its destruction could not be proven; investigate before using it"
            )
        return KeyInfo(key_id=key_id, kind=self.kind, created=existing is None, dataset=dataset)

    def get(self, subject_hash: str) -> DataKey:
        key_id = self.key_id(subject_hash)
        with vault_errors(self.address, f"generate a data key under {key_id}"):
            try:
                response = self._transit.generate_data_key(
                    name=self._name(subject_hash), key_type="plaintext", mount_point=self._mount
                )
            except hvac.exceptions.VaultError as exc:
                if not is_not_found(exc, *TRANSIT_KEY_GONE):
                    raise
                raise KeyNotFoundError(
                    f"no key {key_id} at {self.address}: never created or shredded"
                ) from None
        data = response["data"]
        return DataKey(
            material=base64.b64decode(data["plaintext"]), wrapped=str(data["ciphertext"]).encode()
        )

    def unwrap(self, subject_hash: str, wrapped: bytes) -> bytes:
        key_id = self.key_id(subject_hash)
        if not wrapped.startswith(b"vault:v"):
            raise DecryptionError("the record carries no transit-wrapped data key")
        with vault_errors(self.address, f"unwrap a data key under {key_id}"):
            try:
                response = self._transit.decrypt_data(
                    name=self._name(subject_hash),
                    ciphertext=wrapped.decode("ascii", errors="replace"),
                    mount_point=self._mount,
                )
            except hvac.exceptions.VaultError as exc:
                if is_not_found(exc, *TRANSIT_KEY_GONE):
                    raise KeyNotFoundError(
                        f"no key {key_id} at {self.address}: never created or shredded"
                    ) from None
                if isinstance(exc, hvac.exceptions.InvalidRequest):
                    raise DecryptionError(
                        f"{key_id} refused the record's wrapped data key: it was written under "
                        "another key or altered"
                    ) from None
                raise
        return base64.b64decode(response["data"]["plaintext"])

    def _placeholder_wrapped(self) -> bytes:
        # Shaped like a transit ciphertext (version prefix, nonce + key + tag) so the decrypt
        # attempt reaches the key lookup rather than failing on syntax.
        body = base64.b64encode(secrets.token_bytes(blob.NONCE_BYTES + 32 + blob.TAG_BYTES))
        return b"vault:v1:" + body

    def _read(self, subject_hash: str) -> dict[str, Any] | None:
        return read_transit_key(self._client, self._mount, self._name(subject_hash))

    def exists(self, subject_hash: str) -> bool:
        return self._read(subject_hash) is not None

    def _destroy(self, subject_hash: str) -> None:
        name = self._name(subject_hash)
        key_id = self.key_id(subject_hash)
        try:
            with vault_errors(self.address, f"destroy key {key_id}"):
                # Two calls: if Vault dies between them the key is deletable but still there,
                # and a retried shred finishes the job.
                try:
                    self._transit.update_key_configuration(
                        name=name, deletion_allowed=True, mount_point=self._mount
                    )
                    self._transit.delete_key(name=name, mount_point=self._mount)
                except hvac.exceptions.VaultError as exc:
                    if not is_not_found(exc, *TRANSIT_KEY_GONE):
                        raise  # a key deleted meanwhile by a concurrent shred is fine
        except VaultError as exc:
            raise ShredError(str(exc)) from exc

    def list_key_names(self) -> list[str]:
        with vault_errors(self.address, f"list keys under {self._mount}"):
            try:
                response = self._transit.list_keys(mount_point=self._mount)
            except hvac.exceptions.InvalidPath as exc:
                if not is_not_found(exc):
                    raise
                return []
        return sorted(str(k) for k in response["data"]["keys"] if str(k).startswith("subject-"))


# ---------------------------------------------------------------------------------------------
# The factory


def keystore_from_config(
    config: KeyStoreConfig | Mapping[str, Any], client: hvac.Client
) -> SubjectKeyStore:
    """The key store `config` describes (a model or a mapping with `kind`), over `client`."""
    if not isinstance(config, KeyStoreConfig):
        config = KEYSTORES.parse(config)
    store = KEYSTORES.build(config, client)
    if not isinstance(store, SubjectKeyStore):
        raise ConfigError(
            f"the {config.kind!r} key store kind built no SubjectKeyStore; fix or uninstall "
            "the package that provides it"
        )
    return store


def keystore_config_from_settings(settings: Settings) -> KeyStoreConfig:
    """The key store config the `ERASURE_*` settings select (`ERASURE_KEYSTORE_KIND`)."""
    return KEYSTORES.config_class(settings.keystore_kind).from_settings(settings)


def keystore_from_settings(settings: Settings, client: hvac.Client) -> SubjectKeyStore:
    """The configured key store over `client` (see `erasure.keys.vault.connect`)."""
    return keystore_from_config(keystore_config_from_settings(settings), client)
