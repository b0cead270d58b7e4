"""Which storage guarantees hold for one artefact of a completed request, each in one line.

The record says what was done to each artefact; an auditor also asks what that leaves on
storage: deleted rows whose bytes still sit in the table until VACUUM, a snapshot that can
still time-travel to them, a backup that keeps a copy until it expires. `storage_guarantees`
reads the artefact's action, kind, catalog entry and evidence and lists the guarantees the
evidence shows, with the date each took (or takes) effect. Nothing is claimed the evidence
does not show: evidence written before the space was reclaimed gets no space guarantee.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from erasure.audit.evidence import RETENTION_EXPIRY, SNAPSHOT_EXPIRY, StorageGuarantee
from erasure.catalog import DatasetSpec
from erasure.model import Action


class Guarantee(StrEnum):
    """The vocabulary of storage guarantees."""

    ROWS_DELETED = "rows_deleted"
    SPACE_RECLAIMED = "space_reclaimed"
    SPACE_RECLAIM_SCHEDULED = "space_reclaim_scheduled"
    SNAPSHOTS_EXPIRED = "snapshots_expired"
    KEY_DESTROYED = "key_destroyed"
    BACKUP_UNTIL = "backup_until"
    REBUILT = "rebuilt"
    KEPT_UNDER_RULING = "kept_under_ruling"
    ANONYMOUS_AGGREGATE = "anonymous_aggregate"


MEANS: dict[Guarantee, str] = {
    Guarantee.ROWS_DELETED: "The subject's rows were deleted here and a recount found none: no "
    "query can return them.",
    Guarantee.SPACE_RECLAIMED: "The deleted rows' storage was reclaimed (see the engine's "
    "line); copies in WAL, replicas and backups last until their own retention.",
    Guarantee.SPACE_RECLAIM_SCHEDULED: "The deleted rows cannot be queried, but their bytes "
    "stay in the table's files until the VACUUM due by this date (the daily pass runs it and "
    "fails loudly once it is overdue).",
    Guarantee.SNAPSHOTS_EXPIRED: "Every table snapshot (Iceberg) or version (Delta) that held "
    "the rows was expired and the files only they used removed, and a search of every snapshot "
    "kept and every file under the table found none: time travel cannot reach the rows (a "
    "branch or tag listed as kept holds none of them).",
    Guarantee.KEY_DESTROYED: "Every version of the subject's key was destroyed in Vault: the "
    "encrypted copies can no longer be decrypted by anyone.",
    Guarantee.BACKUP_UNTIL: "A copy this system cannot change (a backup, a snapshot, the "
    "immutable store) keeps the data until this date, then expires; it is beyond use until "
    "then.",
    Guarantee.REBUILT: "The artefact was re-materialised from its cleaned upstreams after the "
    "erasure, and the recount found none of the subject's rows.",
    Guarantee.KEPT_UNDER_RULING: "The data is kept, not erased, on the DPO's ruling (option, "
    "exemption and any date given).",
    Guarantee.ANONYMOUS_AGGREGATE: "An aggregate whose every group counts at least k people "
    "after the erasure: it does not single out the subject.",
}

# The space guarantee's line, by how the space was reclaimed.
_SPACE_MEANS = {
    "postgresql": "VACUUM ran after the delete committed: the deleted rows' versions are gone "
    "from the table's heap and indexes and their space is reusable; the bytes may stay in the "
    "data files until overwritten, and in WAL, replicas and base backups until their "
    "retention.",
    "sqlite": "SQLite's secure_delete overwrote the deleted rows with zeros in the database "
    "file at the delete; a deleted rollback journal's bytes may stay on disk until "
    "overwritten, and backups keep them until their retention.",
    "dropped": "The table was dropped since the delete: its files were removed with it; the "
    "bytes may stay on disk until overwritten, and in WAL and backups until their retention.",
}
_OWNER_DELETED = (
    "The artefact's owner deleted the subject's rows there and confirmed it (this system "
    "cannot reach it): the record names who confirmed it and how."
)
_KEPT = frozenset({"retain_exemption", "non_personal", "rebuild_by_date"})


def storage_guarantees(
    action: Action,
    kind: str | None,
    spec: DatasetSpec | None,
    evidence: Mapping[str, Any],
) -> list[StorageGuarantee]:
    """The storage guarantees that hold for an artefact given its action, kind, catalog entry
    (None when the catalog has none) and the evidence of what was done."""
    found: list[StorageGuarantee] = []
    if action is Action.ERASE_ROWS:
        found += _rows_deleted(evidence, evidence.get("executed_at"))
        found += _space(evidence.get("space"))
        found += _snapshots_expired(evidence.get("history"))
    elif action is Action.REBUILD:
        found += _rebuilt(evidence)
        found += _snapshots_expired(evidence.get("history"))
    elif action is Action.CRYPTO_SHRED:
        found += _key_destroyed(evidence)
    elif action is Action.AGGREGATE_OK:
        found += _anonymous(evidence)
    elif action is Action.ESCALATE:
        found += _ruled(evidence)
    found += _copies_kept(action, kind, spec, evidence)
    return found


def _guarantee(
    guarantee: Guarantee,
    *,
    means: str | None = None,
    since: Any = None,
    until: Any = None,
    due: Any = None,
    **detail: Any,
) -> StorageGuarantee:
    return StorageGuarantee(
        guarantee=guarantee.value,
        means=means or MEANS[guarantee],
        since=_day(since),
        until=_day(until),
        due=_day(due),
        detail={k: v for k, v in detail.items() if v is not None},
    )


def _rows_deleted(evidence: Mapping[str, Any], at: Any) -> list[StorageGuarantee]:
    if evidence.get("rows_after") != 0 or "rows_deleted" not in evidence:
        return []
    return [
        _guarantee(
            Guarantee.ROWS_DELETED,
            since=at,
            rows_deleted=evidence.get("rows_deleted"),
            statement=evidence.get("statement"),
        )
    ]


def _space(space: Any) -> list[StorageGuarantee]:
    if not isinstance(space, Mapping):
        return []  # written before the space was reclaimed: nothing is claimed
    detail = {
        "engine": space.get("engine"),
        "statement": space.get("statement"),
        "dead_tuples_left": space.get("dead_tuples_left"),
        "snapshots_checked": space.get("snapshots_checked"),
    }
    if space.get("state") == "reclaimed":
        how = "dropped" if space.get("reason") == "dropped" else str(space.get("engine"))
        means = _SPACE_MEANS.get(how, MEANS[Guarantee.SPACE_RECLAIMED])
        if space.get("snapshots_checked") is False:
            means += " Whether another role's older transaction still saw them was not seen."
        return [_guarantee(Guarantee.SPACE_RECLAIMED, means=means, since=space.get("at"), **detail)]
    if space.get("state") == "scheduled":
        return [
            _guarantee(
                Guarantee.SPACE_RECLAIM_SCHEDULED,
                due=space.get("by"),
                reason=space.get("reason"),
                **detail,
            )
        ]
    return []  # not_reclaimed / not_applicable: no guarantee holds; the evidence says why


def _snapshots_expired(history: Any) -> list[StorageGuarantee]:
    if not isinstance(history, Mapping) or "snapshots_expired" not in history:
        return []
    return [
        _guarantee(
            Guarantee.SNAPSHOTS_EXPIRED,
            since=history.get("effective_at"),
            format=history.get("format"),
            snapshots_expired=history.get("snapshots_expired"),
            files_removed=history.get("files_removed"),
            refs_kept=list(history.get("refs_kept") or []),
        )
    ]


def _rebuilt(evidence: Mapping[str, Any]) -> list[StorageGuarantee]:
    if "rebuilt_at" not in evidence:
        return []
    return [
        _guarantee(
            Guarantee.REBUILT,
            since=evidence.get("rebuilt_at"),
            method=evidence.get("method"),
            run_id=evidence.get("run_id"),
            rows_after=evidence.get("rows_after"),
        )
    ]


def _key_destroyed(evidence: Mapping[str, Any]) -> list[StorageGuarantee]:
    if "shredded_at" not in evidence:
        return []
    return [
        _guarantee(
            Guarantee.KEY_DESTROYED,
            since=evidence.get("shredded_at"),
            keys_destroyed=evidence.get("keys_shredded"),
        )
    ]


def _anonymous(evidence: Mapping[str, Any]) -> list[StorageGuarantee]:
    measured = evidence.get("at_act")
    numbers = measured if isinstance(measured, Mapping) else evidence
    k, smallest = numbers.get("k"), numbers.get("min_group_size")
    if not isinstance(k, int) or numbers.get("groups_below_k") != 0:
        return []
    if smallest is not None and (not isinstance(smallest, int) or smallest < k):
        return []
    return [
        _guarantee(
            Guarantee.ANONYMOUS_AGGREGATE,
            k=k,
            min_group_size=smallest,
            groups=numbers.get("groups"),
            table_version=numbers.get("table_version"),
        )
    ]


def _ruled(evidence: Mapping[str, Any]) -> list[StorageGuarantee]:
    ruling = evidence.get("ruling")
    if not isinstance(ruling, Mapping):
        return []
    option = ruling.get("option")
    deletion = evidence.get("deletion")
    if isinstance(deletion, Mapping) and not deletion.get("pending"):
        if deletion.get("done_by") == "erasure":
            return [
                *_rows_deleted({"rows_after": 0, **deletion}, None),  # its time is not kept
                *_space(deletion.get("space")),
            ]
        if deletion.get("confirmed_by"):
            return [
                _guarantee(
                    Guarantee.ROWS_DELETED,
                    means=_OWNER_DELETED,
                    since=deletion.get("confirmed_at"),
                    done_by=deletion.get("done_by"),
                    confirmed_by=deletion.get("confirmed_by"),
                )
            ]
    if option in _KEPT:
        return [
            _guarantee(
                Guarantee.KEPT_UNDER_RULING,
                since=ruling.get("decided_at"),
                until=ruling.get("scheduled_by") if option == "rebuild_by_date" else None,
                option=option,
                exemption=ruling.get("exemption"),
            )
        ]
    return []  # not held: there was nothing to keep a guarantee about


def _copies_kept(
    action: Action, kind: str | None, spec: DatasetSpec | None, evidence: Mapping[str, Any]
) -> list[StorageGuarantee]:
    """backup_until for each dated copy the evidence names."""
    what = kind or (spec.kind.value if spec is not None else "artefact")
    immutable = spec is not None and spec.storage == "immutable"
    copies = {
        SNAPSHOT_EXPIRY: "Vault snapshots that still hold the destroyed key",
        RETENTION_EXPIRY: f"the immutable copy ({what})" if immutable else f"a copy ({what})",
        "last_copy_expires": f"the encrypted {what}, unreadable since its key was destroyed",
    }
    found = []
    for key, copy in copies.items():
        if key == "last_copy_expires" and action is not Action.CRYPTO_SHRED:
            continue
        until = _day(evidence.get(key))
        if until is not None:
            found.append(_guarantee(Guarantee.BACKUP_UNTIL, until=until, copy=copy))
    return found


def _day(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).date()
        except ValueError:
            return None
    return None
