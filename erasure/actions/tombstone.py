"""The tombstone: every identifier of the subject, hashed, in the suppression list CRM
ingest enforces; written before any row is erased, so a sync meanwhile cannot bring them back.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from erasure.model import Evidence, Identity
from erasure.pseudonym import Pepper
from erasure.suppression import SuppressionList, Tombstone


class TombstoneEntry(BaseModel):
    subject_hash: str
    identifier_type: str
    pepper_version: int
    new: bool  # False: it was there already (another request, or a retry)


class TombstoneEvidence(Evidence):
    tombstones: list[TombstoneEntry]


def insert_tombstones(
    suppression: SuppressionList, pepper: Pepper, identities: Iterable[Identity], request_ref: str
) -> TombstoneEvidence:
    """Tombstone every identity under `pepper` (hashes only); idempotent."""
    entries = []
    for identity in sorted(identities, key=lambda i: (i.type, i.value)):
        stone = Tombstone.for_subject(
            pepper, identity.type, identity.value, request_ref=request_ref
        )
        entries.append(
            TombstoneEntry(
                subject_hash=stone.subject_hash,
                identifier_type=stone.identifier_type,
                pepper_version=stone.pepper_version,
                new=suppression.add(stone),
            )
        )
    return TombstoneEvidence(tombstones=entries)
