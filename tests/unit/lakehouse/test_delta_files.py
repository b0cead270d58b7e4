"""Which files a Delta erasure removes and which it finds: a file no commit named is left until
it is old; a shallow clone's source file is never removed (refused when it holds them); a
partition of theirs goes by the caller's match, also on a retry; a neighbour whose address
contains theirs is never taken for them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from erasure.lakehouse import DeltaConfig, DeltaLakeTable, LakehouseRefused, open_table
from erasure.lakehouse.files import UNNAMED_MIN_AGE
from tests.unit.lakehouse.support import (
    CANARY,
    NEIGHBOUR,
    SUBJECT,
    assert_no_canary,
    files_holding,
    match_of,
)
from tests.unit.lakehouse.test_delta import COLUMNS, COMMITS, MATCH, SCHEMA, VALUES, create, rows

LOG = "_delta_log"
NO_RETENTION = {"delta.deletedFileRetentionDuration": "interval 0 seconds"}


def open_delta(tmp_path: Path, table: str) -> DeltaLakeTable:
    opened = open_table(DeltaConfig(root="lake"), "lake", table, tmp_path)
    assert isinstance(opened, DeltaLakeTable)
    return opened


def test_a_file_no_commit_named_is_left_until_it_is_old(tmp_path: Path) -> None:
    table, path = create(tmp_path)
    # A writer's file, its commit still to come: the subject's row among others.
    pending = path / "part-99999-pending.snappy.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"id": 9, "email": SUBJECT, "phone": "1"}], SCHEMA), pending
    )

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert pending.exists() and evidence.files_unnamed_left == 1
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert residue.files_holding == [pending.name] and not residue.clean

    aged = time.time() - UNNAMED_MIN_AGE.total_seconds() - 60
    os.utime(pending, (aged, aged))
    again = table.erase(VALUES, MATCH, COLUMNS)

    assert not pending.exists() and again.files_removed == {"data": 1}
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def shallow_clone(tmp_path: Path, source_rows: list[tuple[object, ...]]) -> tuple[Path, Path]:
    """A table whose first file is another table's, named by its absolute path (what a shallow
    clone writes), and one file of its own."""
    source, clone = tmp_path / "lake" / "source", tmp_path / "lake" / "clone"
    records = [dict(zip(SCHEMA.names, r, strict=True)) for r in source_rows]
    write_deltalake(str(source), pa.Table.from_pylist(records, SCHEMA))
    own = [{"id": 6, "email": "zed@example.com", "phone": "+44 6"}]
    write_deltalake(str(clone), pa.Table.from_pylist(own, SCHEMA))
    add = next(
        json.loads(line)["add"]
        for line in (source / "_delta_log" / f"{0:020}.json").read_text().splitlines()
        if '"add"' in line
    )
    actions = [
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "CLONE"}},
        {"add": {**add, "path": (source / add["path"]).as_uri()}},
    ]
    (clone / "_delta_log" / f"{1:020}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    return source, source / add["path"]


def test_a_shallow_clones_source_file_holding_the_subject_is_refused(tmp_path: Path) -> None:
    source, source_file = shallow_clone(tmp_path, COMMITS[0])
    table = open_delta(tmp_path, "clone")
    assert table.count(VALUES) == 1

    residue = table.residue(MATCH, COLUMNS, VALUES)
    with pytest.raises(LakehouseRefused) as refused:
        table.erase(VALUES, MATCH, COLUMNS)

    # Searched where it lives (and the clone's commit names them in its stats).
    assert residue.files_holding == [f"{LOG}/{1:020}.json", source_file.as_uri()]
    assert refused.value.reason == "files_outside" and len(refused.value.names) == 1
    assert_no_canary(refused.value, refused.value.names)
    assert table.count(VALUES) == 1 and DeltaTable(str(tmp_path / "lake" / "clone")).version() == 1
    assert source_file.exists() and len(rows(source)) == 2  # the source is whole


def test_a_shallow_clones_source_file_is_never_removed(tmp_path: Path) -> None:
    source, source_file = shallow_clone(tmp_path, [(3, NEIGHBOUR, "+44 3")])
    clone = tmp_path / "lake" / "clone"
    write_deltalake(
        str(clone), pa.Table.from_pylist([{"id": 1, "email": "r@x.io"}], SCHEMA), mode="overwrite"
    )
    table = open_delta(tmp_path, "clone")

    table.expire_history()

    assert source_file.exists() and rows(source) == [(3, NEIGHBOUR, "+44 3")]
    assert rows(clone) == [(1, "r@x.io", None)]


def their_email(column: str, value: object) -> bool:
    return column == "email" and isinstance(value, str) and value.lower() == SUBJECT


def test_a_retry_that_located_nothing_still_removes_their_partition(tmp_path: Path) -> None:
    path = tmp_path / "lake" / "by_email"
    stored = SUBJECT.replace("o'hara", "O'Hara")
    for i, batch in enumerate([[(1, stored), (2, NEIGHBOUR)], [(3, stored)]]):
        data = pa.Table.from_pylist([{"id": a, "email": b, "phone": ""} for a, b in batch], SCHEMA)
        configuration = {**NO_RETENTION, "delta.enableChangeDataFeed": "true"} if i == 0 else None
        write_deltalake(
            str(path), data, mode="append", partition_by=["email"], configuration=configuration
        )
    table = open_delta(tmp_path, "by_email")
    table.delete_rows({"email": {stored}})  # the first try committed, then died

    evidence = table.erase({}, their_email, ["email"])  # the retry: nothing located now

    assert evidence.files_removed["directory"] == 2  # the table's and the change feed's
    assert not [p for p in path.rglob("*") if CANARY in p.name]
    assert files_holding(path) == []
    assert table.residue(their_email, ["email"], {"email": {SUBJECT}}).clean


def test_a_partition_by_a_short_number_goes_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "lake" / "by_id"
    data = pa.Table.from_pylist(
        [
            {"id": 42, "email": "a@example.com", "phone": ""},
            {"id": 7, "email": "b@x.io", "phone": ""},
        ],
        SCHEMA,
    )
    write_deltalake(str(path), data, partition_by=["id"], configuration=NO_RETENTION)
    table = open_delta(tmp_path, "by_id")
    by_id = {"id": {42}}
    assert table.residue(match_of(by_id), ["id"], by_id).files_holding[0] == "id=…/"

    evidence = table.erase(by_id, match_of(by_id), ["id"])

    assert evidence.files_removed["directory"] == 1
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ["_delta_log", "id=7"]
    assert table.residue(match_of(by_id), ["id"], by_id).clean


def test_a_neighbour_whose_address_contains_theirs_is_not_taken_for_them(tmp_path: Path) -> None:
    values = {"email": {"ann@ex.io"}}
    table, path = create(
        tmp_path, [[(1, "ann@ex.io", "1"), (2, "joann@ex.io", "2")], [(3, "z@ex.io", "3")]]
    )

    evidence = table.erase(values, match_of(values), ["email"])  # no refusal: nothing of theirs

    assert evidence.rows_deleted == 1 and [r[1] for r in rows(path)] == ["joann@ex.io", "z@ex.io"]
    assert table.residue(match_of(values), ["email"], values).clean
