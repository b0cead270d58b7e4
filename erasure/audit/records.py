"""Completion records: an append-only, hash-chained, signed ledger in the erasure store.

Every record carries the hash of the one before it (canonical form: `erasure.audit.canonical`)
and an Ed25519 signature made in Vault (`erasure.audit.signing`); the database refuses UPDATE
and DELETE (triggers created by the `c8f2_records` migration), and a one-row chain head moves
forward only with the chain. `verify` walks it all (`erasure.audit.chain`).
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, time
from enum import StrEnum
from typing import Any, TypeVar

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import to_jsonable_python
from sqlalchemy.engine import Connection, RowMapping

from erasure.audit.anchor import AnchorBoard, AnchorHistory, anchor_of
from erasure.audit.canonical import (
    GENESIS_HASH,
    RECORD_FORMAT,
    canonical_json,
    hash_document,
    sha256_hex,
)
from erasure.audit.chain import Anchor, ChainProblem, ChainReport, ChainWalk
from erasure.audit.evidence import EvidenceError, effective_erasure_date, parse_completion
from erasure.audit.signing import RecordSigner, SignatureFormatError, load_public_key
from erasure.errors import ErasureError
from erasure.model import REQUEST_REF
from erasure.store.database import Store, store_errors
from erasure.store.schema import completion_chain_head, completion_records

__all__ = [
    "GENESIS_HASH",
    "RECORD_FORMAT",
    "ChainProblem",
    "ChainReport",
    "CompletionRecord",
    "RecordError",
    "RecordKind",
    "RecordLedger",
    "RecordStatus",
    "canonical_json",
    "effective_erasure_date",
    "hash_document",
]

HEAD_ID = 1

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_E = TypeVar("_E", bound=StrEnum)


class RecordError(ErasureError):
    """A completion record cannot be written or read as asked."""


# The reference asked for is not repeated: it may be an identifier typed in the wrong place.
NO_RECORDS = (
    "there are no completion records for a request with that reference: check the reference "
    "(`erasure audit list` lists them)"
)


class RecordKind(StrEnum):
    RECEIVED = "received"
    EXTENDED = "extended"
    ESCALATED = "escalated"
    DECIDED = "decided"
    COMPLETED = "completed"
    FAILED = "failed"
    # A restored backup's erased subjects deleted again (erasure.replay); no request's own.
    REPLAYED = "replayed"


class RecordStatus(StrEnum):
    COMPLETE = "complete"
    COMPLETE_WITH_EXEMPTIONS = "complete_with_exemptions"
    FAILED = "failed"


class CompletionRecord(BaseModel):
    """One signed link of the chain; no raw identifier in it, the subject only by keyed hash."""

    model_config = ConfigDict(frozen=True)

    seq: int = Field(ge=1)
    request_ref: str
    subject_hash: str
    kind: RecordKind
    status: RecordStatus | None = None
    created_at: datetime
    body: dict[str, Any]
    prev_hash: str
    record_hash: str
    signature: str
    signing_key_version: int

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("created_at must be timezone-aware")
        return value.astimezone(UTC)

    def hash_document(self) -> dict[str, Any]:
        """The object `record_hash` is computed over (see the module docstring)."""
        return hash_document(
            seq=self.seq,
            request_ref=self.request_ref,
            subject_hash=self.subject_hash,
            kind=str(self.kind),
            status=None if self.status is None else str(self.status),
            created_at=self.created_at,
            body=self.body,
            prev_hash=self.prev_hash,
            signing_key_version=self.signing_key_version,
        )

    def computed_hash(self) -> str:
        """SHA-256 of the canonical form, recomputed from the fields."""
        return sha256_hex(canonical_json(self.hash_document()))


def json_body(body: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    """`body` as plain JSON objects (dates and models serialised), as it will be stored."""
    raw = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    try:
        text = json.dumps(to_jsonable_python(raw), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RecordError(
            f"the record body is not JSON-serialisable ({type(exc).__name__}): give plain "
            "values, dates, or pydantic models; no NaN or infinity"
        ) from None
    value = json.loads(text)
    if not isinstance(value, dict):
        raise RecordError("the record body must be a JSON object")
    return value


# ---------------------------------------------------------------------------------------------
# The ledger


class RecordLedger:
    """The completion records of one erasure store; appends are serialised and signed."""

    def __init__(
        self,
        store: Store,
        signer: RecordSigner | None = None,
        anchors: AnchorBoard | None = None,
    ) -> None:
        self._store = store
        self._signer = signer
        self._anchors = anchors

    def append(
        self,
        request_ref: str,
        subject_hash: str,
        kind: RecordKind | str,
        body: Mapping[str, Any] | BaseModel,
        status: RecordStatus | str | None = None,
    ) -> CompletionRecord:
        """Sign and append one record at the head of the chain, then publish the head
        outside the store; returns it."""
        kind = _kind(kind)
        status = _status(kind, status)
        _check_ref(request_ref)
        if not _HEX64.match(subject_hash):
            raise RecordError(
                "subject_hash must be the 64-hex keyed hash (erasure.pseudonym.subject_hash), "
                f"got a value of length {len(subject_hash)}"
            )
        doc = json_body(body)
        if kind is RecordKind.COMPLETED:
            doc = _completion_body(doc, status)
        signer = self._require_signer("append a record")
        version = signer.latest_version()
        with self._chain() as conn:
            head = conn.execute(
                sa.select(completion_chain_head.c.seq, completion_chain_head.c.record_hash)
                .where(completion_chain_head.c.id == HEAD_ID)
                .with_for_update()
            ).one_or_none()
            if head is None:
                raise RecordError(
                    "the completion chain head is missing: the store is not migrated or was "
                    "tampered with; run `erasure audit verify`"
                )
            done = conn.execute(
                sa.select(completion_records.c.seq)
                .where(completion_records.c.request_ref == request_ref)
                .where(completion_records.c.kind == RecordKind.COMPLETED.value)
                .limit(1)
            ).scalar()
            if done is not None:
                raise RecordError(
                    f"request {request_ref} is already completed (record seq {done}): a "
                    "completed request takes no further records"
                )
            replayed = conn.execute(
                sa.select(completion_records.c.seq)
                .where(completion_records.c.request_ref == request_ref)
                .where(completion_records.c.kind == RecordKind.REPLAYED.value)
                .limit(1)
            ).scalar()
            if replayed is not None:  # one record per replay: two runs of one must not both sign
                raise RecordError(
                    f"restore replay {request_ref} is already on record (record seq "
                    f"{replayed}): a replay takes no further records"
                )
            fields: dict[str, Any] = {
                "seq": int(head.seq) + 1,
                "request_ref": request_ref,
                "subject_hash": subject_hash,
                "kind": kind.value,
                "status": None if status is None else status.value,
                "created_at": datetime.now(UTC),
                "body": doc,
                "prev_hash": str(head.record_hash),
                "signing_key_version": version,
            }
            record_hash = sha256_hex(canonical_json(hash_document(**fields)))
            signature, used = signer.sign(record_hash.encode("ascii"), key_version=version)
            if used != version:  # the version is inside the hash: it must be the one used
                raise RecordError(f"the signer used key version {used}, not {version}")
            record = CompletionRecord(**fields, record_hash=record_hash, signature=signature)
            conn.execute(
                completion_records.insert().values(
                    **{**fields, "body": canonical_json(doc).decode("utf-8")},
                    record_hash=record_hash,
                    signature=signature,
                )
            )
            conn.execute(
                completion_chain_head.update()
                .where(completion_chain_head.c.id == HEAD_ID)
                .values(seq=record.seq, record_hash=record_hash)
            )
        self._publish(record.seq, record.record_hash, record.signature, version)
        return record

    def anchor_head(self) -> bool:
        """Publish the current head outside the store if the board is behind it (after an
        append whose publishing failed); whether anything was published."""
        if self._anchors is None:
            raise RecordError(
                "no anchor board is configured: publishing the chain head needs Vault "
                "(ERASURE_VAULT_ADDR and the signer's credentials)"
            )
        seq, _ = self.head()
        if seq == 0:
            return False
        with self._store.engine.connect() as conn:
            row = (
                conn.execute(sa.select(completion_records).where(completion_records.c.seq == seq))
                .mappings()
                .one_or_none()
            )
        if row is None:
            raise RecordError(
                f"the chain head says seq {seq} but that record is not in the store: run "
                "`erasure audit verify`; nothing was published"
            )
        # Only a record this ledger's key signed, as stored, is published: a head published
        # cannot be taken back, and one forged into the store would stand above the truth.
        walk = ChainWalk(self._public_key_source(None).get)
        walk.record(row)  # its hash and signature (the link is the chain's, checked by verify)
        if any(
            p.problem in ("hash_mismatch", "bad_signature", "unknown_key") for p in walk.problems
        ):
            raise RecordError(
                f"the head record seq {seq} does not verify as signed by this ledger's key: "
                "run `erasure audit verify`; nothing was published"
            )
        return self._publish(
            seq, str(row["record_hash"]), str(row["signature"]), row["signing_key_version"]
        )

    def anchor_history(self) -> AnchorHistory | None:
        """Every head published outside the store, oldest first (None: no board configured)."""
        return None if self._anchors is None else self._anchors.history()

    def list(
        self,
        since: date | datetime | None = None,
        status: RecordStatus | str | None = None,
        request_ref: str | None = None,
        kind: RecordKind | str | None = None,
    ) -> builtins.list[CompletionRecord]:
        """Records in chain order, filtered by creation time, status, request and kind."""
        query = sa.select(completion_records).order_by(completion_records.c.seq)
        if since is not None:
            start = since if isinstance(since, datetime) else datetime.combine(since, time(), UTC)
            if start.tzinfo is None:
                start = start.replace(tzinfo=UTC)
            query = query.where(completion_records.c.created_at >= start)
        if status is not None:
            query = query.where(completion_records.c.status == _enum(RecordStatus, status).value)
        if request_ref is not None:
            query = query.where(completion_records.c.request_ref == request_ref)
        if kind is not None:
            query = query.where(completion_records.c.kind == _kind(kind).value)
        with self._store.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query).mappings()]

    def show(self, ref: str) -> builtins.list[CompletionRecord]:
        """Every record of request `ref`, in chain order ([] if there is none)."""
        return self.list(request_ref=ref)

    def head(self) -> tuple[int, str]:
        """The chain head: (seq, record_hash) of the newest record; (0, GENESIS_HASH) if none."""
        with self._store.engine.connect() as conn:
            row = conn.execute(
                sa.select(completion_chain_head.c.seq, completion_chain_head.c.record_hash).where(
                    completion_chain_head.c.id == HEAD_ID
                )
            ).one_or_none()
        if row is None:
            raise RecordError("the completion chain head is missing: run `erasure audit verify`")
        return int(row.seq), str(row.record_hash)

    def links(self, first: int, last: int) -> builtins.list[dict[str, Any]]:
        """The hash links and signatures of seq first..last (no bodies, no request refs)."""
        c = completion_records.c
        query = (
            sa.select(c.seq, c.prev_hash, c.record_hash, c.signature, c.signing_key_version)
            .where(c.seq.between(first, last))
            .order_by(c.seq)
        )
        with self._store.engine.connect() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def public_keys(self) -> dict[int, str]:
        """The signer's public keys by version (base64 of the raw Ed25519 key)."""
        return self._require_signer("read the public keys").public_keys()

    def verify(
        self,
        public_keys: Mapping[int, str] | None = None,
        anchors: Sequence[Anchor] = (),
    ) -> ChainReport:
        """Walk every record: hash, link, sequence, signature, then the head, then every
        anchor: those given (a head an auditor noted) and every head published outside the
        store, when a board is configured.

        `public_keys` defaults to the signer's. An anchor catches a chain cut back to before
        its record, wiped, or with that record re-signed.
        """
        history = self.anchor_history()
        published = [] if history is None else _published(history)
        walk = ChainWalk(self._public_key_source(public_keys).get, [*anchors, *published])
        if history is not None:
            _check_history(walk, history)
        c = completion_records.c
        with self._store.engine.connect() as conn:
            rows = conn.execution_options(yield_per=1000).execute(
                sa.select(completion_records).order_by(c.seq)
            )
            for row in rows.mappings():
                walk.record(row)
            head = conn.execute(
                sa.select(completion_chain_head.c.seq, completion_chain_head.c.record_hash).where(
                    completion_chain_head.c.id == HEAD_ID
                )
            ).one_or_none()
        walk.finish(None if head is None else (int(head.seq), str(head.record_hash)))
        report = walk.report()
        if history is None:
            return report
        newest = history.newest
        if newest is None and report.records:
            walk.flag(
                1,
                None,
                "anchor",
                f"no chain head was ever published at {history.location} while the store holds "
                f"{report.records} record(s): publish it with `erasure audit anchor` once after "
                "an upgrade; otherwise it was removed",
            )
            report = walk.report()
        return report.model_copy(
            update={
                "anchor_location": history.location,
                "anchor_heads": len(history.anchors),
                "anchored_seq": None if newest is None else newest.seq,
            }
        )

    def _publish(self, seq: int, record_hash: str, signature: str, key_version: int) -> bool:
        if self._anchors is None:
            return False
        return self._anchors.publish(anchor_of(seq, record_hash, signature, key_version))

    # -- internals ---------------------------------------------------------------------------

    def _require_signer(self, action: str) -> RecordSigner:
        if self._signer is None:
            raise RecordError(
                f"cannot {action} without the signing key: configure Vault "
                "(ERASURE_VAULT_ADDR, ERASURE_VAULT_TOKEN)"
            )
        return self._signer

    def _public_key_source(self, given: Mapping[int, str] | None) -> _Keys:
        if given is not None:
            return _Keys(lambda: dict(given))
        signer = self._signer
        if signer is None:
            return _Keys(None)
        return _Keys(signer.public_keys)

    @contextmanager
    def _chain(self) -> Iterator[Connection]:
        """A transaction holding the chain lock: one appender at a time, so no fork."""
        dialect = self._store.dialect
        if dialect not in ("sqlite", "postgresql"):
            raise RecordError(f"completion records need SQLite or PostgreSQL, not {dialect}")
        with store_errors(self._store, "append a record"), self._store.engine.connect() as conn:
            if dialect == "sqlite":
                # Take the write lock now, not at the first write: two appenders must not
                # both read the same head.
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            # Postgres: the head is read with SELECT ... FOR UPDATE inside this transaction.
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()


class _Keys:
    """Public keys fetched once, on first need (an empty chain needs none)."""

    def __init__(self, fetch: Callable[[], Mapping[int, str]] | None) -> None:
        self._fetch = fetch
        self._keys: dict[int, Ed25519PublicKey | None] | None = None

    def get(self, version: int) -> Ed25519PublicKey | None:
        if self._keys is None:
            if self._fetch is None:
                raise RecordError(
                    "verifying signatures needs the public keys: configure Vault "
                    "(ERASURE_VAULT_ADDR, ERASURE_VAULT_TOKEN) or pass them in"
                )
            loaded: dict[int, Ed25519PublicKey | None] = {}
            for v, text in dict(self._fetch()).items():
                try:
                    loaded[int(v)] = load_public_key(text)
                except SignatureFormatError:
                    loaded[int(v)] = None
            self._keys = loaded
        return self._keys.get(version)


# ---------------------------------------------------------------------------------------------
# Helpers


def _published(history: AnchorHistory) -> list[Anchor]:
    return [
        Anchor(
            seq=a.seq,
            record_hash=a.record_hash,
            source=(
                f"was published as the chain head at {history.location} "
                f"({a.published_at:%Y-%m-%d %H:%M:%S} UTC)"
            ),
            signature=a.signature,
            signing_key_version=a.signing_key_version,
        )
        for a in history.anchors
    ]


def _check_history(walk: ChainWalk, history: AnchorHistory) -> None:
    """A published head deleted, destroyed or written again is tampering."""
    for line in history.missing:
        walk.flag(0, None, "anchor", f"{line} at {history.location}: heads are never removed")


def _record(row: RowMapping) -> CompletionRecord:
    try:
        return CompletionRecord.model_validate({**row, "body": json.loads(row["body"])})
    except (ValidationError, ValueError):
        raise RecordError(
            f"completion record seq {row['seq']} in the store is malformed: it was altered "
            "outside the ledger; run `erasure audit verify`"
        ) from None


def _enum(cls: type[_E], value: _E | str) -> _E:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise RecordError(
            f"{value!r} is not a record {cls.__name__}; use one of {allowed}"
        ) from None


def _kind(kind: RecordKind | str) -> RecordKind:
    return _enum(RecordKind, kind)


def _status(kind: RecordKind, status: RecordStatus | str | None) -> RecordStatus | None:
    """completed: complete | complete_with_exemptions; failed: failed; others: none."""
    value = None if status is None else _enum(RecordStatus, status)
    if kind is RecordKind.COMPLETED:
        if value not in (RecordStatus.COMPLETE, RecordStatus.COMPLETE_WITH_EXEMPTIONS):
            raise RecordError(
                "a completed record needs status complete or complete_with_exemptions"
            )
        return value
    if kind is RecordKind.FAILED:
        if value not in (None, RecordStatus.FAILED):
            raise RecordError("a failed record has status failed")
        return RecordStatus.FAILED
    if value is not None:
        raise RecordError(f"a {kind.value} record has no status (got {value.value})")
    return None


def _check_ref(request_ref: str) -> None:
    if not REQUEST_REF.match(request_ref):
        # Not echoed: a caller that passes an identifier here must not see it in a log.
        raise RecordError(
            "request_ref must be 3-64 letters, digits and ._- starting with a letter or digit"
        )


def _completion_body(doc: dict[str, Any], status: RecordStatus | None) -> dict[str, Any]:
    """Check a completed body and state its effective erasure date."""
    try:
        evidence = parse_completion(doc)
    except EvidenceError as exc:
        raise RecordError(str(exc)) from None
    if not evidence.verification.passed:
        raise RecordError(
            "the verification in the completion body did not pass: nothing is reported "
            "complete that was not verified; record 'failed' instead"
        )
    if evidence.has_exemptions != (status is RecordStatus.COMPLETE_WITH_EXEMPTIONS):
        raise RecordError(
            "status must be complete_with_exemptions exactly when a DPO ruling retains data "
            "under an Art. 17(3) exemption"
        )
    effective = evidence.computed_effective_date()
    if evidence.effective_erasure_date is not None and evidence.effective_erasure_date != effective:
        raise RecordError(
            f"effective_erasure_date {evidence.effective_erasure_date} disagrees with the "
            f"evidence, which implies {effective}; omit it and the ledger states it"
        )
    return {**doc, "effective_erasure_date": effective.isoformat()}
