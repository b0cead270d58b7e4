"""Iceberg history the erasure reads and keeps: a column renamed since a tag is read there by
its field id, only the snapshots that held the subject expire, and the evidence logged before
the delete's commit says it is not committed yet."""

from __future__ import annotations

import pyarrow as pa
import pytest

from erasure.lakehouse import LakehouseRefused
from tests.unit.lakehouse.iceberg_support import (
    APPENDS,
    COLUMNS,
    MATCH,
    SCHEMA,
    VALUES,
    Lake,
)
from tests.unit.lakehouse.support import NEIGHBOUR, SUBJECT, assert_no_canary, match_of


def test_a_column_renamed_after_a_tag_is_read_there_by_its_field_id(lake: Lake) -> None:
    table = lake.create()
    first = table.table.metadata.snapshots[0].snapshot_id
    table.table.manage_snapshots().create_tag(first, "q3-audit").commit()
    with table.refresh().update_schema() as update:
        update.rename_column("email", "mail")
    values = {"mail": {SUBJECT}}  # the caller knows the column by its current name
    match = match_of(values)

    assert table.refs_holding(match, ["mail"]) == ["q3-audit"]
    with pytest.raises(LakehouseRefused) as refused:
        table.erase(values, match, ["mail"])

    assert refused.value.reason == "refs_hold_subject" and refused.value.names == ["q3-audit"]
    residue = table.residue(match, ["mail"], values)
    assert residue.refs == ["q3-audit"] and residue.rows_by_snapshot[str(first)] == 1
    assert sorted(residue.rows_by_snapshot.values()) == [1, 1, 2, 2]
    assert table.count(values) == 2  # nothing was done


def test_only_the_snapshots_that_held_the_subject_expire(lake: Lake) -> None:
    """Snapshots from before the subject's rows (and another branch's history) never held
    them: time travel to them stays; every snapshot that held them goes."""
    table = lake.create([[(3, NEIGHBOUR, "hi")], [(6, "zed@example.com", "z")], APPENDS[0]])
    first, second, third = (s.snapshot_id for s in table.table.metadata.snapshots)
    table.table.manage_snapshots().create_branch(second, "dev").commit()
    extra = pa.Table.from_pylist([{"id": 7, "email": "dev@example.com", "note": ""}], SCHEMA)
    table.refresh().append(extra, branch="dev")
    dev_head = table.refresh().metadata.refs["dev"].snapshot_id
    logged = []

    evidence = table.erase(VALUES, MATCH, COLUMNS, before_commit=logged.append)

    kept = table.refresh().metadata
    assert {s.snapshot_id for s in kept.snapshots} == {
        first,
        second,
        dev_head,
        kept.current_snapshot_id,
    }
    assert evidence.expiry == "holding_subject"
    assert evidence.snapshots_expired == 2  # the third append, and the delete's own
    assert evidence.snapshots_kept == 2  # the first two: no ref's head, never held them
    assert third not in {s.snapshot_id for s in kept.snapshots}
    assert table.table.scan(snapshot_id=first).to_arrow().to_pylist() == [
        {"id": 3, "email": NEIGHBOUR, "note": "hi"}
    ]
    assert evidence.refs_kept == ["dev"]
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    # The evidence logged before the delete's commit says it was not committed yet.
    assert [e.committed for e in logged] == [False] and evidence.committed
    assert_no_canary(evidence.model_dump_json(), logged[0].model_dump_json())


def test_a_tag_whose_manifests_keep_a_bound_of_theirs_is_refused(lake: Lake) -> None:
    """Another job deleted the rows and tagged that snapshot: no row of theirs is left in it,
    but its manifest of removed files keeps their address as a bound."""
    table = lake.create([[(1, "a@example.com", "x"), (2, "c@example.com", "y")], APPENDS[0]])
    by_id = {"id": {2}}
    table.delete_rows(by_id, drop_deleted_manifests=False)
    head = table.refresh().metadata.current_snapshot_id
    assert head is not None
    table.table.manage_snapshots().create_tag(head, "nightly").commit()
    match = match_of(by_id)

    assert table.refs_holding(match, ["id"]) == ["nightly"]
    with pytest.raises(LakehouseRefused) as refused:
        table.erase(by_id, match, ["id"])

    assert refused.value.names == ["nightly"] and "nightly" not in str(refused.value)
    assert table.residue(match, ["id"], by_id).refs == ["nightly"]
