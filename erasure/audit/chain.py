"""Walking the chain: hash, link, sequence and signature of every record, then the head.

A walk is fed the stored rows in seq order and never trusts a stored hash it can recompute;
the first problem it reports is the first bad record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel
from sqlalchemy.engine import RowMapping

from erasure.audit.canonical import GENESIS_HASH, canonical_json, hash_document, sha256_hex
from erasure.audit.signing import SignatureFormatError, signature_version, verify_with_public_key

MAX_PROBLEMS = 100  # a report lists at most this many; the first one is what matters
UNANCHORED = "unanchored"  # the problem of a report compared with no head outside the store

KeyLookup = Callable[[int], Ed25519PublicKey | None]  # key version -> public key, if known


@dataclass(frozen=True)
class Anchor:
    """A (seq, record_hash) the chain must still hold: noted by an auditor, or published
    outside the store after an append (`erasure.audit.anchor`), then with its signature."""

    seq: int
    record_hash: str
    source: str  # what "seq N ..." says of it, e.g. "is the head you gave (--anchor)"
    signature: str | None = None
    signing_key_version: int | None = None


class ChainProblem(BaseModel):
    """What is wrong with one place in the chain."""

    seq: int
    request_ref: str | None
    # missing | hash_mismatch | broken_link | bad_signature | unknown_key | head | anchor |
    # unanchored
    problem: str
    detail: str

    def describe(self) -> str:
        if self.seq == 0:  # not one record's: the published anchors themselves
            return f"the published anchors: {self.detail}"
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
    # The heads published outside the store (erasure.audit.anchor), when they were compared.
    anchor_location: str | None = None
    anchor_heads: int = 0
    anchored_seq: int | None = None

    def summary(self) -> str:
        """One line for people: OK with the head, or BROKEN naming the first bad record."""
        if self.first_problem is None:
            versions = ", ".join(map(str, self.key_versions)) or "-"
            return (
                f"chain OK: {self.records} record(s), head seq {self.head_seq} "
                f"sha256:{self.head_hash}, signed with key version(s) {versions}; "
                f"{self.anchoring()}"
            )
        more = len(self.problems) - 1
        tail = f" (+{more} more problem(s))" if more else ""
        if self.first_problem.problem == UNANCHORED:
            return f"chain NOT VERIFIED: {self.first_problem.detail}{tail}"
        return f"chain BROKEN at {self.first_problem.describe()}{tail}"

    def unanchored(self, detail: str) -> ChainReport:
        """This report, failed because the chain was compared with no head kept outside the
        store (what alone catches a cut or a wiped store)."""
        problem = ChainProblem(seq=0, request_ref=None, problem=UNANCHORED, detail=detail)
        if not self.ok:  # what is broken comes first
            return self.model_copy(update={"problems": [*self.problems, problem]})
        return self.model_copy(
            update={"ok": False, "first_problem": problem, "problems": [problem]}
        )

    def anchoring(self) -> str:
        """What the chain was compared with outside the store, for people."""
        if self.anchor_location is None:
            return "NOT compared with the heads published outside the store (no Vault access)"
        if self.anchored_seq is None:
            return f"no head published at {self.anchor_location} yet (empty chain)"
        behind = self.head_seq - self.anchored_seq
        lag = f"; seq {self.anchored_seq + 1}..{self.head_seq} not yet anchored" if behind else ""
        return (
            f"matches the {self.anchor_heads} head(s) published at {self.anchor_location} "
            f"(newest seq {self.anchored_seq}){lag}"
        )


class ChainWalk:
    """The state of one verification pass, fed one stored row at a time."""

    def __init__(self, key_for: KeyLookup, anchors: Sequence[Anchor] = ()) -> None:
        self._key_for = key_for
        self._anchors = anchors
        self._anchored = {a.seq for a in anchors}
        self._anchor_seen: dict[int, str] = {}
        self._expected = 1
        self._prev_hash = GENESIS_HASH
        self._last_seq = 0
        self._count = 0
        self._used: set[int] = set()
        self.problems: list[ChainProblem] = []
        self._truncated = False

    def flag(self, seq: int, ref: str | None, problem: str, detail: str) -> None:
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
            self.flag(
                self._expected,
                None,
                "missing",
                f"record {gap} is missing: the chain jumps from seq {self._last_seq} to {seq} "
                "(deleted)",
            )
        stored = str(row["record_hash"])
        computed = row_hash(row)
        if computed is None:
            self.flag(seq, ref, "hash_mismatch", "its body is not valid JSON (edited)")
        elif computed != stored:
            self.flag(
                seq,
                ref,
                "hash_mismatch",
                "its content does not match its record_hash (edited after it was written)",
            )
        if str(row["prev_hash"]) != self._prev_hash:
            self.flag(
                seq,
                ref,
                "broken_link",
                f"prev_hash does not match the record_hash of seq {self._last_seq}",
            )
        self._check_signature(seq, ref, row, stored)
        if seq in self._anchored:
            self._anchor_seen[seq] = stored
        self._prev_hash = stored
        self._last_seq = seq
        self._expected = seq + 1

    def _check_signature(self, seq: int, ref: str, row: RowMapping, stored: str) -> None:
        version = int(row["signing_key_version"])
        signature = str(row["signature"])
        self._used.add(version)
        try:
            if signature_version(signature) != version:
                self.flag(
                    seq, ref, "bad_signature", "the signature's key version is not the recorded one"
                )
                return
        except SignatureFormatError:
            self.flag(seq, ref, "bad_signature", "the signature is not a Vault signature")
            return
        key = self._key_for(version)
        if key is None:
            self.flag(
                seq,
                ref,
                "unknown_key",
                f"no public key for signing key version {version} (key trimmed or replaced?)",
            )
        elif not verify_with_public_key(key, stored.encode("ascii"), signature):
            self.flag(seq, ref, "bad_signature", "the signature does not verify (forged or edited)")

    def finish(self, head: tuple[int, str] | None) -> None:
        """Check the chain head (seq, record_hash) and the anchor after the last row."""
        if head is None:
            self.flag(self._last_seq + 1, None, "head", "the chain head row is missing")
        else:
            seq, record_hash = head
            if seq > self._last_seq:
                self.flag(
                    self._last_seq + 1,
                    None,
                    "missing",
                    f"records seq {self._last_seq + 1}..{seq} are missing at the end of the "
                    f"chain: the head says seq {seq} (deleted)",
                )
            elif seq < self._last_seq:
                self.flag(
                    seq + 1,
                    None,
                    "head",
                    f"records after seq {seq} were not appended through the ledger "
                    f"(the head says seq {seq})",
                )
            elif record_hash != self._prev_hash:
                self.flag(seq, None, "head", "the chain head's hash differs from the last record")
        self._check_anchors()

    def _check_anchors(self) -> None:
        """The newest anchor whose record is gone (a cut or a wipe) and the first whose record
        differs (a re-signed record), each with how many more there are."""
        gone = [a for a in self._anchors if a.seq not in self._anchor_seen]
        differ = [
            a
            for a in self._anchors
            if a.seq in self._anchor_seen and self._anchor_seen[a.seq] != a.record_hash
        ]
        if gone:
            newest = max(gone, key=lambda a: a.seq)
            self.flag(
                newest.seq,
                None,
                "anchor",
                f"seq {newest.seq} {newest.source}, but it is no longer in the store: the chain "
                f"was cut back or wiped after it{self._genuine(newest)}{_more(gone)}",
            )
        if differ:
            first = min(differ, key=lambda a: a.seq)
            self.flag(
                first.seq,
                None,
                "anchor",
                f"seq {first.seq} {first.source}, but the record there now differs: it was "
                f"replaced (re-signed) after{self._genuine(first)}{_more(differ)}",
            )

    def _genuine(self, anchor: Anchor) -> str:
        """Whether the anchor's own signature verifies, said for the problem's detail."""
        if anchor.signature is None or anchor.signing_key_version is None:
            return ""
        key = self._key_for(anchor.signing_key_version)
        if key is not None and verify_with_public_key(
            key, anchor.record_hash.encode("ascii"), anchor.signature
        ):
            return " (that head's signature verifies)"
        return " (that head's signature does not verify either)"

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


def _more(anchors: list[Anchor]) -> str:
    return f" ({len(anchors) - 1} more anchor(s) like it)" if len(anchors) > 1 else ""


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
