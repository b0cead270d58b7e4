"""Rule 3: crypto-shred the subject's per-subject keys, and prove each is gone.

Immutable storage was written under keys named by the subject's keyed hash. The key may
have been written under any pepper version in use then, so every version is tried; a key
another dataset's shred of this request already destroyed is cited, not claimed again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from erasure.errors import ShredError
from erasure.keys.envelope import EnvelopeCipher
from erasure.model import Action, DatasetRef, Evidence, Identity
from erasure.pseudonym import Pepper, subject_hash
from erasure.registry.action_log import ActionRecord, ActionStatus


class ShredEvidence(Evidence):
    """What one crypto-shred did: the keys destroyed (hashed ids, proofs), from when no
    snapshot holds them, and what was checked to find them."""

    dataset: str
    keys: list[dict[str, Any]]  # ShredResult documents; a cited one names `destroyed_with`
    keys_shredded: int
    identifiers_checked: int
    pepper_versions_checked: list[int] = []
    snapshot_expiry_date: date
    shredded_at: datetime


def key_hashes(peppers: Sequence[Pepper], identities: Iterable[Identity]) -> list[str]:
    """The names the subject's per-subject keys may have, under every pepper version."""
    return sorted({subject_hash(p, i.type, i.value) for p in peppers for i in identities})


def shred_keys(
    cipher: EnvelopeCipher,
    dataset: DatasetRef,
    identities: Sequence[Identity],
    peppers: Sequence[Pepper],
    cited: Mapping[str, dict[str, Any]],
    *,
    snapshot_retention_days: int,
    destroying: Callable[[str], None] | None = None,
    destroyed_earlier: Collection[str] = (),
    by_other_requests: Callable[[str], dict[str, Any] | None] = lambda _key_id: None,
) -> ShredEvidence:
    """Destroy every key of the subject that exists; cite those already destroyed here.

    `destroying` logs a key's hash before it is destroyed; `destroyed_earlier` is what an
    earlier try so logged: a retry that finds such a key gone (that try died after destroying
    it) claims it, proving it gone again, instead of reporting no key at all;
    `by_other_requests` cites, by key id, the shred of another request for the same person
    that destroyed it. A shred that finds no key at all raises ShredError: it would prove
    nothing.
    """
    keystore = cipher.keystore
    keys = []
    for key_hash in key_hashes(peppers, identities):
        if keystore.exists(key_hash):
            if destroying is not None:
                destroying(key_hash)
            keys.append(cipher.shred(key_hash).model_dump(mode="json"))
        elif keystore.key_id(key_hash) in cited:
            # The subject's key also sealed another dataset and went with it: cite that.
            keys.append(dict(cited[keystore.key_id(key_hash)]))
        elif (elsewhere := by_other_requests(keystore.key_id(key_hash))) is not None:
            # Another request for the same person destroyed it first (two requests of one
            # subject at once), even if this one's earlier try was about to: it is gone, and
            # that request's record says when. Cited, not claimed.
            keys.append(elsewhere)
        elif key_hash in destroyed_earlier:  # proven gone again, and claimed as this shred's
            keys.append({**cipher.shred(key_hash).model_dump(mode="json"), "already_absent": False})
    if not keys:
        raise ShredError(
            f"no per-subject key of the subject exists for {dataset.name} under pepper "
            f"version(s) {', '.join(str(p.version) for p in peppers)}, and none was destroyed "
            "by this request: nothing proves its copies unreadable. The key was there when the "
            "request was planned, so something removed it since: find out what, then re-plan "
            "the request (a plan without keys asks the DPO, rule 3a)"
        )
    now = datetime.now(UTC)
    expiry = max(
        (date.fromisoformat(k["snapshot_expiry_date"]) for k in keys),
        default=now.date() + timedelta(days=snapshot_retention_days),
    )
    return ShredEvidence(
        dataset=dataset.name,
        keys=keys,
        keys_shredded=sum(1 for k in keys if not k["already_absent"]),
        identifiers_checked=len(identities),
        pepper_versions_checked=[p.version for p in peppers],
        snapshot_expiry_date=expiry,
        shredded_at=now,
    )


def destroyed_by_request(records: Iterable[ActionRecord], key_id: str) -> dict[str, Any] | None:
    """The first of `records` (other requests' done crypto-shreds) that destroyed `key_id`,
    as a citation naming that request; None if none did."""
    for record in records:
        for key in record.evidence.get("keys", []):
            if key.get("key_id") == key_id and not key.get("already_absent"):
                return {
                    **key,
                    "already_absent": True,
                    "destroyed_with": record.dataset.qualified,
                    "destroyed_by_request": record.request_ref,
                }
    return None


def destroyed_by_others(
    logged: Iterable[ActionRecord], dataset: DatasetRef
) -> dict[str, dict[str, Any]]:
    """Keys the request's other crypto-shreds destroyed, by key id, as `dataset`'s cites them."""
    cited: dict[str, dict[str, Any]] = {}
    for action in logged:
        if (
            action.action == Action.CRYPTO_SHRED.value
            and action.status is ActionStatus.DONE
            and action.dataset != dataset
        ):
            for key in action.evidence.get("keys", []):
                if not key["already_absent"]:
                    cited[key["key_id"]] = {
                        **key,
                        "already_absent": True,
                        "destroyed_with": action.dataset.qualified,
                    }
    return cited
