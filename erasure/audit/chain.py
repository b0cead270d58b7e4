"""Walking the chain: hash, link, sequence and signature of every record, then the head.

A walk is fed the stored rows in seq order and never trusts a stored hash it can recompute;
the first problem it reports is the first bad record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel
from sqlalchemy.engine import RowMapping

from erasure.audit.canonical import GENESIS_HASH, canonical_json, hash_document, sha256_hex
from erasure.audit.signing import SignatureFormatError, signature_version, verify_with_public_key

MAX_PROBLEMS = 100  # a report lists at most this many; the first one is what matters

KeyLookup = Callable[[int], Ed25519PublicKey | None]  # key version -> public key, if known


class ChainProblem(BaseModel):
    """What is wrong with one place in the chain."""

    seq: int
    request_ref: str | None
    # missing | hash_mismatch | broken_link | bad_signature | unknown_key | head | anchor
    problem: str
    detail: str

    def describe(self) -> str:
        where = f"seq {self.seq}" + (f" (request {self.request_ref})" if self.request_ref else "")
        return f"{where}: {self.detail}"


class ChainReport(BaseModel):
    """The result of walking the whole chain; `first_problem` is the first bad record."""

    ok: bool
    records: int
    head_seq: int
    head_hash: str
    key_versions: list[int]
    first_problem: ChainProblem | None
    problems: list[ChainProblem]
    problems_truncated: bool = False
    verified_at: datetime

    def summary(self) -> str:
        """One line for people: OK with the head, or BROKEN naming the first bad record."""
        if self.first_problem is None:
            versions = ", ".join(map(str, self.key_versions)) or "-"
            return (
                f"chain OK: {self.records} record(s), head seq {self.head_seq} "
                f"sha256:{self.head_hash}, signed with key version(s) {versions}"
            )
        more = len(self.problems) - 1
        tail = f" (+{more} more problem(s))" if more else ""
        return f"chain BROKEN at {self.first_problem.describe()}{tail}"


class ChainWalk:
    """The state of one verification pass, fed one stored row at a time."""

    def __init__(self, key_for: KeyLookup, anchor: tuple[int, str] | None) -> None:
        self._key_for = key_for
        self._anchor = anchor
        self._anchor_seen: str | None = None
        self._expected = 1
        self._prev_hash = GENESIS_HASH
        self._last_seq = 0
        self._count = 0
        self._used: set[int] = set()
        self.problems: list[ChainProblem] = []
        self._truncated = False

    def _flag(self, seq: int, ref: str | None, problem: str, detail: str) -> None:
        if len(self.problems) >= MAX_PROBLEMS:
            self._truncated = True
            return
        self.problems.append(ChainProblem(seq=seq, request_ref=ref, problem=problem, detail=detail))

    def record(self, row: RowMapping) -> None:
        """Check one stored row, the next in seq order."""
        seq, ref = int(row["seq"]), str(row["request_ref"])
        self._count += 1
        if seq != self._expected:
            gap = (
                f"seq {self._expected}"
                if seq == self._expected + 1
                else f"seq {self._expected}..{seq - 1}"
            )
            self._flag(
                self._expected,
                None,
                "missing",
                f"record {gap} is missing: the chain jumps from seq {self._last_seq} to {seq} "
                "(deleted)",
            )
        stored = str(row["record_hash"])
        computed = row_hash(row)
        if computed is None:
            self._flag(seq, ref, "hash_mismatch", "its body is not valid JSON (edited)")
        elif computed != stored:
            self._flag(
                seq,
                ref,
                "hash_mismatch",
                "its content does not match its record_hash (edited after it was written)",
            )
        if str(row["prev_hash"]) != self._prev_hash:
            self._flag(
                seq,
                ref,
                "broken_link",
                f"prev_hash does not match the record_hash of seq {self._last_seq}",
            )
        self._check_signature(seq, ref, row, stored)
        if self._anchor is not None and seq == self._anchor[0]:
            self._anchor_seen = stored
        self._prev_hash = stored
        self._last_seq = seq
        self._expected = seq + 1

    def _check_signature(self, seq: int, ref: str, row: RowMapping, stored: str) -> None:
        version = int(row["signing_key_version"])
        signature = str(row["signature"])
        self._used.add(version)
        try:
            if signature_version(signature) != version:
                self._flag(
                    seq, ref, "bad_signature", "the signature's key version is not the recorded one"
                )
                return
        except SignatureFormatError:
            self._flag(seq, ref, "bad_signature", "the signature is not a Vault signature")
            return
        key = self._key_for(version)
        if key is None:
            self._flag(
                seq,
                ref,
                "unknown_key",
                f"no public key for signing key version {version} (key trimmed or replaced?)",
            )
        elif not verify_with_public_key(key, stored.encode("ascii"), signature):
            self._flag(
                seq, ref, "bad_signature", "the signature does not verify (forged or edited)"
            )

    def finish(self, head: tuple[int, str] | None) -> None:
        """Check the chain head (seq, record_hash) and the anchor after the last row."""
        if head is None:
            self._flag(self._last_seq + 1, None, "head", "the chain head row is missing")
        else:
            seq, record_hash = head
            if seq > self._last_seq:
                self._flag(
                    self._last_seq + 1,
                    None,
                    "missing",
                    f"records seq {self._last_seq + 1}..{seq} are missing at the end of the "
                    f"chain: the head says seq {seq} (deleted)",
                )
            elif seq < self._last_seq:
                self._flag(
                    seq + 1,
                    None,
                    "head",
                    f"records after seq {seq} were not appended through the ledger "
                    f"(the head says seq {seq})",
                )
            elif record_hash != self._prev_hash:
                self._flag(seq, None, "head", "the chain head's hash differs from the last record")
        if self._anchor is not None:
            anchor_seq, anchor_hash = self._anchor
            if self._anchor_seen is None:
                self._flag(anchor_seq, None, "anchor", "the anchored record is no longer there")
            elif self._anchor_seen != anchor_hash:
                self._flag(anchor_seq, None, "anchor", "the record differs from the anchor")

    def report(self) -> ChainReport:
        problems = sorted(self.problems, key=lambda p: p.seq)
        return ChainReport(
            ok=not problems,
            records=self._count,
            head_seq=self._last_seq,
            head_hash=self._prev_hash,
            key_versions=sorted(self._used),
            first_problem=problems[0] if problems else None,
            problems=problems,
            problems_truncated=self._truncated,
            verified_at=datetime.now(UTC),
        )


def row_hash(row: RowMapping) -> str | None:
    """The canonical hash of a stored row, recomputed; None if its body is not JSON."""
    try:
        body = json.loads(row["body"])
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    created = row["created_at"]
    doc = hash_document(
        seq=int(row["seq"]),
        request_ref=str(row["request_ref"]),
        subject_hash=str(row["subject_hash"]),
        kind=str(row["kind"]),
        status=None if row["status"] is None else str(row["status"]),
        created_at=created,
        body=body,
        prev_hash=str(row["prev_hash"]),
        signing_key_version=int(row["signing_key_version"]),
    )
    return sha256_hex(canonical_json(doc))
