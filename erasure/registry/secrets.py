"""The parked secret: what only a request's own key opens.

The raw identifier, the DPO's notes, and what locate expanded them to (identities,
reference keys, the personal data on the subject's rows that free text must not carry) are
sealed under a request-scoped key named `HMAC(pepper_v, "request:" ||
request_ref)` (`request_key_hash`), so neither the identifier nor the ref reaches a Vault
path. A retried step unparks them; completion destroys the key, and with it the only copy.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from sqlalchemy.engine import Connection

from erasure.errors import RequestError
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import ShredResult
from erasure.keys.pepper import PepperSource
from erasure.model import Identity
from erasure.pseudonym import Pepper, subject_hash
from erasure.registry.requests import RegisteredRequest, now, require, touch
from erasure.store import Store, store_errors
from erasure.store.schema import request_secrets, requests

log = logging.getLogger(__name__)

# The identifier type the request-scoped key is hashed under: no catalog type may use it.
REQUEST_KEY_TYPE = "request"
_SECRET_FORMAT = 1


class ParkedSecret(BaseModel):
    """What only the request key opens: the identifier, the notes, and what locate expanded
    them to (identities, reference keys), so a retry can rebuild its predicates after the rows
    that led to them are gone. Never log it: its repr is redacted."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    identifier: SecretStr
    notes: SecretStr | None = None
    identities: list[Identity] = Field(default_factory=list)  # (type, normalised value)
    reference_keys: dict[str, list[str]] = Field(default_factory=dict)  # dataset -> key values
    # The personal data on their rows free text must not carry (erasure.locate.PersonalData).
    terms: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)

    @field_validator("identities", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [
                {"type": v[0], "value": v[1]} if isinstance(v, list | tuple) and len(v) == 2 else v
                for v in value
            ]
        return value

    def __repr__(self) -> str:
        return (
            f"ParkedSecret(identifier=<redacted>, notes={'<redacted>' if self.notes else None}, "
            f"identities={len(self.identities)}, reference_keys={sorted(self.reference_keys)}, "
            f"terms={len(self.terms)}, names={len(self.names)})"
        )

    __str__ = __repr__

    def to_bytes(self) -> bytes:
        """The format-versioned JSON document sealed under the request key."""
        document = {
            "format": _SECRET_FORMAT,
            "identifier": self.identifier.get_secret_value(),
            "notes": self.notes.get_secret_value() if self.notes is not None else None,
            "identities": sorted([i.type, i.value] for i in self.identities),
            "reference_keys": {k: sorted(v) for k, v in sorted(self.reference_keys.items())},
            "terms": sorted(self.terms),
            "names": sorted(self.names),
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ParkedSecret:
        """Read a decrypted parked secret; RequestError if it is not one this code can read."""
        try:
            document = json.loads(data)
            if document.pop("format", None) != _SECRET_FORMAT:
                raise ValueError("unknown format")
            return cls.model_validate(document)
        except (ValueError, TypeError, ValidationError):
            raise RequestError(
                "the parked secret decrypted but is not a parked request this code can read"
            ) from None


def request_key_hash(pepper: Pepper, request_ref: str) -> str:
    """The request-scoped key's name: HMAC of `request:<ref>`, so no ref text reaches Vault."""
    return subject_hash(pepper, REQUEST_KEY_TYPE, request_ref)


def _secret_dataset(request_ref: str) -> str:
    """The AAD label: a parked blob opens only as the secret of its own request."""
    return f"erasure:request-secret:{request_ref}"


class ParkedSecrets:
    """Park, unpark, re-seal and destroy requests' secrets (the `request_secrets` table)."""

    def __init__(self, store: Store, cipher: EnvelopeCipher, peppers: PepperSource) -> None:
        self._store = store
        self._engine = store.engine
        self._cipher = cipher
        self._peppers = peppers
        self._pepper_cache: dict[int, Pepper] = {}

    def key_hash(self, request_ref: str, pepper_version: int) -> str:
        return request_key_hash(self.pepper(pepper_version), request_ref)

    def park(self, conn: Connection, request_ref: str, key_hash: str, parked: ParkedSecret) -> None:
        """Store the sealed secret of a new request, inside the caller's transaction."""
        blob = self._seal(key_hash, request_ref, parked)
        conn.execute(request_secrets.insert().values(request_ref=request_ref, blob=blob))

    def unpark(self, request_ref: str) -> ParkedSecret:
        """The parked identifier, notes and expansion; RequestError once destroyed."""
        with self._db("read the parked secret"), self._engine.connect() as conn:
            record = require(conn, request_ref)
            _check_not_destroyed(record, "unpark its secret")
            blob = conn.execute(
                sa.select(request_secrets.c.blob).where(
                    request_secrets.c.request_ref == request_ref
                )
            ).scalar_one_or_none()
        if blob is None:
            raise RequestError(
                f"request {request_ref!r} has no parked secret although it was never destroyed: "
                "the store was altered; re-submit the request under a new request_ref"
            )
        key_hash = self.key_hash(request_ref, record.pepper_version)
        try:
            plaintext = self._cipher.decrypt(key_hash, _secret_dataset(request_ref), bytes(blob))
        finally:
            self._cipher.evict(key_hash)
        return ParkedSecret.from_bytes(plaintext)

    def update(self, request_ref: str, parked: ParkedSecret) -> None:
        """Re-seal the parked secret (e.g. with the identities found at plan time)."""
        with self._db("read the request"), self._engine.connect() as conn:
            record = require(conn, request_ref)
        _check_not_destroyed(record, "update its parked secret")
        blob = self._seal(self.key_hash(request_ref, record.pepper_version), request_ref, parked)
        with self._db("update the parked secret"), self._engine.begin() as conn:
            updated = conn.execute(
                request_secrets.update()
                .where(request_secrets.c.request_ref == request_ref)
                .values(blob=blob)
            ).rowcount
            if updated != 1:
                raise RequestError(
                    f"request {request_ref!r} has no parked secret to update (destroyed meanwhile?)"
                )
            touch(conn, request_ref)

    def destroy(self, request_ref: str) -> ShredResult:
        """Shred the request key and drop the sealed blob: the raw identifier is gone for good.

        Idempotent: a second call proves the key is still gone and changes nothing else.
        """
        with self._db("read the request"), self._engine.connect() as conn:
            record = require(conn, request_ref)
        result = self._cipher.shred(self.key_hash(request_ref, record.pepper_version))
        with self._db("record the destroyed secret"), self._engine.begin() as conn:
            conn.execute(
                request_secrets.delete().where(request_secrets.c.request_ref == request_ref)
            )
            conn.execute(
                requests.update()
                .where(
                    requests.c.request_ref == request_ref,
                    requests.c.secrets_destroyed_at.is_(None),
                )
                .values(secrets_destroyed_at=result.shredded_at, updated_at=now())
            )
        log.info(
            "destroyed the parked secret of request %s (key %s, already absent: %s)",
            request_ref,
            result.key_id,
            result.already_absent,
        )
        return result

    def create_key(self, key_hash: str) -> None:
        """Create a new request's key (before its secret is parked under it)."""
        self._cipher.keystore.create(key_hash)

    def shred_key(self, key_hash: str) -> ShredResult:
        """Destroy a request key nobody uses (a registration that lost a race)."""
        return self._cipher.shred(key_hash)

    def pepper(self, version: int) -> Pepper:
        """The pepper `version`, fetched once per process."""
        if version not in self._pepper_cache:
            current = self._peppers.current()
            self._pepper_cache[current.version] = current
            if version not in self._pepper_cache:
                for pepper in self._peppers.all_versions():
                    self._pepper_cache[pepper.version] = pepper
        try:
            return self._pepper_cache[version]
        except KeyError:
            raise RequestError(
                f"pepper version {version} is not available from Vault: restore it (a pepper "
                "is never deleted; tombstones and request keys depend on it)"
            ) from None

    def current_pepper(self) -> Pepper:
        pepper = self._peppers.current()
        self._pepper_cache[pepper.version] = pepper
        return pepper

    def _seal(self, key_hash: str, request_ref: str, parked: ParkedSecret) -> bytes:
        # Request keys are used a handful of times: never left in the cipher's cache, so a
        # key shredded by another process is gone here at once.
        try:
            return self._cipher.encrypt(key_hash, _secret_dataset(request_ref), parked.to_bytes())
        finally:
            self._cipher.evict(key_hash)

    def _db(self, verb: str) -> Any:
        return store_errors(self._store, verb)


def _check_not_destroyed(record: RegisteredRequest, verb: str) -> None:
    if record.secrets_destroyed_at is not None:
        raise RequestError(
            f"request {record.request_ref!r}: cannot {verb}, its secret was destroyed at "
            f"{record.secrets_destroyed_at.isoformat()} and the system no longer holds the "
            "identifier (by design, after completion)"
        )
