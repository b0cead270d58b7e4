"""Which storage guarantees a completion record states for each kind of artefact: exactly those
its evidence shows, dated, each with its one line for the auditor."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from erasure.audit.evidence import StorageGuarantee
from erasure.catalog import DatasetSpec
from erasure.model import Action
from erasure.storage_guarantees import MEANS, Guarantee, storage_guarantees

ERASED = {
    "dataset": "crm.orders",
    "rows_before": 3,
    "rows_deleted": 3,
    "rows_after": 0,
    "statement": "DELETE FROM crm.orders WHERE crm.orders.customer_id IN (%(c)s::VARCHAR)",
    "executed_at": "2026-12-05T10:00:00Z",
    "already_done": False,
}
VACUUMED = {
    "state": "reclaimed",
    "engine": "postgresql",
    "statement": "VACUUM crm.orders",
    "at": "2026-12-05T10:00:01Z",
    "dead_tuples_left": 0,
    "snapshots_checked": True,
    "note": "...",
}
SCHEDULED = {
    "state": "scheduled",
    "engine": "postgresql",
    "statement": "VACUUM crm.orders",
    "by": "2026-12-06",
    "reason": "not_permitted",
    "note": "...",
}
SECURE_DELETE = {
    "state": "reclaimed",
    "engine": "sqlite",
    "statement": "PRAGMA secure_delete = ON",
    "at": "2026-12-05T10:00:01Z",
    "note": "...",
}
ICEBERG = {
    "format": "iceberg",
    "snapshots_expired": 4,
    "files_removed": {"data": 3, "manifests": 2},
    "effective_at": "2026-12-05T10:02:00+00:00",
    "refs_kept": ["audit-2026"],
}
SHREDDED = {
    "dataset": "archive.customer_events",
    "keys": [{"key_id": "transit:erasure-transit/keys/subject-" + "a" * 64}],
    "keys_shredded": 1,
    "identifiers_checked": 2,
    "snapshot_expiry_date": "2027-01-04",
    "shredded_at": "2026-12-05T10:03:00Z",
    "last_copy_expires": "2033-12-03",
    "retention_days": 2555,
}
K_OK = {
    "at_plan": {},
    "at_act": {
        "k": 10,
        "min_group_size": 59,
        "groups": 12,
        "groups_below_k": 0,
        "quasi_identifiers": ["region", "month"],
        "count_column": "n_customers",
        "table_version": "sha256:b9380454145edabc",
        "query": "SELECT ...",
    },
}


def ruling(option: str, **more: Any) -> dict[str, Any]:
    return {
        "ruling": {
            "option": option,
            "decided_at": "2026-11-29T10:00:00Z",
            "exemption": None,
            "scheduled_by": None,
            **more,
        }
    }


def spec(**fields: Any) -> DatasetSpec:
    return DatasetSpec.model_validate(
        {"namespace": "warehouse", "name": "crm.orders", "kind": "table", **fields}
    )


def named(found: list[StorageGuarantee]) -> list[tuple[str, date | None]]:
    return [(g.guarantee, g.since or g.until or g.due) for g in found]


def test_every_guarantee_states_what_it_means_in_one_line() -> None:
    assert set(MEANS) == set(Guarantee)
    for means in MEANS.values():
        assert means and "\n" not in means and means.endswith(".")


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (VACUUMED, [("rows_deleted", date(2026, 12, 5)), ("space_reclaimed", date(2026, 12, 5))]),
        (SECURE_DELETE, [("rows_deleted", date(2026, 12, 5)), ("space_reclaimed", date(2026, 12, 5))]),  # noqa: E501
        (SCHEDULED, [("rows_deleted", date(2026, 12, 5)), ("space_reclaim_scheduled", date(2026, 12, 6))]),  # noqa: E501
        ({"state": "not_reclaimed", "engine": "sqlite", "reason": "secure_delete_off", "note": "."},
         [("rows_deleted", date(2026, 12, 5))]),
        ({"state": "not_applicable", "engine": "postgresql", "reason": "nothing_deleted", "note": "."},  # noqa: E501
         [("rows_deleted", date(2026, 12, 5))]),
        (None, [("rows_deleted", date(2026, 12, 5))]),  # evidence from before the space step
    ],
    ids=["vacuumed", "secure-delete", "scheduled", "secure-delete-off", "nothing", "old"],
)  # fmt: skip
def test_an_erased_table_states_its_rows_and_what_became_of_their_space(
    space: dict[str, Any] | None, expected: list[tuple[str, date]]
) -> None:
    evidence = {**ERASED, "space": space} if space is not None else ERASED
    found = storage_guarantees(Action.ERASE_ROWS, "table", spec(), evidence)
    assert named(found) == expected
    if space is VACUUMED:
        assert "VACUUM ran after the delete committed" in found[1].means
        assert found[1].detail["statement"] == "VACUUM crm.orders"
    if space is SECURE_DELETE:
        assert "secure_delete overwrote" in found[1].means
    if space is SCHEDULED:
        assert found[1].detail["reason"] == "not_permitted"


def test_a_vacuum_that_could_not_see_every_session_says_so() -> None:
    evidence = {**ERASED, "space": {**VACUUMED, "snapshots_checked": False}}
    [_, space] = storage_guarantees(Action.ERASE_ROWS, "table", spec(), evidence)
    assert "was not seen" in space.means


def test_a_lakehouse_table_states_the_snapshots_it_expired() -> None:
    lakehouse = {**ERASED, "history": ICEBERG, "space": {"state": "not_applicable",
                 "engine": "none", "reason": "lakehouse", "note": "."}}  # fmt: skip
    found = storage_guarantees(Action.ERASE_ROWS, "table", None, lakehouse)
    assert named(found) == [
        ("rows_deleted", date(2026, 12, 5)),
        ("snapshots_expired", date(2026, 12, 5)),
    ]
    assert found[1].detail == {
        "format": "iceberg",
        "snapshots_expired": 4,
        "files_removed": {"data": 3, "manifests": 2},
        "refs_kept": ["audit-2026"],
    }
    rebuilt = storage_guarantees(
        Action.REBUILD, "table", None,
        {"rebuilt_at": "2026-12-05T11:00:00Z", "method": "sql", "history": {**ICEBERG,
         "format": "delta", "refs_kept": []}},
    )  # fmt: skip
    assert named(rebuilt) == [
        ("rebuilt", date(2026, 12, 5)),
        ("snapshots_expired", date(2026, 12, 5)),
    ]
    assert rebuilt[1].detail["format"] == "delta"


def test_a_shredded_artefact_states_its_key_and_the_copies_kept_until_they_expire() -> None:
    found = storage_guarantees(
        Action.CRYPTO_SHRED, "file", spec(storage="immutable", encryption="per_subject"), SHREDDED
    )
    assert named(found) == [
        ("key_destroyed", date(2026, 12, 5)),
        ("backup_until", date(2027, 1, 4)),
        ("backup_until", date(2033, 12, 3)),
    ]
    assert found[0].detail == {"keys_destroyed": 1}
    assert found[1].detail["copy"] == "Vault snapshots that still hold the destroyed key"
    assert "unreadable" in found[2].detail["copy"]


def test_a_rebuilt_artefact_and_an_anonymous_aggregate() -> None:
    rebuilt = storage_guarantees(
        Action.REBUILD, "report", None,
        {"rebuilt_at": "2026-12-05T11:00:00Z", "method": "dag", "run_id": "manual__x",
         "rows_after": 3},
    )  # fmt: skip
    assert named(rebuilt) == [("rebuilt", date(2026, 12, 5))]
    assert rebuilt[0].detail == {"method": "dag", "run_id": "manual__x", "rows_after": 3}
    [aggregate] = storage_guarantees(Action.AGGREGATE_OK, "table", None, K_OK)
    assert aggregate.guarantee == "anonymous_aggregate"
    assert aggregate.detail["k"] == 10 and aggregate.detail["min_group_size"] == 59
    below = {**K_OK, "at_act": {**K_OK["at_act"], "min_group_size": 3, "groups_below_k": 2}}
    assert storage_guarantees(Action.AGGREGATE_OK, "table", None, below) == []


def test_escalations_state_what_their_ruling_left() -> None:
    def ruled(evidence: dict[str, Any], kind: str = "table", **fields: Any) -> Any:
        return named(storage_guarantees(Action.ESCALATE, kind, spec(**fields), evidence))

    kept = date(2026, 11, 29)
    assert ruled(ruling("retain_exemption", exemption="e")) == [("kept_under_ruling", kept)]
    assert ruled(ruling("non_personal")) == [("kept_under_ruling", kept)]
    [retrain] = storage_guarantees(
        Action.ESCALATE, "embedding_index", None,
        ruling("rebuild_by_date", scheduled_by="2026-12-15"),
    )  # fmt: skip
    assert (retrain.since, retrain.until) == (kept, date(2026, 12, 15))
    assert retrain.detail == {"option": "rebuild_by_date"}
    assert ruled(ruling("not_held")) == []
    # Rule 4: an immutable backup retained until its retention ends.
    backup = {**ruling("retain_exemption", exemption="b"), "retention_expiry_date": "2027-03-04"}
    found = storage_guarantees(Action.ESCALATE, "backup", spec(storage="immutable"), backup)
    assert named(found) == [("kept_under_ruling", kept), ("backup_until", date(2027, 3, 4))]
    assert found[1].detail == {"copy": "the immutable copy (backup)"}


def test_a_deletion_the_dpo_ruled_is_stated_with_its_space_or_its_owners_word() -> None:
    deleted = {
        **ruling("delete_artefact"),
        "deletion": {"done_by": "erasure", "rows_deleted": 81,
                     "statement": "DELETE FROM agg.customers_by_postcode", "space": VACUUMED},
    }  # fmt: skip
    found = storage_guarantees(Action.ESCALATE, "table", None, deleted)
    assert [g.guarantee for g in found] == ["rows_deleted", "space_reclaimed"]
    assert found[0].detail["rows_deleted"] == 81
    by_owner = {
        **ruling("owner_erases"),
        "deletion": {"done_by": "crm-team", "pending": False, "confirmed_by": "Sam (CRM)",
                     "confirmation": "deleted in Salesforce", "confirmed_at": "2026-12-01T09:00:00Z"},  # noqa: E501
    }  # fmt: skip
    [owner] = storage_guarantees(Action.ESCALATE, "table", None, by_owner)
    assert owner.guarantee == "rows_deleted" and "confirmed it" in owner.means
    assert owner.detail == {"done_by": "crm-team", "confirmed_by": "Sam (CRM)"}
    pending = {**by_owner, "deletion": {"done_by": "crm-team", "pending": True}}
    assert storage_guarantees(Action.ESCALATE, "table", None, pending) == []


def test_nothing_is_claimed_for_an_action_that_did_not_finish() -> None:
    assert storage_guarantees(Action.ERASE_ROWS, "table", None, {"rows_deleted": 1}) == []
    assert storage_guarantees(Action.ERASE_ROWS, "table", None, {"rows_after": 2}) == []
    assert storage_guarantees(Action.REBUILD, "table", None, {"method": "sql"}) == []
    assert storage_guarantees(Action.CRYPTO_SHRED, "file", None, {"keys": []}) == []
    assert storage_guarantees(Action.ESCALATE, "table", None, {"gap": "uncatalogued"}) == []
