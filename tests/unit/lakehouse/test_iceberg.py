"""Iceberg erasure on pyiceberg's SQL catalog, over SQLite and over Postgres, with a local
warehouse: the rows, every snapshot and every file that held them gone, proven by `residue`
and by a file search written apart from it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StaticTable
from pyiceberg.transforms import TruncateTransform
from pyiceberg.types import LongType, NestedField, StringType

from erasure.lakehouse import HistoryErasure, LakehouseError, open_table
from erasure.lakehouse.config import load_iceberg_catalog
from erasure.lakehouse.files import UNNAMED_MIN_AGE
from erasure.lakehouse.iceberg import IcebergTable
from tests.unit.lakehouse.iceberg_support import (
    APPENDS,
    COLUMNS,
    MATCH,
    SCHEMA,
    VALUES,
    Lake,
    append_as_spark,
    delete_as_spark,
    everyone_else,
    rows,
)
from tests.unit.lakehouse.support import (
    CANARY,
    NEIGHBOUR,
    SUBJECT,
    assert_no_canary,
    files_holding,
    match_of,
)


def test_erase_leaves_no_row_snapshot_or_file_holding_the_subject(lake: Lake) -> None:
    table = lake.create()
    old_snapshots = [s.snapshot_id for s in table.table.metadata.snapshots]
    old_metadata = table.table.metadata_location
    assert table.count(VALUES) == 2
    assert files_holding(lake.location)  # data files and manifests hold them before
    logged = []

    evidence = table.erase(VALUES, MATCH, COLUMNS, before_commit=logged.append)

    assert rows(table) == everyone_else()  # exactly the subject's rows went; the neighbour stays
    assert evidence.rows_before == evidence.rows_deleted == 2
    assert evidence.rows_after == 0 and evidence.copy_on_write and not evidence.already_done
    assert evidence.snapshots_before == 4 and evidence.snapshots_after == 1
    assert evidence.snapshots_expired >= 4  # the four appends, and the delete's own
    assert evidence.files_removed["data"] == 2 and evidence.files_removed["manifest_list"] >= 4
    assert logged and logged[0].rows_before == 2 and logged[0].snapshots_expired == 0
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert residue.clean, residue
    assert residue.snapshots_checked == 1 and residue.files_checked > 0
    assert files_holding(lake.location) == []  # a search apart from residue's agrees
    for snapshot_id in old_snapshots:  # time travel to any older snapshot fails
        with pytest.raises(ValueError, match="Snapshot not found"):
            table.table.scan(snapshot_id=snapshot_id).to_arrow()
    # Reading an old metadata file directly finds its files gone.
    with pytest.raises(FileNotFoundError):
        StaticTable.from_metadata(old_metadata).scan().to_arrow()
    assert_no_canary(evidence.model_dump_json(), logged[0].model_dump_json(), residue)


def test_each_step_of_the_erasure_is_needed(lake: Lake) -> None:
    table = lake.create()
    rounded_up = SUBJECT[:15] + chr(ord(SUBJECT[15]) + 1)  # see the next test

    table.table.delete(EqualTo("email", SUBJECT))  # pyiceberg's delete alone
    after_delete = table.residue(MATCH, COLUMNS, VALUES)
    assert table.count(VALUES) == 0
    assert sorted(after_delete.rows_by_snapshot.values()) == [1, 1, 2, 2]  # history serves them

    assert table.expire_snapshots() >= 4
    after_expiry = table.residue(MATCH, COLUMNS, VALUES)
    assert after_expiry.rows_by_snapshot == {}
    # Expired, but the data files and manifests of the expired snapshots are on disk.
    assert {f.split("/")[0] for f in after_expiry.files_holding} == {"data", "metadata"}

    table.remove_unreferenced_files()
    after_removal = table.residue(MATCH, COLUMNS, VALUES)
    # Left: the current snapshot's manifest listing the removed files with their bounds.
    assert after_removal.files_holding == files_holding(lake.location, rounded_up)
    assert len(after_removal.files_holding) == 1

    assert table.drop_deleted_manifests()  # the manifest-only snapshot drops it ...
    table.expire_snapshots()
    table.remove_unreferenced_files()  # ... and once the delete's snapshot expires, it goes
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(lake.location) == []


def test_a_delete_without_dropping_its_manifests_keeps_the_subject_in_a_bound(lake: Lake) -> None:
    table = lake.create()
    table.delete_rows(VALUES, drop_deleted_manifests=False)
    table.expire_snapshots()
    table.remove_unreferenced_files()

    residue = table.residue(MATCH, COLUMNS, VALUES)

    assert residue.rows_by_snapshot == {} and residue.snapshots_checked == 1
    # The current snapshot's manifest of removed files keeps their upper bound of `email`:
    # the subject's address cut to 16 characters and rounded up ("...zqcanary7" -> "8").
    rounded_up = SUBJECT[:15] + chr(ord(SUBJECT[15]) + 1)
    assert residue.files_holding == files_holding(lake.location, rounded_up)
    assert residue.files_holding[0].endswith(".avro")


def test_another_engines_delete_keeping_the_removed_file_beside_live_ones_leaves_no_bound(
    lake: Lake,
) -> None:
    """Spark's and Trino's deletes write a manifest again with the removed file as a DELETED
    entry beside the files kept: the current snapshot's manifest keeps its bounds, the
    subject's value cut to 16 characters in the case it was stored in, with no row of theirs
    left to find a stored form by."""
    stored = "O'Hara." + CANARY.upper() + "7f3a@Example.com"  # SUBJECT, stored in another case
    table = lake.create([[(1, "a@example.com", "x"), (2, NEIGHBOUR, "y")], [(3, stored, "z")]])
    files = table.table.inspect.files().to_pylist()
    delete_as_spark(table.table, {f["file_path"] for f in files if f["record_count"] == 1})
    [mixed] = table.refresh().inspect.manifests().to_pylist()  # as Spark leaves it:
    assert mixed["existing_data_files_count"] == mixed["deleted_data_files_count"] == 1

    def match(column: str, value: object) -> bool:  # as an email's matcher: any case
        return column == "email" and str(value).lower() == SUBJECT

    searched = {"email": {SUBJECT}}  # the identity's canonical form: all verify has
    assert table.count({"email": {stored}}) == 0  # history only: no value of theirs now
    before = table.residue(match, COLUMNS, searched)
    assert any(f.endswith("-m0.avro") for f in before.files_holding)  # the bound, found

    erased = table.erase({}, match, COLUMNS, search=searched)

    assert erased.snapshots_expired >= 1 and not erased.already_done
    assert rows(table) == [(1, "a@example.com", "x"), (2, NEIGHBOUR, "y")]
    head = table.refresh().current_snapshot()
    assert head is not None
    for manifest in head.manifests(table.table.io):  # no removed file listed any more
        entries = manifest.fetch_manifest_entry(table.table.io, discard_deleted=False)
        assert ManifestEntryStatus.DELETED not in {e.status for e in entries}
    assert table.residue(match, COLUMNS, searched).clean
    assert files_holding(lake.location, CANARY.upper()) == []  # in no bound, name or summary
    assert table.erase({}, match, COLUMNS, search=searched).already_done


@pytest.mark.parametrize("width", [16, 64])  # her address cut short, or whole
def test_a_partition_truncating_her_address_goes_with_her_history(lake: Lake, width: int) -> None:
    """A table partitioned by truncate[W](email) keeps her address cut to W characters in
    the partition tuple of manifests, in her data file's folder name and in the snapshot
    summaries of old metadata files; another writer deleted her row, so the erasure finds
    her in the history alone, by the identity's canonical form."""
    stored = "O'Hara." + CANARY.upper() + "7f3a@Example.com"  # SUBJECT, stored in another case
    catalog = load_iceberg_catalog(lake.config, "lake", lake.base)
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "email", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, TruncateTransform(width), "email_trunc"))
    created = catalog.create_table(
        "shop.customers",
        schema,
        partition_spec=spec,
        properties={"write.summary.partition-limit": "100"},
    )
    append_as_spark(created, [{"id": 1, "email": NEIGHBOUR}], (NEIGHBOUR[:width],))
    append_as_spark(created, [{"id": 2, "email": stored}], (stored[:width],))
    created.delete(EqualTo("id", 2))  # another writer's delete: her file dropped, not expired
    table = open_table(lake.config, "lake", "shop.customers", lake.base)

    def match(column: str, value: object) -> bool:  # as an email's matcher: any case
        return column == "email" and str(value).lower() == SUBJECT

    searched = {"email": {SUBJECT}}
    assert not table.residue(match, COLUMNS, searched).clean

    table.erase({}, match, COLUMNS, search=searched)

    assert table.residue(match, COLUMNS, searched).clean
    assert files_holding(lake.location, CANARY.upper()) == []  # in no bound, name or summary
    assert not [p for p in lake.location.rglob("*") if CANARY in p.name.lower()]  # folders
    assert table.count({"email": {NEIGHBOUR}}) == 1


def test_a_neighbour_sharing_her_first_16_characters_stays_and_verify_passes(lake: Lake) -> None:
    """Iceberg cuts string bounds to 16 characters, so a neighbour's address beginning as hers
    does gives a live file her bounds too: a value cut short that another person still in the
    table begins with names nobody in particular. A removed file's entry still counts."""
    neighbour = SUBJECT[:16] + "9@example.org"
    table = lake.create([[(1, neighbour, "stays")], [(2, SUBJECT, "goes")]])

    table.delete_rows(VALUES, drop_deleted_manifests=False)  # her removed file's entry kept
    table.expire_snapshots()
    table.remove_unreferenced_files()
    kept = table.residue(MATCH, COLUMNS, VALUES)
    assert kept.rows_by_snapshot == {} and len(kept.files_holding) == 1  # that entry's bounds

    table.erase(VALUES, MATCH, COLUMNS)

    assert table.residue(MATCH, COLUMNS, VALUES).clean  # the neighbour's bounds are no proof
    assert rows(table) == [(1, neighbour, "stays")]
    assert files_holding(lake.location, SUBJECT[16:]) == []  # nothing past the shared part


def test_a_neighbours_bound_excuses_only_a_live_file_of_the_current_snapshot(lake: Lake) -> None:
    """Her file's manifest left by a failed commit (named by no metadata, young: the erasure
    leaves it) keeps her bounds in her own case: the neighbour's address, in another case and
    in a file of its own, excuses none of it. And a tag on the neighbour's snapshot alone
    holds nothing of hers: the erasure does not refuse over it."""
    stored = SUBJECT[:16].upper() + SUBJECT[16:]
    neighbour = SUBJECT[:16] + "9@example.org"
    table = lake.create([[(1, neighbour, "stays")]])
    head = table.table.current_snapshot()
    assert head is not None
    table.table.manage_snapshots().create_tag(head.snapshot_id, "before-her").commit()
    table.table.append(pa.Table.from_pylist([{"id": 2, "email": stored, "note": "g"}], SCHEMA))
    current = table.refresh().current_snapshot()
    assert current is not None
    [added] = [
        m for m in current.manifests(table.table.io) if m.added_snapshot_id == current.snapshot_id
    ]
    orphan = lake.location / "metadata" / "deadbeef-0000-4000-8000-000000000000-m0.avro"
    orphan.write_bytes(Path(added.manifest_path.removeprefix("file://")).read_bytes())

    def match(column: str, value: object) -> bool:
        return column == "email" and str(value).lower() == SUBJECT

    searched = {"email": {SUBJECT}}
    erased = table.erase({"email": {stored}}, match, COLUMNS, search=searched)

    assert erased.files_unnamed_left == 1 and orphan.exists()  # perhaps a writer's, in flight
    residue = table.residue(match, COLUMNS, searched)
    assert residue.files_holding == ["metadata/" + orphan.name] and not residue.clean
    assert rows(table) == [(1, neighbour, "stays")]


def test_pyiceberg_still_has_no_manifest_rewrite_of_its_own(lake: Lake) -> None:
    """The erasure writes the manifests kept without their removed files through pyiceberg's
    private fast append (erasure.lakehouse.iceberg._LiveEntriesOnly). Once pyiceberg has a
    manifest rewrite (apache/iceberg-python#3629), use it instead."""
    assert not hasattr(lake.create().table.maintenance, "rewrite_manifests")


def test_a_file_no_metadata_named_is_left_until_it_is_old(lake: Lake) -> None:
    """A writer's files not yet committed (a streaming job between checkpoints) are named by
    no metadata: removing one would break the writer's commit, so it is left (and reported)
    until older than UNNAMED_MIN_AGE."""
    table = lake.create()
    holding = lake.location / "data" / "uncommitted-holding.parquet"
    other = lake.location / "data" / "uncommitted-other.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"id": 9, "email": SUBJECT, "note": "n"}], SCHEMA), holding
    )
    pq.write_table(
        pa.Table.from_pylist([{"id": 10, "email": NEIGHBOUR, "note": "n"}], SCHEMA), other
    )

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert holding.exists() and other.exists()  # the writer may still commit them
    assert evidence.files_unnamed_left == 1 and evidence.files_removed["data"] == 2
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert residue.files_holding == ["data/uncommitted-holding.parquet"] and not residue.clean

    aged = time.time() - UNNAMED_MIN_AGE.total_seconds() - 60
    os.utime(holding, (aged, aged))
    again = table.erase(VALUES, MATCH, COLUMNS)  # a later retry, once it is old

    assert not holding.exists() and other.exists()  # no blind sweep of what is not theirs
    assert again.files_removed == {"data": 1} and again.files_unnamed_left == 0
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def test_a_number_in_a_manifest_bound_is_found_by_its_type(lake: Lake) -> None:
    table = lake.create()
    by_id = {"id": {4}}
    table.delete_rows(by_id, drop_deleted_manifests=False)
    table.expire_snapshots()
    table.remove_unreferenced_files()

    # The removed file's lower bound of `id` is 4, as 8 little-endian bytes: decoded by the
    # column's type and matched, where a search for the text "4" would find every file.
    residue = table.residue(match_of(by_id), ["id"], by_id)

    assert residue.rows_by_snapshot == {} and len(residue.files_holding) == 1
    assert residue.files_holding[0].endswith(".avro")
    table.erase(by_id, match_of(by_id), ["id"])
    assert table.residue(match_of(by_id), ["id"], by_id).clean


def test_a_partition_named_after_the_subject_goes_with_its_rows(lake: Lake) -> None:
    catalog = load_iceberg_catalog(lake.config, "lake", lake.base)
    catalog.create_namespace("shop")
    table = catalog.create_table("shop.customers", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_identity("email")
    for batch in APPENDS:
        table.append(pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in batch]))
    opened = open_table(lake.config, "lake", "shop.customers", lake.base)

    evidence = opened.erase(VALUES, MATCH, COLUMNS)

    assert evidence.files_removed["directory"] == 1
    partitions = sorted(p.name for p in (lake.location / "data").iterdir())
    assert partitions and not [p for p in partitions if "hara" in p]
    residue = opened.residue(MATCH, COLUMNS, VALUES)
    assert residue.clean, residue


def test_a_delete_refused_as_another_writer_changed_its_files_leaves_none_and_retries_clean(
    lake: Lake,
) -> None:
    """Another writer deletes from the subject's file while the erasure's delete is staged:
    pyiceberg finds the conflict and refuses. The erasure says so without a value, leaves
    none of its staged files, and the retry completes with nothing left."""
    table = lake.create()
    writer = load_iceberg_catalog(lake.config, "lake", lake.base).load_table("shop.customers")
    history_before = files_holding(lake.location)

    def another_writer_commits(_: object) -> None:
        writer.refresh().delete(EqualTo("email", "a@example.com"))  # in the subject's file

    with pytest.raises(LakehouseError, match="another writer committed") as refused:
        table.erase(VALUES, MATCH, COLUMNS, before_commit=another_writer_commits)
    assert_no_canary(str(refused.value))
    assert table.count(VALUES) == 2  # nothing of the erasure committed
    current = writer.refresh()
    named = {
        *current.inspect.all_files().column("file_path").to_pylist(),
        *current.inspect.all_manifests().column("path").to_pylist(),
    }
    theirs = {p for p in files_holding(lake.location) if any(n.endswith(p) for n in named)}
    assert set(files_holding(lake.location)) <= {*history_before, *theirs}  # none staged left

    table.erase(VALUES, MATCH, COLUMNS)

    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(lake.location) == []


def test_a_try_killed_at_its_commit_is_finished_by_the_retry_with_its_staged_files_removed(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker dies once its delete is staged and logged (SIGKILL: no cleanup runs). The
    staged manifests keep the removed files' bounds, the subject's email, and no metadata
    names them: a retry without the log leaves them (a writer's, perhaps), one with the
    names the dead try logged removes them."""
    table = lake.create()
    logged: list[HistoryErasure] = []

    def dies(evidence: HistoryErasure) -> None:
        logged.append(evidence)
        raise KeyboardInterrupt  # as far as the table is concerned, the process is gone

    monkeypatch.setattr(IcebergTable, "_remove_staged", lambda *_: None)  # a kill cleans nothing
    with pytest.raises(KeyboardInterrupt):
        table.erase(VALUES, MATCH, COLUMNS, before_commit=dies)
    monkeypatch.undo()
    staged = logged[0].staged
    assert staged and not any("/" in name for name in staged)
    assert_no_canary(logged[0].model_dump_json())

    left = table.erase(VALUES, MATCH, COLUMNS)  # a retry that did not read the log
    assert left.files_unnamed_left > 0 and not table.residue(MATCH, COLUMNS, VALUES).clean

    finished = table.erase(VALUES, MATCH, COLUMNS, staged_before=staged)

    assert finished.files_unnamed_left == 0
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(lake.location) == []
