"""The `replayed` record's body: what a restore replay erased, left, and verified.

Written by `erasure.replay`, read back by the auditor's pages, the desk and `erasure audit
show`; rendered for the operator by `render_replay`. Counts, column and table names, keyed
hashes and references only: never a value of a row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from erasure.actions.reclaim import SpaceEvidence
from erasure.audit.records import CompletionRecord
from erasure.model import DatasetRef
from erasure.replay_attribution import CitedCompletion, Verdict

VERIFY_METHOD = (
    "second read on a fresh connection: every row of the table hashed again under every "
    "pepper version with tombstones (the CRM ingest's filter), and the table counted"
)


class CitedTombstone(BaseModel):
    """A tombstone some erased rows hashed to (its keyed hash, never the value)."""

    model_config = ConfigDict(frozen=True)

    identifier_type: str
    pepper_version: int
    subject_hash: str


class CitedRequest(BaseModel):
    """A completed request that erased this table for tombstones the erased rows hashed to,
    and how many rows went for it (a row holding two erased subjects' identifiers, or one
    subject erased by two requests, counts for each)."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    rows: int
    tombstones: list[CitedTombstone]
    # Its completed record (a replay cites only requests signed complete; None in a body
    # made by hand) and that record's status: complete, complete_with_exemptions.
    completion: CitedCompletion | None = None
    on_record: str | None = None


class HeldBack(BaseModel):
    """Rows that hash to a tombstone and were not erased, and why (`Verdict`)."""

    model_config = ConfigDict(frozen=True)

    reason: Verdict
    rows: int
    # retained: the request whose DPO ruling kept them; not_erased_here: the completed
    # requests that list their tombstones; not_completed: the tombstones' own requests.
    requests: list[str]


class ReferenceLeft(BaseModel):
    """A dataset this table points at (a catalog reference): its rows the erased rows pointed
    at that no row points at now. Not erased: found only by reference, they hold no
    identifier to match; the operator erases them."""

    model_config = ConfigDict(frozen=True)

    dataset: str  # the referenced dataset's name
    column: str  # this table's column that points at it
    key: str  # its column pointed at
    rows_unreferenced: int | None  # None: not counted (`note` says why)
    note: str | None = None


class Attempt(BaseModel):
    """One pass over the table, in one transaction: read, matched, deleted, counted."""

    model_config = ConfigDict(frozen=True)

    erased_at: datetime
    rows_before: int  # the whole table, in the transaction, before the delete
    rows_matched: int  # rows to erase: hashing to a tombstone a completed request erased here
    rows_deleted: int  # the delete's own row count, which must equal rows_matched
    rows_after: int  # the whole table, in the transaction, after the delete
    statements: list[str]  # the DELETE shapes, with placeholders, never values
    pepper_versions: list[int]  # the versions whose tombstones were hashed under
    tombstones_checked: int
    cited: list[CitedRequest]
    deleted_by: Literal["primary_key", "identifier_values"] | None = None
    rows_held: int = 0  # rows hashing to a tombstone that stay (see `held`)
    held: list[HeldBack] = []
    references: list[ReferenceLeft] = []
    # What became of the deleted rows' bytes (erasure.actions.reclaim); None until then.
    space: SpaceEvidence | None = None


class ReplayVerification(BaseModel):
    """The second read, after the commit."""

    model_config = ConfigDict(frozen=True)

    method: str = VERIFY_METHOD
    checked_at: datetime
    passed: bool
    rows_read: int
    tombstoned_rows_remaining: int  # rows the replay erases still there: must be 0
    others_before: int  # rows of everybody else (and rows held back) before the delete
    others_after: int  # and now: must be the same
    rows_held: int = 0  # of those, rows hashing to a tombstone that stay (see the body's held)


class ReplayBody(BaseModel):
    """The body of a `replayed` record."""

    model_config = ConfigDict(frozen=True)

    replay_ref: str
    dataset: DatasetRef
    identifier_columns: dict[str, list[str]]  # identifier type -> columns matched on
    pepper_versions: list[int]
    tombstones_checked: int
    rows_erased: int
    cited: list[CitedRequest]
    attempts: list[Attempt]
    verification: ReplayVerification
    replayed_at: datetime
    held: list[HeldBack] = []  # rows hashing to a tombstone the replay did not erase, and why
    # Rows of the datasets this table points at that the erased rows pointed at and no row
    # points at now: not erased (they hold no identifier to match); the operator erases them.
    references_not_replayed: list[ReferenceLeft] = []


# ---------------------------------------------------------------------------------------------
# For people

_HELD_LINES = {
    Verdict.RETAINED: "kept: {rows} row(s) of subjects whose rows here a DPO ruling retained "
    "({refs}): not erased",
    Verdict.NOT_ERASED_HERE: "not erased: {rows} row(s) hash to tombstones of requests that did "
    "not erase this table ({refs}; e.g. the subject was not held here then): if they must go, "
    "erase them with a request",
    Verdict.NOT_COMPLETED: "not erased: {rows} row(s) hash to tombstones of no completed "
    "request ({refs}): their own run erases them (in flight), or nothing did (failed); run the "
    "replay again once the request has completed",
}


def render_replay(record: CompletionRecord, body: ReplayBody, *, resumed: bool = False) -> str:
    """The operator's summary of a replay on record (`erasure restore replay`)."""
    head = f"Restore replay {record.request_ref} of {body.dataset.qualified}"
    if resumed:
        head += " (resumed: an earlier run had erased, or recorded, before this one)"
    return "\n".join(
        [
            head,
            *(f"  {line}" for line in replay_lines(body)),
            f"  signed record seq {record.seq}, sha256:{record.record_hash} (key "
            f"v{record.signing_key_version}); `erasure audit show {record.request_ref}`",
        ]
    )


def replay_lines(body: ReplayBody) -> list[str]:
    """What a replay found, erased, left and verified, one line each (no value of a row)."""
    last = body.attempts[-1]
    versions = ", ".join(map(str, body.pepper_versions)) or "none"
    lines = [
        f"checked {last.rows_before} row(s) against {body.tombstones_checked} tombstone(s) "
        f"under pepper version(s) {versions}",
    ]
    if not body.rows_erased:
        lines.append(
            "nothing to erase: no row hashes to a tombstone a completed request erased here"
        )
    else:
        lines.append(
            f"erased again: {body.rows_erased} row(s), for {len(body.cited)} cited request(s)"
        )
    for cited in body.cited:
        stones = ", ".join(
            f"{t.identifier_type} v{t.pepper_version} {t.subject_hash[:12]}…"
            for t in cited.tombstones
        )
        c = cited.completion
        on_record = (
            f"completed record seq {c.seq} ({c.status}, {c.completed_at:%Y-%m-%d %H:%M} UTC)"
            if c is not None
            else cited.on_record or "no completed record"
        )
        lines.append(
            f"  {cited.request_ref}: {cited.rows} row(s); {on_record}; tombstones {stones}"
        )
    for held in body.held:
        refs = ", ".join(held.requests) or "no request named"
        lines.append(_HELD_LINES[held.reason].format(rows=held.rows, refs=refs))
    for statement in sorted({s for a in body.attempts for s in a.statements}):
        lines.append(f"statement: {statement}")
    space = next((a.space for a in reversed(body.attempts) if a.space is not None), None)
    if space is not None:
        lines.append(f"space: {space.state} ({space.note})")
    for left in body.references_not_replayed:
        line = _reference_line(body, left)
        if line is not None:
            lines.append(line)
    check = body.verification
    lines.append(
        f"verification {'passed' if check.passed else 'FAILED'} "
        f"({check.checked_at:%Y-%m-%d %H:%M:%S} UTC): {check.tombstoned_rows_remaining} row(s) "
        f"left to erase; other people's rows {check.others_before} before, "
        f"{check.others_after} after"
    )
    return lines


def _reference_line(body: ReplayBody, left: ReferenceLeft) -> str | None:
    via = f"{body.dataset.name}.{left.column} -> {left.dataset}.{left.key}"
    if left.rows_unreferenced is None:
        return (
            f"not replayed: rows of {left.dataset} the erased rows pointed at ({via}): "
            f"{left.note or 'not counted'}; find them and erase them (a request per subject)"
        )
    if not left.rows_unreferenced:
        return None
    return (
        f"NOT ERASED: {left.rows_unreferenced} row(s) of {left.dataset} that the erased rows "
        f"pointed at are now pointed at by no row ({via}); they hold no identifier to match: "
        "you must erase them (a request per subject, or with the DPO), unless a cited "
        "request's record shows a ruling kept them"
    )
