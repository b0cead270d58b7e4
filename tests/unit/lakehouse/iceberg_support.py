"""The Iceberg tests' table: four appends, the subject in two files among other people, in a
SQL catalog (SQLite or Postgres) with a warehouse under the test's directory."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.typedef import Record

from erasure.lakehouse import IcebergCatalogConfig, IcebergTable, open_table
from erasure.lakehouse.config import load_iceberg_catalog
from tests.unit.lakehouse.support import NEIGHBOUR, SUBJECT, match_of

SCHEMA = pa.schema([("id", pa.int64()), ("email", pa.string()), ("note", pa.string())])
# Four appends, four files: the subject in the first (as its largest email: the manifest's
# upper bound) and the third, among other people.
APPENDS = [
    [(1, "a@example.com", "first"), (2, SUBJECT, "hello")],
    [(3, NEIGHBOUR, "hi")],
    [(4, SUBJECT, "again"), (5, "b@example.com", "x")],
    [(6, "zed@example.com", "last")],
]
VALUES = {"email": {SUBJECT}}
MATCH = match_of(VALUES)
COLUMNS = ["email"]


@dataclass
class Lake:
    """A catalog config (paths relative to `base`, as a catalog file gives them) and its base."""

    config: IcebergCatalogConfig
    base: Path

    @property
    def location(self) -> Path:
        return self.base / "warehouse" / "shop" / "customers"

    def create(
        self, appends: list[list[tuple[Any, ...]]] = APPENDS, **properties: str
    ) -> IcebergTable:
        catalog = load_iceberg_catalog(self.config, "lake", self.base)
        catalog.create_namespace("shop")
        table = catalog.create_table("shop.customers", schema=SCHEMA, properties=properties)
        for batch in appends:
            records = [dict(zip(SCHEMA.names, r, strict=True)) for r in batch]
            table.append(pa.Table.from_pylist(records, SCHEMA))
        opened = open_table(self.config, "lake", "shop.customers", self.base)
        assert isinstance(opened, IcebergTable)
        return opened


def rows(table: IcebergTable) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.refresh().scan().to_arrow().to_pylist())


def everyone_else() -> list[tuple[Any, ...]]:
    return sorted(r for batch in APPENDS for r in batch if r[1] != SUBJECT)


class _DeletesWriter(ManifestWriterV2):
    """pyiceberg 0.12 writes no delete files: a manifest of them, written as Spark would."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def mask_row(table: Table, data_file: str, position: int) -> None:
    """Commit a position delete file hiding row `position` of `data_file`: what a merge-on-read
    delete by another engine leaves (the row is still in the data file)."""
    metadata = table.metadata
    parent = metadata.current_snapshot()
    assert parent is not None
    location = f"{table.location()}/data/delete-{uuid.uuid4()}.parquet"
    local = Path(location.removeprefix("file://"))
    pq.write_table(
        pa.table({"file_path": [data_file], "pos": pa.array([position], pa.int64())}), local
    )
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=local.stat().st_size,
    )
    delete_file.spec_id = metadata.default_spec_id
    snapshot_id = metadata.new_snapshot_id()
    manifest = f"{table.location()}/metadata/{uuid.uuid4()}-m0.avro"
    output = table.io.new_output(manifest)
    with _DeletesWriter(metadata.spec(), metadata.schema(), output, snapshot_id, "deflate") as w:
        w.add(
            ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=delete_file
            )
        )
    _commit(table, snapshot_id, [*parent.manifests(table.io), w.to_manifest_file()])


def delete_as_spark(table: Table, removed: set[str]) -> None:
    """Commit a delete of the data files `removed` as Spark's deletes write it (Java's merging
    snapshot producer, manifest merge on by default): one manifest listing the removed files
    as DELETED entries, which keep their column bounds, beside the EXISTING files kept. The
    current snapshot's own DELETED entries stay DELETED (`removed` empty: its manifests merged
    into one)."""
    metadata = table.metadata
    parent = metadata.current_snapshot()
    assert parent is not None
    snapshot_id = metadata.new_snapshot_id()
    path = f"{table.location()}/metadata/{uuid.uuid4()}-m0.avro"
    output = table.io.new_output(path)
    with ManifestWriterV2(metadata.spec(), metadata.schema(), output, snapshot_id, "deflate") as w:
        for manifest in parent.manifests(table.io):
            for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                gone = e.data_file.file_path in removed or e.status == ManifestEntryStatus.DELETED
                status = ManifestEntryStatus.DELETED if gone else ManifestEntryStatus.EXISTING
                w.add_entry(
                    ManifestEntry.from_args(
                        status=status,
                        snapshot_id=snapshot_id if gone else e.snapshot_id,
                        sequence_number=e.sequence_number,
                        file_sequence_number=e.file_sequence_number,
                        data_file=e.data_file,
                    )
                )
    _commit(table, snapshot_id, [w.to_manifest_file()])


def _commit(table: Table, snapshot_id: int, manifests: list[ManifestFile]) -> None:
    """Commit a snapshot of `manifests` on main, as another engine would."""
    metadata = table.metadata
    parent = metadata.current_snapshot()
    assert parent is not None
    sequence = metadata.next_sequence_number()
    listed = f"{table.location()}/metadata/snap-{snapshot_id}-0-{uuid.uuid4()}.avro"
    with write_manifest_list(
        2, table.io.new_output(listed), snapshot_id, parent.snapshot_id, sequence, "deflate"
    ) as writer:
        writer.add_manifests(manifests)
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence,
        manifest_list=listed,
        summary=Summary(Operation.DELETE),
        schema_id=metadata.current_schema_id,
    )
    with table.transaction() as tx:
        tx._apply(
            (
                AddSnapshotUpdate(snapshot=snapshot),
                SetSnapshotRefUpdate(
                    snapshot_id=snapshot_id,
                    parent_snapshot_id=parent.snapshot_id,
                    ref_name="main",
                    type=SnapshotRefType.BRANCH,
                ),
            ),
            (AssertRefSnapshotId(snapshot_id=parent.snapshot_id, ref="main"),),
        )


def append_as_spark(
    table: Table, records: list[dict[str, Any]], partition: tuple[Any, ...]
) -> None:
    """Append one data file in the partition `partition` of the table's spec, under the folder
    Spark names after it (`field=value`, percent-encoded): pyiceberg 0.12 writes no truncate
    or bucket partitions itself."""
    spec = table.spec()
    folder = "/".join(
        f"{f.name}={quote(str(v), safe='')}" for f, v in zip(spec.fields, partition, strict=True)
    )
    location = f"{table.location()}/data/{folder}/00000-0-{uuid.uuid4()}.parquet"
    local = Path(location.removeprefix("file://"))
    local.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema_to_pyarrow(table.schema())), local)
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=pq.read_metadata(local),
        stats_columns=compute_statistics_plan(table.schema(), table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(table.schema()),
    )
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition),
        file_size_in_bytes=local.stat().st_size,
        spec_id=table.metadata.default_spec_id,
        **statistics.to_serialized_dict(),
    )
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(data_file)
