"""The registry unit tests' stand-ins and builders: an in-memory key store, a pepper source
that can rotate, a request, a plan, and a dump of every value in the store.

The books themselves, wired over a store as Services wires them, are `tests.unit.registry_support`
(shared with the integration tests, which run the same paths against a real OpenBao).
"""

from __future__ import annotations

import secrets
from datetime import UTC, date, datetime
from typing import Any, ClassVar

import sqlalchemy as sa

from erasure.errors import KeyNotFoundError
from erasure.keys.keystore import DataKey, KeyInfo, ShredProof, ShredResult
from erasure.model import Plan, SubjectSummary
from erasure.pseudonym import Pepper
from erasure.store import Store
from erasure.submission import ErasureRequest

CANARY = "  Zed.Canary+Registry@Example.COM "


CANARY_NORMALISED = "zed.canary+registry@example.com"


CATALOG: dict[str, Any] = {
    "version": 1,
    "sla_days": 30,
    "identifiers": {"email": {"normalise": "email"}, "customer_id": {"normalise": "strip"}},
    "datasets": [],
}


class MemoryKeyStore:
    """A SubjectKeyStore in a dict: the registry's logic without a Vault server."""

    kind: ClassVar[str] = "memory"

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    @property
    def address(self) -> str:
        return "memory://"

    def ensure_mount(self) -> None:
        return None

    def create(self, subject_hash: str, dataset: str | None = None) -> KeyInfo:
        created = subject_hash not in self.keys
        self.keys.setdefault(subject_hash, secrets.token_bytes(32))
        return KeyInfo(key_id=self.key_id(subject_hash), kind=self.kind, created=created)

    def get(self, subject_hash: str) -> DataKey:
        if subject_hash not in self.keys:
            raise KeyNotFoundError(f"no key {self.key_id(subject_hash)}")
        return DataKey(material=self.keys[subject_hash], wrapped=b"")

    def unwrap(self, subject_hash: str, wrapped: bytes) -> bytes:
        return self.get(subject_hash).material

    def shred(self, subject_hash: str) -> ShredResult:
        absent = self.keys.pop(subject_hash, None) is None
        return ShredResult(
            key_id=self.key_id(subject_hash),
            kind=self.kind,
            shredded_at=datetime.now(UTC),
            already_absent=absent,
            proof=ShredProof(),
            snapshot_expiry_date=date.today(),
        )

    def prove_shredded(self, subject_hash: str, probe: bytes | None = None) -> ShredProof:
        return ShredProof()

    def exists(self, subject_hash: str) -> bool:
        return subject_hash in self.keys

    def key_id(self, subject_hash: str) -> str:
        return f"memory:subjects/{subject_hash}"

    def list_key_names(self) -> list[str]:
        return sorted(f"subjects/{h}" for h in self.keys)


class Peppers:
    """A pepper source that can rotate."""

    def __init__(self) -> None:
        self.versions = [Pepper(version=1, secret=b"\x11" * 32)]

    def current(self) -> Pepper:
        return self.versions[-1]

    def all_versions(self) -> list[Pepper]:
        return list(self.versions)

    def rotate(self) -> Pepper:
        self.versions.append(Pepper(len(self.versions) + 1, secrets.token_bytes(32)))
        return self.versions[-1]


def request(ref: str = "REQ-1", identifier: str = CANARY, **fields: Any) -> ErasureRequest:
    values: dict[str, Any] = {
        "request_ref": ref,
        "identifier_type": "email",
        "identifier": identifier,
        "received_on": date(2026, 1, 10),
        "legal_ground": "art17_1_b",
        **fields,
    }
    return ErasureRequest.parse(values)


def plan_for(subject: str | None, snapshot: str = "snap-1") -> Plan:
    return Plan(
        subject=SubjectSummary(type="email", hash=subject, pepper_version=1),
        roots=[],
        items=[],
        coverage=1.0,
        gaps=[],
        cycles=[],
        lineage_snapshot=snapshot,
        created_at=datetime.now(UTC),
    )


def dump_store(store: Store) -> str:
    """Every value of every table of the store, as one text (blobs decoded byte for byte)."""
    out = []
    with store.engine.connect() as conn:
        for name in sa.inspect(store.engine).get_table_names():
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}"')):
                for value in row:
                    out.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
    return "\n".join(out)
