"""Rules 1, 2a, 4, 6, 7: what the DPO decided about an escalated artefact, carried out.

A ruling is recorded (once, however often its task is retried) and signed as a `decided`
record. "Delete the artefact" empties a derived table the system can reach (never a root);
"delete this row" deletes the one shared row of a root; "not held" states that a subject
found nowhere is not held. A deletion is logged as progress before its record is signed, so
a retry deletes nothing twice. A standing ruling of an earlier request is cited instead of
asking again, unless it deletes: a deletion is decided by the DPO each time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from pydantic import Field

from erasure.actions.erase_rows import delete_located_rows
from erasure.actions.transaction import transaction
from erasure.audit.records import RecordKind, RecordLedger
from erasure.catalog import Catalog
from erasure.errors import ErasureError, describe_failure
from erasure.locate import Location
from erasure.model import Evidence, PlanItem
from erasure.progress import progress, save_progress
from erasure.registry.action_log import ActionLog
from erasure.rulings import NOT_STANDING, Ruling, RulingBook, RulingOption
from erasure.warehouse import Warehouse, split_name


class DeletionRefused(ErasureError):
    """A deletion the ruling asks for cannot be done as asked; the message says what to do."""


class RulingEvidence(Evidence):
    """A ruling carried out: the ruling as recorded, and what deleting it did."""

    ruling: Ruling
    deletion: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)
    subject_found: bool | None = Field(default=None, exclude_if=lambda v: v is None)


def carry_out(
    *,
    ref: str,
    subject_hash: str,
    item: PlanItem,
    ruling: Ruling,
    rulings: RulingBook,
    ledger: RecordLedger,
    actions: ActionLog,
    catalog: Catalog,
    warehouse: Warehouse,
    relocate: Callable[[], Location],
    due_on: date,
) -> RulingEvidence:
    """Record `ruling` for `item`, do what it says, and sign the `decided` record.

    A deletion only the artefact's owner can do (a table this system cannot reach, a system
    of record outside it) is *pending* until the owner confirms it (`confirm_owner_deletion`),
    due by `due_on`, the request's deadline; verify fails while it is pending."""
    recorded = _recorded(rulings, ref, ruling) or rulings.record(ruling)
    evidence = RulingEvidence(ruling=recorded)
    if recorded.option is RulingOption.OWNER_ERASES:
        owner = item.evidence.get("owner") or "the artefact's owner"
        evidence = evidence.model_copy(update={"deletion": _by_owner(owner, due_on)})
    if recorded.option in (RulingOption.DELETE_ARTEFACT, RulingOption.DELETE_ROW):
        deletion = progress(actions, ref, item).get("deletion")
        if deletion is None:
            noted = progress(actions, ref, item).get("deleting")

            def before_commit(deleting: dict[str, Any]) -> None:
                save_progress(actions, ref, item, deleting=deleting)

            deletion = (
                delete_artefact(catalog, warehouse, item, before_commit)
                if recorded.option is RulingOption.DELETE_ARTEFACT
                else delete_shared_row(warehouse, item, relocate(), before_commit)
            )
            if noted and not deletion.get("rows_deleted"):
                deletion = noted  # an earlier try deleted them and died before logging it
            if deletion.get("done_by") != "erasure":
                deletion = {**deletion, **_by_owner(str(deletion["done_by"]), due_on)}
            save_progress(actions, ref, item, deletion=deletion)
        evidence = evidence.model_copy(update={"deletion": deletion})
    if recorded.option is RulingOption.NOT_HELD:
        evidence = evidence.model_copy(update={"subject_found": False})
    if not _signed(ledger, ref, recorded):  # an attempt that died after signing signed it
        ledger.append(
            ref,
            subject_hash,
            RecordKind.DECIDED,
            {"dataset": item.dataset, "rule": item.rule, **evidence.model_dump(mode="json")},
        )
    return evidence


def _by_owner(owner: str, due_on: date) -> dict[str, Any]:
    return {"done_by": owner, "pending": True, "due_on": due_on.isoformat()}


def pending_owner_deletion(evidence: dict[str, Any]) -> dict[str, Any] | None:
    """The deletion of a carried-out ruling if it awaits its owner's confirmation."""
    deletion = evidence.get("deletion") or {}
    return deletion if deletion.get("pending") else None


def confirm_owner_deletion(
    evidence: dict[str, Any], confirmed_by: str, note: str, at: datetime
) -> dict[str, Any]:
    """The ruling's evidence with its owner's deletion confirmed: who said so, when, and how."""
    deletion = pending_owner_deletion(evidence)
    if deletion is None:
        raise DeletionRefused("no deletion of this artefact awaits its owner's confirmation")
    if not confirmed_by.strip() or not note.strip():
        raise DeletionRefused(
            "say who confirmed the deletion (--by) and how they did it (--note): the record "
            "names both"
        )
    confirmed = {
        **deletion,
        "pending": False,
        "confirmed_by": confirmed_by.strip(),
        "confirmation": note.strip(),
        "confirmed_at": at.isoformat(),
    }
    return {**evidence, "deletion": confirmed}


def _signed(ledger: RecordLedger, ref: str, ruling: Ruling) -> bool:
    """Whether the `decided` record of this very ruling is on the chain already."""
    return ruling.id is not None and any(
        r.kind is RecordKind.DECIDED and (r.body.get("ruling") or {}).get("id") == ruling.id
        for r in ledger.show(ref)
    )


def cited_standing_ruling(
    rulings: RulingBook, ref: str, item: PlanItem, today: date
) -> Ruling | None:
    """The standing ruling in force for `item`'s dataset, as this request cites it."""
    standing = rulings.standing_for(item.dataset, today)
    if standing is None or standing.option in NOT_STANDING:
        return None
    return standing.model_copy(
        update={
            "id": None,
            "request_ref": ref,
            "standing_until": None,
            "decided_at": datetime.now(UTC),
            "justification": f"standing ruling #{standing.id} of request {standing.request_ref} "
            f"(until {standing.standing_until}): {standing.justification}",
        }
    )


def _recorded(rulings: RulingBook, ref: str, ruling: Ruling) -> Ruling | None:
    """The same ruling if an earlier attempt at carrying it out already recorded it."""
    same = {"id", "decided_at"}  # a cited standing ruling is re-dated on each attempt
    for earlier in rulings.for_request(ref):
        if earlier.model_dump(exclude=same) == ruling.model_dump(exclude=same):
            return earlier
    return None


def delete_artefact(
    catalog: Catalog,
    warehouse: Warehouse,
    item: PlanItem,
    before_commit: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Empty a derived table the system can reach; its owner deletes anything else.

    `before_commit` logs what was deleted before the delete commits (see `carry_out`)."""
    ds = catalog.dataset(item.dataset)
    if ds is not None and (
        ds.holds_subject
        or any(r.dataset == ds.name for d in catalog.datasets for r in d.references)
    ):
        raise DeletionRefused(
            f"{ds.name!r} is a root table (it holds people's rows or is referenced by them): "
            "it is never deleted as a whole; rule on the subject's rows instead"
        )
    if ds is not None and ds.storage == "immutable":
        # Write-once storage (a backup, an archive) holds everyone's copies: emptying it
        # would delete other people's data too. Its owner removes the person's copy.
        return {
            "done_by": ds.owner or "the artefact's owner",
            "rows_deleted": None,
            "detail": "immutable storage holding other people's data too: never emptied by "
            "this system; its owner removes the person's copy",
        }
    if ds is None or ds.connection is None or warehouse.table(ds) is None:
        return {
            "done_by": (ds.owner if ds is not None else None) or "the artefact's owner",
            "rows_deleted": None,
            "detail": "not a table this system can reach: the owner deletes it",
        }
    schema, name = split_name(ds.name)
    table = sa.table(name, schema=schema)
    with warehouse.connect(ds) as conn:
        try:
            with transaction(conn):
                deleted = conn.execute(sa.delete(table)).rowcount
                done = {
                    "done_by": "erasure",
                    "rows_deleted": deleted,
                    "statement": f"DELETE FROM {ds.name}",
                }
                if before_commit is not None:
                    before_commit(done)
        except sa.exc.DBAPIError as exc:
            raise DeletionRefused(
                f"deleting artefact {ds.name!r} failed ({describe_failure(exc)})"
            ) from None
    return done


def delete_shared_row(
    warehouse: Warehouse,
    item: PlanItem,
    location: Location,
    before_commit: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Delete the row(s) of a root the subject points at and others share (rule 2a).

    `before_commit` logs what was deleted before the delete commits (see `carry_out`)."""
    located = location.located.get(item.dataset)
    others = item.evidence.get("other_referrers", 0)
    if located is None:
        return {"done_by": "erasure", "rows_deleted": 0, "other_referrers": others}
    return delete_located_rows(
        warehouse,
        located,
        evidence=lambda deleted: {
            "done_by": "erasure",
            "rows_deleted": deleted.rows_deleted,
            "other_referrers": others,
            "statement": deleted.statement,
        },
        refused=lambda why: DeletionRefused(
            f"deleting the shared row of {located.dataset.name!r} failed ({why}): if a foreign "
            f"key refused it, the {others} other row(s) pointing at it must be re-pointed by "
            "their owner first, or retain it under an exemption (clear dpo_decides and answer "
            "again)"
        ),
        before_commit=before_commit,
    )
