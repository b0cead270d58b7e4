"""Delta erasure through delta-rs on local tables: the rows, every version, log entry,
checkpoint and change-data file that held them gone, proven by `residue` and by a file search
written apart from it."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from erasure.lakehouse import (
    DeltaConfig,
    DeltaLakeTable,
    LakehouseError,
    LakehouseRefused,
    open_table,
)
from tests.unit.lakehouse.support import (
    HOSTILE,
    NEAR_MISSES,
    NEIGHBOUR,
    SUBJECT,
    assert_no_canary,
    files_holding,
    match_of,
)

SCHEMA = pa.schema([("id", pa.int64()), ("email", pa.string()), ("phone", pa.string())])
PHONE = "+44 7700 900123"
# Three commits, three files: the subject in the first (by email) and the second (by email on
# one row, by phone on another), among other people.
COMMITS = [
    [(1, "a@example.com", "+44 1"), (2, SUBJECT, "+44 2")],
    [(3, NEIGHBOUR, "+44 3"), (4, SUBJECT, PHONE), (5, "b@example.com", PHONE)],
    [(6, "zed@example.com", "+44 6")],
]
VALUES = {"email": {SUBJECT}, "phone": {PHONE}}
MATCH = match_of(VALUES)
COLUMNS = ["email", "phone"]
CDF = {"delta.enableChangeDataFeed": "true"}


def write(path: Path, commits: list[list[tuple[Any, ...]]], **configuration: str) -> None:
    for i, batch in enumerate(commits):
        records = [dict(zip(SCHEMA.names, r, strict=True)) for r in batch]
        data = pa.Table.from_pylist(records, SCHEMA)
        write_deltalake(
            str(path), data, mode="append", configuration=configuration if i == 0 else None
        )


def create(
    tmp_path: Path, commits: list[list[tuple[Any, ...]]] = COMMITS, **configuration: str
) -> tuple[DeltaLakeTable, Path]:
    path = tmp_path / "lake" / "crm" / "customers"
    write(path, commits, **configuration)
    table = open_table(DeltaConfig(root="lake"), "lake", "crm/customers", tmp_path)
    assert isinstance(table, DeltaLakeTable)
    return table, path


def rows(path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def everyone_else(commits: list[list[tuple[Any, ...]]] = COMMITS) -> list[tuple[Any, ...]]:
    return sorted(r for batch in commits for r in batch if r[1] != SUBJECT and r[2] != PHONE)


def test_erase_leaves_no_row_version_or_file_holding_the_subject(tmp_path: Path) -> None:
    table, path = create(tmp_path, **CDF)
    assert table.count(VALUES) == 3
    logged = []

    evidence = table.erase(VALUES, MATCH, COLUMNS, before_commit=logged.append)

    assert rows(path) == everyone_else()  # the neighbour (same domain) stays
    assert evidence.rows_before == evidence.rows_deleted == 3 and evidence.rows_after == 0
    assert evidence.snapshots_before == 3 and evidence.snapshots_after == 1
    assert evidence.snapshots_expired >= 5  # three writes, the delete, the vacuum's start
    assert evidence.files_removed["data"] == 2 and evidence.files_removed["change_data"] == 1
    assert evidence.files_removed["log"] >= 5 and not evidence.already_done
    assert logged and logged[0].rows_before == 3 and logged[0].files_removed == {}
    assert not logged[0].committed and evidence.committed  # logged before the commit
    assert evidence.expiry == "all_older"  # a version goes only with the log before it
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert residue.clean, residue
    assert files_holding(path) == [] and files_holding(path, PHONE) == []
    for version in range(evidence.snapshots_before):  # older versions cannot be loaded
        with pytest.raises(Exception, match=r"log segment|version|not found|No files"):
            DeltaTable(str(path), version=version)
    with pytest.raises(Exception):  # noqa: B017 - any refusal: the change feed is gone too
        DeltaTable(str(path)).load_cdf(starting_version=0).read_all()
    # The table is still a table: readable and writable at its current version.
    write(path, [[(7, "new@example.com", "+44 7")]])
    assert len(rows(path)) == len(everyone_else()) + 1
    assert_no_canary(evidence.model_dump_json(), logged[0].model_dump_json(), residue)


def test_each_step_of_the_erasure_is_needed(tmp_path: Path) -> None:
    table, path = create(tmp_path, **CDF)

    DeltaTable(str(path)).delete("id IN (2, 4, 5)")  # a delete alone: older versions serve them
    after_delete = table.residue(MATCH, COLUMNS, VALUES)
    assert table.count(VALUES) == 0
    assert sorted(after_delete.rows_by_snapshot.values()) == [1, 3, 3]

    removed = table.vacuum()  # the removed files go; the old versions' logs name them still
    assert removed.count("data") == 2
    after_vacuum = table.residue(MATCH, COLUMNS, VALUES)
    assert after_vacuum.rows_by_snapshot == {} and after_vacuum.snapshots_unreadable
    # The first commits' `add.stats` hold the subject's email as a min or max; delta-rs's
    # vacuum leaves the change data file holding the deleted rows.
    assert "_delta_log/00000000000000000000.json" in after_vacuum.files_holding
    assert any(f.startswith("_change_data/") for f in after_vacuum.files_holding)

    assert table.checkpoint()
    assert table.residue(MATCH, COLUMNS, VALUES).files_holding == after_vacuum.files_holding

    table.remove_log_before_checkpoint()
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(path) == []


def test_a_retry_after_a_crash_between_delete_and_vacuum_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, path = create(tmp_path, **CDF)
    real = DeltaLakeTable.vacuum
    calls = []

    def crash_once(self: DeltaLakeTable) -> list[str]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("worker lost")
        return real(self)

    monkeypatch.setattr(DeltaLakeTable, "vacuum", crash_once)
    with pytest.raises(RuntimeError):
        table.erase(VALUES, MATCH, COLUMNS)
    assert table.count(VALUES) == 0 and not table.residue(MATCH, COLUMNS, VALUES).clean

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.rows_deleted == 0 and evidence.files_removed["data"] == 2
    assert not evidence.already_done
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(path) == []


def test_a_retry_after_a_crash_before_the_log_went_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, _ = create(tmp_path, **CDF)

    def crash(self: DeltaLakeTable) -> list[str]:
        raise RuntimeError("worker lost")

    with monkeypatch.context() as patched:
        patched.setattr(DeltaLakeTable, "remove_log_before_checkpoint", crash)
        with pytest.raises(RuntimeError):
            table.erase(VALUES, MATCH, COLUMNS)

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.files_removed["change_data"] == 1 and evidence.files_removed["log"] >= 5
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def test_a_second_erase_changes_nothing(tmp_path: Path) -> None:
    table, path = create(tmp_path, **CDF)
    table.erase(VALUES, MATCH, COLUMNS)
    version = DeltaTable(str(path)).version()
    files = sorted(p for p in path.rglob("*") if p.is_file())

    again = table.erase(VALUES, MATCH, COLUMNS)

    assert again.already_done and again.rows_before == 0 and again.files_removed == {}
    assert DeltaTable(str(path)).version() == version
    assert sorted(p for p in path.rglob("*") if p.is_file()) == files


def test_a_failing_before_commit_commits_nothing(tmp_path: Path) -> None:
    table, path = create(tmp_path)

    def refuse(_: object) -> None:
        raise RuntimeError("audit log unreachable")

    with pytest.raises(RuntimeError):
        table.erase(VALUES, MATCH, COLUMNS, before_commit=refuse)
    assert table.count(VALUES) == 3 and DeltaTable(str(path)).version() == 2


def test_a_deletion_vector_protocol_is_erased_by_rewriting_files(tmp_path: Path) -> None:
    table, path = create(tmp_path, **{"delta.enableDeletionVectors": "true"})
    assert "deletionVectors" in (DeltaTable(str(path)).protocol().writer_features or [])

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    # delta-rs rewrote the files (no deletion vector), so the rows are gone from disk.
    assert evidence.delete_mode == "deletion-vectors" and evidence.copy_on_write
    assert pa.table(DeltaTable(str(path)).deletion_vectors()).num_rows == 0
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(path) == []


def test_a_file_with_a_deletion_vector_is_refused(tmp_path: Path) -> None:
    """Another engine deleted the subject's row with a deletion vector: the row is hidden from
    reads but still in the Parquet file, which delta-rs cannot purge."""
    table, path = create(tmp_path, [COMMITS[0]], **{"delta.enableDeletionVectors": "true"})
    mask_row(path, row=1)  # the subject's row of the first file
    assert table.count(VALUES) == 0

    with pytest.raises(LakehouseRefused) as refused:
        table.erase(VALUES, MATCH, COLUMNS)

    assert refused.value.reason == "deletion_vectors" and len(refused.value.names) == 1
    assert "REORG" in str(refused.value)
    assert_no_canary(refused.value)
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert residue.rows_by_snapshot == {"0": 1}  # version 0, before the vector
    assert any(f.endswith(".parquet") for f in residue.files_holding)


def mask_row(path: Path, row: int) -> None:
    """Commit an inline deletion vector over `row` of the table's only file, as Spark would:
    a RoaringBitmapArray (magic, one 32-bit bitmap, an array container), Z85-encoded."""
    log = path / "_delta_log"
    add = next(
        json.loads(line)["add"]
        for line in (log / "00000000000000000000.json").read_text().splitlines()
        if '"add"' in line
    )
    container = struct.pack("<II", 12346, 1) + struct.pack("<HH", 0, 0) + struct.pack("<I", 16)
    bitmap = (
        struct.pack("<i", 1681511377)
        + struct.pack("<q", 1)
        + struct.pack("<i", 0)
        + container
        + struct.pack("<H", row)
    )
    now = int(time.time() * 1000)
    vector = {
        "storageType": "i",
        "pathOrInlineDv": _z85(bitmap),
        "sizeInBytes": len(bitmap),
        "cardinality": 1,
    }
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}},
        {
            "remove": {
                "path": add["path"],
                "deletionTimestamp": now,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": add["size"],
            }
        },
        {"add": {**add, "deletionVector": vector}},
    ]
    (log / "00000000000000000001.json").write_text("\n".join(map(json.dumps, actions)) + "\n")


def _z85(data: bytes) -> str:
    alphabet = (
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    )
    data += b"\x00" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(alphabet[digit])
        out.extend(reversed(chunk))
    return "".join(out)


def test_expire_history_after_an_overwrite_keeps_only_the_current_version(tmp_path: Path) -> None:
    table, path = create(tmp_path, **CDF)
    rebuilt = pa.Table.from_pylist([{"id": 1, "email": "rebuilt@example.com", "phone": ""}], SCHEMA)
    write_deltalake(str(path), rebuilt, mode="overwrite")

    evidence = table.expire_history()

    assert evidence.snapshots_after == 1 and evidence.files_removed["data"] == 3
    assert rows(path) == [(1, "rebuilt@example.com", "")]
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(path) == [] and files_holding(path, NEIGHBOUR) == []
    assert table.expire_history().already_done


def test_hostile_values_round_trip_without_touching_other_rows(tmp_path: Path) -> None:
    commits = [
        [(i, value, "subject") for i, value in enumerate(HOSTILE)],
        [(100 + i, value, "other") for i, value in enumerate(NEAR_MISSES)],
    ]
    table, path = create(tmp_path, commits, **CDF)
    values = {"email": set(HOSTILE)}

    evidence = table.erase(values, match_of(values), ["email"])

    assert evidence.rows_deleted == len(HOSTILE)
    assert sorted(r[1] for r in rows(path)) == sorted(NEAR_MISSES)
    assert table.residue(match_of(values), ["email"], values).clean
    # No value was written into SQL text: the log names columns only.
    for commit in (path / "_delta_log").glob("*.json"):
        assert "brien" not in commit.read_text()


def test_a_row_matching_in_two_columns_is_deleted_once(tmp_path: Path) -> None:
    table, path = create(tmp_path, [[(1, SUBJECT, PHONE), (2, NEIGHBOUR, "+44 2")]])

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.rows_before == evidence.rows_deleted == 1
    assert rows(path) == [(2, NEIGHBOUR, "+44 2")]


def test_messages_and_evidence_never_contain_a_value(tmp_path: Path) -> None:
    table, _ = create(tmp_path)
    problems = []
    for values in ({"nope": {SUBJECT}}, {"id": {SUBJECT}}):
        with pytest.raises(LakehouseError) as failed:
            table.count(values)
        problems.append(failed.value)
    assert "'nope'" in str(problems[0]) and "'id'" in str(problems[1])
    evidence = table.erase(VALUES, MATCH, COLUMNS)
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert_no_canary(*problems, evidence.model_dump_json(), residue.model_dump_json())
    assert table.refs_holding(MATCH, COLUMNS) == []
    assert table.distinct(["email"])["email"] == {v[1]: 1 for v in everyone_else()}


def test_a_table_partitioned_by_a_subject_column_waits_for_its_tombstones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lake" / "by_email"
    data = pa.Table.from_pylist(
        [{"id": 1, "email": SUBJECT, "phone": "1"}, {"id": 2, "email": NEIGHBOUR, "phone": "2"}],
        SCHEMA,
    )
    write_deltalake(str(path), data, partition_by=["email"])
    table = open_table(DeltaConfig(root="lake"), "lake", "by_email", tmp_path)
    values = {"email": {SUBJECT}}

    with pytest.raises(LakehouseRefused) as refused:
        table.erase(values, match_of(values), ["email"])

    # Rows, history and the partition's directory are gone; the checkpoint still names the
    # removed file's path (its partition directory spells the address) as a tombstone.
    assert refused.value.reason == "tombstones"
    assert_no_canary(refused.value, refused.value.names)
    assert refused.value.names[0] not in str(refused.value)  # paths in `names` only
    assert rows(path) == [(2, NEIGHBOUR, "2")]
    assert [p.name for p in path.iterdir() if p.name.startswith("email=")] == [
        "email=neighbour%40example.com"
    ]
    residue = table.residue(match_of(values), ["email"], values)
    assert residue.files_holding == [f"_delta_log/{refused.value.names[0].split('/')[-1]}"]

    DeltaTable(str(path)).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 seconds"}
    )
    evidence = table.erase(values, match_of(values), ["email"])  # the owner lowered it

    assert evidence.rows_deleted == 0 and evidence.files_removed["checkpoint"] == 1
    assert table.residue(match_of(values), ["email"], values).clean
