"""Iceberg partitions and neighbours: a partition directory or snapshot summary key of theirs is
found and removed by the caller's match (typed, on a retry that located nothing, stored in
another case), and a neighbour whose address contains theirs is never taken for them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from erasure.lakehouse import IcebergTable, open_table
from erasure.lakehouse.config import load_iceberg_catalog
from tests.unit.lakehouse.iceberg_support import SCHEMA, Lake, rows
from tests.unit.lakehouse.support import CANARY, SUBJECT, assert_no_canary, files_holding, match_of

ICEBERG_SCHEMA = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "email", StringType()),
    NestedField(3, "note", StringType()),
)
STORED = SUBJECT.replace("o'hara", "O'Hara")  # as the table stores it; the request says lower


def their_email(column: str, value: object) -> bool:
    """The caller's match: an address is theirs whatever its case."""
    return column == "email" and isinstance(value, str) and value.lower() == SUBJECT


def partitioned(lake: Lake, source_id: int, batches: list[list[tuple[Any, ...]]]) -> IcebergTable:
    catalog = load_iceberg_catalog(lake.config, "lake", lake.base)
    catalog.create_namespace("shop")
    name = ICEBERG_SCHEMA.find_field(source_id).name
    spec = PartitionSpec(PartitionField(source_id, 1000, IdentityTransform(), name))
    table = catalog.create_table(
        "shop.customers",
        schema=ICEBERG_SCHEMA,
        partition_spec=spec,
        properties={"write.summary.partition-limit": "10"},  # summaries name partitions
    )
    for batch in batches:
        table.append(pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in batch]))
    opened = open_table(lake.config, "lake", "shop.customers", lake.base)
    assert isinstance(opened, IcebergTable)
    return opened


def test_a_retry_that_located_nothing_still_removes_their_partition(lake: Lake) -> None:
    table = partitioned(
        lake,
        2,
        [[(1, STORED, "x"), (2, "bob@example.com", "y")], [(3, "carol@example.com", "")]],
    )
    before = table.residue(their_email, ["email"], {"email": {SUBJECT}})
    assert "data/email=…/" in before.files_holding
    assert all("%40" not in f for f in before.files_holding)  # every partition value redacted
    table.delete_rows({"email": {STORED}})  # the first try committed its delete, then died

    evidence = table.erase({}, their_email, ["email"])  # the retry: nothing located now

    assert evidence.files_removed["directory"] == 1 and evidence.files_removed["metadata"] >= 1
    residue = table.residue(their_email, ["email"], {"email": {SUBJECT}})
    assert residue.clean, residue
    # Nothing spells them: no directory, no summary key `partitions.email=...` in metadata.
    assert files_holding(lake.location, CANARY) == []
    assert not [p for p in lake.location.rglob("*") if CANARY in p.name]
    assert_no_canary(evidence.model_dump_json(), before.model_dump_json())


def test_a_partition_by_a_short_number_goes_with_its_rows(lake: Lake) -> None:
    table = partitioned(lake, 1, [[(42, "a@example.com", "x"), (7, "b@example.com", "y")]])
    by_id = {"id": {42}}

    evidence = table.erase(by_id, match_of(by_id), ["id"])

    assert evidence.files_removed["directory"] == 1
    assert sorted(p.name for p in (lake.location / "data").iterdir()) == ["id=7"]
    assert table.residue(match_of(by_id), ["id"], by_id).clean


def test_a_neighbour_whose_address_contains_theirs_is_not_taken_for_them(lake: Lake) -> None:
    values = {"email": {"ann@ex.io"}}
    table = lake.create([[(1, "ann@ex.io", "x"), (2, "joann@ex.io", "y")], [(3, "zed@ex.io", "")]])

    table.erase(values, match_of(values), ["email"])

    assert [r[1] for r in rows(table)] == ["joann@ex.io", "zed@ex.io"]
    # The neighbour's address stays in the current manifest's bounds: not theirs.
    assert table.residue(match_of(values), ["email"], values).clean
