"""A realistic customer erasure for the audit tests, a Vault-shaped signer in memory, and four
requests' lives (completed after a failure, failed, a dry run, in progress) in one store."""

from __future__ import annotations

import base64
import copy
from datetime import UTC, date, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from erasure.audit.anchor import AnchorError, AnchorHistory, ChainAnchor
from erasure.audit.records import RecordKind, RecordLedger, RecordStatus
from erasure.catalog import Catalog
from erasure.errors import VaultError
from erasure.pseudonym import Pepper, normalise, subject_hash
from erasure.registry.requests import RequestStatus
from erasure.store import Store
from tests.unit.registry.support import CATALOG, MemoryKeyStore, Peppers, request
from tests.unit.registry_support import books_for, register

# The raw identifier of the test subject: it must never appear in a record or a pack.
CANARY = "Jane.Canary-7f3a@Example.org"
PEPPER = Pepper(version=1, secret=b"\x5a" * 32)
SUBJECT = subject_hash(PEPPER, "email", normalise("email", CANARY))
OTHER_SUBJECT = subject_hash(PEPPER, "email", normalise("email", "someone.else@example.org"))

RECEIVED = datetime(2026, 11, 2, 9, 14, 5, tzinfo=UTC)
COMPLETED = datetime(2026, 11, 29, 16, 40, 12, 345678, tzinfo=UTC)
SNAPSHOT_EXPIRY = date(2026, 12, 29)  # the last Vault snapshot holding the shredded key
REBUILD_BY = date(2027, 1, 15)  # the DPO's retrain deadline for the churn features
TAPE_RETENTION = date(2027, 2, 27)  # the WORM tape copy expires


class LocalSigner:
    """Ed25519 keys in memory, answering like Vault transit (`vault:v<n>:<base64>`)."""

    def __init__(self) -> None:
        self._keys = {1: Ed25519PrivateKey.generate()}
        self.signed = 0

    def rotate(self) -> int:
        version = max(self._keys) + 1
        self._keys[version] = Ed25519PrivateKey.generate()
        return version

    def latest_version(self) -> int:
        return max(self._keys)

    def sign(self, payload: bytes, key_version: int | None = None) -> tuple[str, int]:
        version = key_version or self.latest_version()
        self.signed += 1
        raw = self._keys[version].sign(payload)
        return f"vault:v{version}:{base64.b64encode(raw).decode()}", version

    def public_keys(self) -> dict[int, str]:
        return {
            v: base64.b64encode(
                k.public_key().public_bytes(
                    serialization.Encoding.Raw, serialization.PublicFormat.Raw
                )
            ).decode()
            for v, k in self._keys.items()
        }


class MemoryAnchorBoard:
    """Published heads in memory, one per seq, answering like `VaultAnchorBoard`; `force`
    and `remove` do what no component's policy allows, to show verify notices."""

    location = "memory/anchors/chain-head"

    def __init__(self) -> None:
        self.heads: dict[int, list[ChainAnchor | None]] = {}  # seq -> every write of it
        self.failing = False

    def publish(self, anchor: ChainAnchor) -> bool:
        if self.failing:
            raise VaultError("Vault at memory is unreachable while trying to publish the head")
        written = self.heads.get(anchor.seq)
        if written:
            if written[-1] is not None and written[-1].record_hash == anchor.record_hash:
                return False
            raise AnchorError(
                f"seq {anchor.seq} was published at {self.location} as another record"
            )
        self.heads[anchor.seq] = [anchor]
        return True

    def force(self, anchor: ChainAnchor) -> None:
        """Write a head whatever is there (Vault's root: no shipped policy allows it)."""
        self.heads.setdefault(anchor.seq, []).append(anchor)

    def remove(self, seq: int) -> None:
        self.heads[seq].append(None)

    def history(self) -> AnchorHistory:
        anchors, missing = [], []
        for seq in sorted(self.heads):
            writes = self.heads[seq]
            if writes[-1] is None:
                missing.append(f"the head published for seq {seq} was destroyed")
                continue
            anchors.append(writes[-1].model_copy(update={"version": len(writes)}))
            if len(writes) > 1:
                missing.append(
                    f"the head published for seq {seq} was written {len(writes)} times "
                    "(a published head is written once)"
                )
        return AnchorHistory(location=self.location, anchors=anchors, missing=missing)


def received_body(ref: str = "REQ-2026-0042") -> dict[str, Any]:
    return {
        "identifier_type": "email",
        "pepper_version": PEPPER.version,
        "legal_ground": "art17_1_b",
        "received": RECEIVED.isoformat(),
        "due": (RECEIVED + timedelta(days=30)).date().isoformat(),
        "run_id": f"erasure-{ref}",
    }


def escalated_body() -> dict[str, Any]:
    return {
        "dataset": "ml.churn_features",
        "rule": "7",
        "kind": "feature_store",
        "reason": "feature-store statistics cannot be erased row by row",
        "hitl_task": "gdpr_erasure.escalate[ml.churn_features]",
    }


def decided_body() -> dict[str, Any]:
    return {"ruling": copy.deepcopy(_RETRAIN_RULING)}


_RETRAIN_RULING: dict[str, Any] = {
    "dataset": "ml.churn_features",
    "author": "M. Okafor (DPO)",
    "decided_at": "2026-11-20T11:02:00+00:00",
    "option": "rebuild_by_date",
    "rebuild_by_date": REBUILD_BY.isoformat(),
    "justification": "Retrain on the January cycle; features recompute from cleaned sources.",
}
_TAPE_RULING: dict[str, Any] = {
    "dataset": "archive.crm_tape",
    "author": "M. Okafor (DPO)",
    "decided_at": "2026-11-21T08:30:00+00:00",
    "option": "retain_exemption",
    "exemption": "e",
    "justification": "WORM tape held for pending litigation; beyond use until it expires.",
}


def completion_body(*, with_tape: bool = False) -> dict[str, Any]:
    """A completed erasure of one customer across the demo-like estate."""
    artefacts: list[dict[str, Any]] = [
        {
            "dataset": "crm.customers",
            "namespace": "warehouse",
            "kind": "table",
            "action": "erase_rows",
            "rule": "2",
            "reason": "root: holds the subject and is mutable",
            "evidence": {
                "rows_before": 1,
                "rows_deleted": 1,
                "rows_after": 0,
                "statement": "DELETE FROM crm.customers WHERE email = :v0 OR alt_email = :v1",
            },
            "upstreams": [],
        },
        {
            "dataset": "crm.orders",
            "namespace": "warehouse",
            "kind": "table",
            "action": "erase_rows",
            "rule": "2",
            "reason": "root via identity:customer_id",
            "evidence": {"rows_before": 14, "rows_deleted": 14, "rows_after": 0},
            "upstreams": [],
        },
        {
            "dataset": "marts.orders_daily",
            "namespace": "warehouse",
            "kind": "table",
            "action": "rebuild",
            "rule": "5",
            "reason": "rebuildable from source",
            "evidence": {
                "method": "dag",
                "dag_id": "build_marts",
                "run_id": "manual__2026-11-29T16:21:03+00:00",
                "rows_after": 0,
            },
            "upstreams": ["crm.orders"],
        },
        {
            "dataset": "reports.monthly_revenue",
            "namespace": "warehouse",
            "kind": "report",
            "action": "rebuild",
            "rule": "5",
            "reason": "rebuildable from source",
            "evidence": {
                "method": "dag",
                "dag_id": "build_reports",
                "run_id": "manual__2026-11-29T16:29:47+00:00",
                "upstreams_rebuilt_first": ["marts.orders_daily"],
            },
            "upstreams": ["marts.orders_daily"],
        },
        {
            "dataset": "agg.customers_by_region_month",
            "namespace": "warehouse",
            "kind": "table",
            "action": "aggregate_ok",
            "rule": "6",
            "reason": "every group has at least k members",
            "evidence": {
                "k": 10,
                "min_group_size": 23,
                "groups": 48,
                "groups_below_k": 0,
                "quasi_identifiers": ["region", "month"],
                "table_version": "2026-11-29T16:05:00Z",
                "query": "SELECT MIN(n_customers), COUNT(*) FROM agg.customers_by_region_month",
            },
            "upstreams": ["crm.customers"],
        },
        {
            "dataset": "backup.crm_nightly",
            "namespace": "warehouse",
            "kind": "backup",
            "action": "crypto_shred",
            "rule": "3",
            "reason": "immutable, written under per-subject keys",
            "evidence": {
                "key_id": f"transit:erasure-transit/keys/subject-{SUBJECT}",
                "shredded_at": "2026-11-29T16:33:10+00:00",
                "proof": {"read": "404", "decrypt": "failed"},
                "snapshot_expiry_date": SNAPSHOT_EXPIRY.isoformat(),
            },
            "upstreams": ["crm.customers"],
        },
        {
            "dataset": "ml.churn_features",
            "namespace": "warehouse",
            "kind": "feature_store",
            "action": "escalate",
            "rule": "7",
            "reason": "feature-store statistics",
            "evidence": {"why": "derived statistics; no row to delete"},
            "upstreams": ["crm.customers", "marts.orders_daily"],
        },
    ]
    rulings = [copy.deepcopy(_RETRAIN_RULING)]
    if with_tape:
        artefacts.append(
            {
                "dataset": "archive.crm_tape",
                "namespace": "archive",
                "kind": "backup",
                "action": "escalate",
                "rule": "4",
                "reason": f"immutable, not per-subject encrypted: beyond use until "
                f"{TAPE_RETENTION}",
                "evidence": {"retention_expiry_date": TAPE_RETENTION.isoformat()},
                "upstreams": ["crm.customers"],
            }
        )
        rulings.append(copy.deepcopy(_TAPE_RULING))
    return {
        "subject": {"type": "email", "pepper_version": PEPPER.version},
        "artefacts": artefacts,
        "rulings": rulings,
        "tombstone": {"pepper_version": PEPPER.version, "inserted": True},
        "lineage": {
            "snapshot_id": "sha256:3b9c0e5d1f2a47c8a0d6e4b2f1c9a7d5"
            "e3b1f0c8a6d4e2b0f9c7a5d3e1b0f8c6",
            "coverage": 0.94,
            "gaps": [
                {
                    "kind": "opaque_producer",
                    "detail": "python job churn_features reports no column lineage",
                    "dataset": "ml.churn_features",
                }
            ],
        },
        "verification": {
            "passed": True,
            "checked_at": "2026-11-29T16:39:58+00:00",
            "checks": [
                {"target": "crm.customers", "check": "recount", "result": "0 rows", "passed": True},
                {"target": "crm.orders", "check": "recount", "result": "0 rows", "passed": True},
                {
                    "target": "marts.orders_daily",
                    "check": "recount",
                    "result": "0 rows",
                    "passed": True,
                },
                {
                    "target": "backup.crm_nightly",
                    "check": "key gone",
                    "result": "read 404; decrypt failed",
                    "passed": True,
                },
                {
                    "target": "suppression_list",
                    "check": "tombstone",
                    "result": "present (pepper v1)",
                    "passed": True,
                },
                {
                    "target": "lineage",
                    "check": "re-plan",
                    "result": "no new artefacts",
                    "passed": True,
                },
            ],
        },
        "timestamps": {
            "received": RECEIVED.isoformat(),
            "due": (RECEIVED + timedelta(days=30)).isoformat(),
            "completed": COMPLETED.isoformat(),
        },
    }


def record_request(ledger: Any, ref: str, *, with_tape: bool = False) -> None:
    """The four records of one request's life: received, escalated, decided, completed."""
    ledger.append(ref, SUBJECT, "received", received_body(ref))
    ledger.append(ref, SUBJECT, "escalated", escalated_body())
    ledger.append(ref, SUBJECT, "decided", decided_body())
    ledger.append(
        ref,
        SUBJECT,
        "completed",
        completion_body(with_tape=with_tape),
        status="complete_with_exemptions" if with_tape else "complete",
    )


# Four requests' lives, as the workflow leaves them in the registry and on record.
RESUMED = "REQ-2026-0100"  # failed, resumed as the runbook says, completed with exemptions
STUCK = "REQ-2026-0101"  # failed, not resumed
DRY = "REQ-2026-0102"  # a dry run, ended with its plan
OPEN = "REQ-2026-0103"  # planned, waiting for the DPO
STOPPED = f"run erasure-{RESUMED}: task erase_rows failed"
DELETED = f"run erasure-{STUCK} is gone from Airflow (deleted)"


def record_lifecycles(store: Store, ledger: RecordLedger) -> None:
    """Register the four requests and write their records as `workflow` does: `received` at
    registration, `failed` once the request moved to failed, `completed` from verifying."""
    books = books_for(store, MemoryKeyStore(), Peppers())
    catalog = Catalog.model_validate(CATALOG)

    def start(ref: str, **fields: Any) -> str:
        registration = register(
            books, request(ref, f"{ref.lower()}@example.org", **fields), catalog=catalog,
            run_id=f"erasure-{ref}",
        )  # fmt: skip
        ledger.append(ref, registration.subject_hash, RecordKind.RECEIVED, received_body(ref))
        return registration.subject_hash

    def fail(ref: str, subject: str, reason: str) -> None:
        assert books.requests.move(ref, RequestStatus.FAILED)
        ledger.append(ref, subject, RecordKind.FAILED, {"reason": reason}, RecordStatus.FAILED)

    subject = start(RESUMED)
    books.requests.set_status(RESUMED, RequestStatus.PLANNED)
    fail(RESUMED, subject, STOPPED)
    books.requests.set_status(RESUMED, RequestStatus.ACTING)  # the failed task cleared
    books.requests.set_status(RESUMED, RequestStatus.VERIFYING)
    ledger.append(
        RESUMED, subject, RecordKind.COMPLETED, completion_body(with_tape=True),
        RecordStatus.COMPLETE_WITH_EXEMPTIONS,
    )  # fmt: skip
    books.requests.set_status(RESUMED, RequestStatus.COMPLETE_WITH_EXEMPTIONS)
    fail(STUCK, start(STUCK), DELETED)
    start(DRY, dry_run="true")
    books.requests.set_status(DRY, RequestStatus.PLANNED)  # where a dry run ends
    subject = start(OPEN)
    books.requests.set_status(OPEN, RequestStatus.PLANNED)
    books.requests.set_status(OPEN, RequestStatus.AWAITING_DPO)
    ledger.append(OPEN, subject, RecordKind.ESCALATED, escalated_body())
