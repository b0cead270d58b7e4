"""Iceberg erasure, continued: a retry after a crash at any step finishes the job, a second
run changes nothing, a rebuild's history expires, hostile values round-trip, and no message
or evidence repeats a value."""

from __future__ import annotations

import pyarrow as pa
import pytest

from erasure.lakehouse import IcebergTable, LakehouseError, LakehouseRefused
from erasure.lakehouse.probe import Probe
from tests.unit.lakehouse.iceberg_support import (
    COLUMNS,
    MATCH,
    SCHEMA,
    VALUES,
    Lake,
    rows,
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


def test_a_retry_after_a_crash_between_delete_and_expiry_completes(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = lake.create()
    real = IcebergTable.expire_snapshots_holding
    calls = []

    def crash_once(self: IcebergTable, probe: Probe) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("worker lost")
        return real(self, probe)

    monkeypatch.setattr(IcebergTable, "expire_snapshots_holding", crash_once)
    with pytest.raises(RuntimeError):
        table.erase(VALUES, MATCH, COLUMNS)
    assert table.count(VALUES) == 0  # the delete committed ...
    assert not table.residue(MATCH, COLUMNS, VALUES).clean  # ... its history did not go

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.rows_deleted == 0 and evidence.snapshots_expired >= 4
    assert evidence.files_removed and not evidence.already_done
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(lake.location) == []


def test_a_retry_after_a_crash_between_expiry_and_removal_finds_the_files(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = lake.create()

    def crash(self: IcebergTable) -> list[str]:
        raise RuntimeError("worker lost")

    with monkeypatch.context() as patched:
        patched.setattr(IcebergTable, "remove_unreferenced_files", crash)
        with pytest.raises(RuntimeError):
            table.erase(VALUES, MATCH, COLUMNS)
    assert len(table.refresh().metadata.snapshots) == 1  # expired; files still on disk

    evidence = table.erase(VALUES, MATCH, COLUMNS)

    assert evidence.snapshots_expired == 0 and evidence.files_removed["data"] == 2
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def test_a_second_erase_changes_nothing(lake: Lake) -> None:
    table = lake.create()
    table.erase(VALUES, MATCH, COLUMNS)
    location = table.refresh().metadata_location
    files = sorted(p for p in lake.location.rglob("*") if p.is_file())

    again = table.erase(VALUES, MATCH, COLUMNS)

    assert again.already_done and again.rows_before == 0 and again.files_removed == {}
    assert again.snapshots_expired == 0
    assert table.refresh().metadata_location == location
    assert sorted(p for p in lake.location.rglob("*") if p.is_file()) == files


def test_a_failing_before_commit_commits_nothing(lake: Lake) -> None:
    table = lake.create()

    def refuse(_: object) -> None:
        raise RuntimeError("audit log unreachable")

    on_disk = sorted(p for p in lake.location.rglob("*") if p.is_file())
    with pytest.raises(RuntimeError):
        table.erase(VALUES, MATCH, COLUMNS, before_commit=refuse)
    assert table.count(VALUES) == 2 and len(table.refresh().metadata.snapshots) == 4
    # The refused commit had written its files (a manifest of them keeps the subject's
    # bounds, and no metadata names it): removed, so a retry's verify finds none left.
    assert sorted(p for p in lake.location.rglob("*") if p.is_file()) == on_disk
    table.erase(VALUES, MATCH, COLUMNS)
    assert table.residue(MATCH, COLUMNS, VALUES).clean


def test_expire_history_after_an_overwrite_keeps_only_the_current_snapshot(lake: Lake) -> None:
    table = lake.create()
    rebuilt = pa.Table.from_pylist([{"id": 1, "email": "rebuilt@example.com", "note": ""}], SCHEMA)
    table.table.overwrite(rebuilt)

    evidence = table.expire_history()

    assert evidence.snapshots_after == 1 and evidence.snapshots_expired >= 5
    assert evidence.files_removed["data"] == 4
    assert rows(table) == [(1, "rebuilt@example.com", "")]
    # What the rebuild replaced is gone from every snapshot and file, the manifests' bounds
    # of the overwritten files included.
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(lake.location) == []
    assert files_holding(lake.location, NEIGHBOUR) == []


def test_expire_history_refuses_a_tag_on_an_older_snapshot(lake: Lake) -> None:
    table = lake.create()
    first = table.table.metadata.snapshots[0].snapshot_id
    table.table.manage_snapshots().create_tag(first, "v1").commit()
    table.refresh().overwrite(pa.Table.from_pylist([{"id": 1, "email": "r@x.io"}], SCHEMA))

    with pytest.raises(LakehouseRefused) as refused:
        table.expire_history()

    assert refused.value.reason == "refs_behind" and refused.value.names == ["v1"]


def test_hostile_values_round_trip_without_touching_other_rows(lake: Lake) -> None:
    appends = [
        [(i, value, "subject") for i, value in enumerate(HOSTILE)],
        [(100 + i, value, "other") for i, value in enumerate(NEAR_MISSES)],
    ]
    table = lake.create(appends)
    values = {"email": set(HOSTILE)}

    evidence = table.erase(values, match_of(values), COLUMNS)

    assert evidence.rows_deleted == len(HOSTILE)
    assert sorted(r[1] for r in rows(table)) == sorted(NEAR_MISSES)
    assert table.residue(match_of(values), COLUMNS, values).clean


def test_messages_and_evidence_never_contain_a_value(lake: Lake) -> None:
    table = lake.create()
    problems = []
    for values in ({"nope": {SUBJECT}}, {"id": {SUBJECT}}):
        with pytest.raises(LakehouseError) as failed:
            table.count(values)
        problems.append(failed.value)
    with pytest.raises(LakehouseError) as failed:
        table.erase({"id": {SUBJECT}}, MATCH, COLUMNS)
    problems.append(failed.value)
    assert "'nope'" in str(problems[0]) and "id" in str(problems[1])
    evidence = table.erase(VALUES, MATCH, COLUMNS)
    residue = table.residue(MATCH, COLUMNS, VALUES)
    assert_no_canary(*problems, evidence.model_dump_json(), residue.model_dump_json())


def test_residue_searches_history_when_current_rows_are_clean(lake: Lake) -> None:
    table = lake.create()
    residue_before = table.residue(MATCH, COLUMNS, VALUES)
    assert residue_before.snapshots_checked == 4
    assert sorted(residue_before.rows_by_snapshot.values()) == [1, 1, 2, 2]
    probe_free = table.residue(MATCH, [], {})
    assert probe_free.snapshots_checked == 4 and probe_free.rows_by_snapshot == {}
