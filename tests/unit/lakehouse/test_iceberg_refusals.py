"""Iceberg erasure where a person decides: a branch or tag holding the subject, and delete
files masking rows still in data files, are refused and named; a tag without them is kept;
a table asking for merge-on-read deletes is still erased copy-on-write."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFileContent, ManifestContent

from erasure.lakehouse import LakehouseRefused
from tests.unit.lakehouse.iceberg_support import (
    APPENDS,
    COLUMNS,
    MATCH,
    VALUES,
    Lake,
    everyone_else,
    mask_row,
    rows,
)
from tests.unit.lakehouse.support import NEIGHBOUR, assert_no_canary


def test_a_tag_holding_the_subject_is_refused_and_named(lake: Lake) -> None:
    table = lake.create()
    first = table.table.metadata.snapshots[0].snapshot_id
    table.table.manage_snapshots().create_tag(first, "audit-2024").commit()
    snapshots = len(table.refresh().metadata.snapshots)

    assert table.refs_holding(MATCH, COLUMNS) == ["audit-2024"]
    with pytest.raises(LakehouseRefused) as refused:
        table.erase(VALUES, MATCH, COLUMNS)

    assert refused.value.reason == "refs_hold_subject" and refused.value.names == ["audit-2024"]
    assert "audit-2024" not in str(refused.value)  # a tag may be named after the person
    assert_no_canary(refused.value)
    assert table.count(VALUES) == 2  # nothing was done
    assert len(table.refresh().metadata.snapshots) == snapshots
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert residue.refs == ["audit-2024"] and not residue.clean


def test_a_tag_without_the_subject_is_kept(lake: Lake) -> None:
    appends = [[(3, NEIGHBOUR, "hi")], *APPENDS]
    table = lake.create(appends)
    first = table.table.metadata.snapshots[0].snapshot_id
    table.table.manage_snapshots().create_tag(first, "before-launch").commit()

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.refs_kept == ["before-launch"]
    kept = table.refresh().metadata
    assert kept.refs["before-launch"].snapshot_id == first
    assert {s.snapshot_id for s in kept.snapshots} == {first, kept.current_snapshot_id}
    assert table.table.scan(snapshot_id=first).to_arrow().to_pylist() == [
        {"id": 3, "email": NEIGHBOUR, "note": "hi"}
    ]
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def test_merge_on_read_tables_are_still_erased_copy_on_write(lake: Lake) -> None:
    table = lake.create(**{"write.delete.mode": "merge-on-read"})

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.delete_mode == "merge-on-read" and evidence.copy_on_write
    current = table.refresh()
    snapshot = current.current_snapshot()
    assert snapshot is not None
    for manifest in snapshot.manifests(current.io):
        assert manifest.content == ManifestContent.DATA
        for entry in manifest.fetch_manifest_entry(current.io, discard_deleted=False):
            assert entry.data_file.content == DataFileContent.DATA
    assert all(not task.delete_files for task in current.scan().plan_files())
    assert rows(table) == everyone_else()
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def test_delete_files_masking_rows_are_refused(lake: Lake) -> None:
    """Another engine deleted the subject's row merge-on-read: hidden from reads, still in the
    data file, which a copy-on-write delete of the rows it can see would never rewrite."""
    table = lake.create()
    files = table.table.inspect.files().to_pylist()
    first = next(
        f["file_path"]
        for f in files
        if f["readable_metrics"]["email"]["lower_bound"] == "a@example.com"
    )
    mask_row(table.refresh(), first, position=1)  # the first file's second row: theirs
    assert table.count(VALUES) == 1  # only the third file's row is visible

    with pytest.raises(LakehouseRefused) as refused:
        table.erase(VALUES, MATCH, COLUMNS)

    assert refused.value.reason == "delete_files" and "1 delete file" in str(refused.value)
    assert table.count(VALUES) == 1  # nothing was done
    # The masked row is in a data file the current snapshot still reads.
    assert any(f.startswith("data/") for f in table.residue(MATCH, COLUMNS, VALUES).files_holding)
