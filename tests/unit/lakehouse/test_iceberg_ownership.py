"""Which files an Iceberg erasure may remove: only the table's own (its location and data
path); a table whose files may be shared (`gc.enabled=false`) is refused; a file of another
table holding the subject is refused and left; every file is searched wherever it lives."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from erasure.lakehouse import IcebergTable, LakehouseRefused, open_table
from erasure.lakehouse.config import load_iceberg_catalog
from tests.unit.lakehouse.iceberg_support import (
    APPENDS,
    COLUMNS,
    MATCH,
    SCHEMA,
    VALUES,
    Lake,
)
from tests.unit.lakehouse.support import NEIGHBOUR, assert_no_canary, files_holding


def test_files_in_a_data_path_outside_the_location_are_searched_and_removed(lake: Lake) -> None:
    elsewhere = lake.base / "elsewhere"
    table = lake.create(**{"write.data.path": elsewhere.as_uri()})
    assert files_holding(elsewhere) and not (lake.location / "data").exists()
    table.delete_rows(VALUES)
    table.expire_snapshots()  # history expired, its files left where they are

    residue = table.residue(MATCH, COLUMNS, VALUES)

    # The removed data files live in the data path: searched, shown by their whole path.
    assert sorted(f for f in residue.files_holding if f.startswith("/")) == sorted(
        str(elsewhere / name) for name in files_holding(elsewhere)
    )
    table.erase(VALUES, MATCH, COLUMNS)  # the data path is the table's own: its files go
    assert table.residue(MATCH, COLUMNS, VALUES).clean
    assert files_holding(elsewhere) == []


def _table_over_files_of(lake: Lake, rows: list[list[tuple[object, ...]]], **properties: str):
    """A table `shop.customers` whose data files were added from another table's."""
    catalog = load_iceberg_catalog(lake.config, "lake", lake.base)
    catalog.create_namespace("shop")
    source = catalog.create_table("shop.source", schema=SCHEMA)
    for batch in rows:
        records = [dict(zip(SCHEMA.names, r, strict=True)) for r in batch]
        source.append(pa.Table.from_pylist(records, SCHEMA))
    added = [task.file.file_path for task in source.scan().plan_files()]
    target = catalog.create_table("shop.customers", schema=SCHEMA, properties=properties)
    target.add_files(added)
    opened = open_table(lake.config, "lake", "shop.customers", lake.base)
    assert isinstance(opened, IcebergTable)
    return opened, source, [Path(p.removeprefix("file://")) for p in added]


def test_a_table_that_may_share_its_files_is_refused(lake: Lake) -> None:
    table, source, added = _table_over_files_of(lake, APPENDS, **{"gc.enabled": "false"})

    with pytest.raises(LakehouseRefused) as refused:
        table.erase(VALUES, MATCH, COLUMNS)
    assert refused.value.reason == "gc_disabled"
    with pytest.raises(LakehouseRefused):
        table.expire_history()

    assert table.count(VALUES) == 2 and all(path.exists() for path in added)
    assert len(source.refresh().scan().to_arrow()) == 6  # the other table is whole


def test_a_file_of_another_table_holding_the_subject_is_refused_and_left(lake: Lake) -> None:
    table, source, added = _table_over_files_of(lake, APPENDS)

    residue = table.residue(MATCH, COLUMNS, VALUES)
    with pytest.raises(LakehouseRefused) as refused:
        table.erase(VALUES, MATCH, COLUMNS)

    # The added files live in the other table's location: searched, and named by path.
    assert len([f for f in residue.files_holding if f.startswith("/")]) == 2
    assert refused.value.reason == "files_outside" and len(refused.value.names) == 2
    assert_no_canary(refused.value, refused.value.names)
    assert table.count(VALUES) == 2 and all(path.exists() for path in added)
    assert len(source.refresh().scan().to_arrow()) == 6


def test_a_file_of_another_table_is_never_removed(lake: Lake) -> None:
    table, source, added = _table_over_files_of(lake, [[(3, NEIGHBOUR, "hi")]])
    rebuilt = pa.Table.from_pylist([{"id": 1, "email": "rebuilt@example.com", "note": ""}], SCHEMA)
    table.table.overwrite(rebuilt)

    evidence = table.expire_history()

    assert evidence.snapshots_after == 1 and "data" not in evidence.files_removed
    assert all(path.exists() for path in added)
    assert source.refresh().scan().to_arrow().to_pylist() == [
        {"id": 3, "email": NEIGHBOUR, "note": "hi"}
    ]
