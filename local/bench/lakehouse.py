"""Erase and verify one subject in a lakehouse table, against a full rewrite of the same table.

The table: customer_id (`C0000001`), email, event, amount, in 200 Parquet files written by 20
appends of 10 files each (so 20 snapshots of history); the subject's customer id is in 3 rows,
each in a different file and append, among customers of about five events each (seeded: the
same table every run). Two identical tables are built in one SQLite `SqlCatalog` with a local
file warehouse, in a temporary directory; the build is timed apart and is no part of the
measurement. On one table the product's path is timed: `open_table`, `erase` (delete
copy-on-write, expire every other snapshot, remove the files that held the rows) and
`residue` (the independent proof: every retained snapshot scanned, every file under the
table read by its format), given the located values and an exact-equality `Match` on
customer_id (the product's `SubjectMatch` normalises each value it is asked about: a dearer
call). On the other, the baseline: every row read in batches, the subject's filtered out, and
the result written back with one `overwrite` (which leaves the old snapshots in place: it
erases nothing from history). Each is run once (the erasure changes its table), the erasure
first. Each step prints wall and process CPU seconds (all threads): on a shared machine the
CPU seconds are the steadier reading.

Memory is the RSS high-water mark of this process (`VmHWM` in /proc/self/status, reset before
each step through /proc/self/clear_refs; where that is refused, `ru_maxrss`, which is never
reset and so only grows). Arrow allocates outside Python's allocator, so tracemalloc would
miss most of it.

A Delta variant does the same with delta-rs: the same rows in 200 files written by 200 appends
(one commit each, checkpoint every 100), erase + residue against an `overwrite` of the filtered
rows. `BENCH_LAKEHOUSE_ROWS` sets the Iceberg row count (default 10,000,000);
`BENCH_LAKEHOUSE_DELTA_ROWS` the Delta one (default the same; 0 skips it). Both at 10,000,000
take about four minutes on 2 cores, the builds included.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyiceberg
from deltalake import DeltaTable, write_deltalake

from erasure.lakehouse import (
    DeltaConfig,
    HistoryErasure,
    IcebergCatalogConfig,
    LakehouseTable,
    Residue,
)
from erasure.lakehouse import open_table as open_lakehouse_table
from erasure.lakehouse.config import load_iceberg_catalog
from local.bench._steps import PeakRss, Step

ROWS = int(os.environ.get("BENCH_LAKEHOUSE_ROWS", "10000000"))
DELTA_ROWS = int(os.environ.get("BENCH_LAKEHOUSE_DELTA_ROWS", str(ROWS)))
FILES = 200
FILES_PER_APPEND = 10
SUBJECT_FILES = (13, 101, 187)  # three files of three different appends
EVENTS_PER_CUSTOMER = 5
EVENTS = ("view", "click", "add_to_cart", "purchase", "refund", "signup")
SEED = 20260817
SCHEMA = pa.schema(
    [
        ("customer_id", pa.string()),
        ("email", pa.string()),
        ("event", pa.string()),
        ("amount", pa.int64()),
    ]
)
COLUMNS = ["customer_id"]
CATALOG = IcebergCatalogConfig(
    properties={"type": "sql", "uri": "sqlite:///catalog.db", "warehouse": "warehouse"}
)
NAMESPACE = "bench"
ERASED, REWRITTEN = "erased", "rewritten"
# One file per record batch while building (pyiceberg packs by in-memory bytes); removed after
# the build, so the erasure's rewrite and the baseline write files of the default size.
TARGET_FILE_SIZE = "write.target-file-size-bytes"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Subject:
    """The person erased: their customer number and id, and an exact-equality match."""

    number: int
    customer_id: str

    @property
    def values(self) -> dict[str, set[object]]:
        return {"customer_id": {self.customer_id}}

    def match(self, column: str, value: object) -> bool:
        return column == "customer_id" and value == self.customer_id


def main() -> None:
    """Print erase, verify and their sum against a full rewrite, for Iceberg (and Delta)."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"lakehouse erase + verify of one subject vs a full rewrite; load average {load}")
    peak = PeakRss()
    print(f"  memory: {peak.how}")
    with tempfile.TemporaryDirectory(prefix="bench_lakehouse_") as tmp:
        _iceberg(Path(tmp), ROWS, peak)
        if DELTA_ROWS:
            _delta(Path(tmp), DELTA_ROWS, peak)


# The data ---------------------------------------------------------------------------------


def _subject(rows: int) -> Subject:
    number = _customers(rows) // 3 + 7
    return Subject(number, f"C{number:07d}")


def _customers(rows: int) -> int:
    return max(rows // EVENTS_PER_CUSTOMER, 10)


def _appends(rows: int) -> Iterator[list[pa.RecordBatch]]:
    """FILES batches (one per data file) in groups of FILES_PER_APPEND; the subject in one row of
    each of SUBJECT_FILES, nowhere else."""
    if rows < FILES:
        raise SystemExit(f"need at least {FILES} rows, one file each; got {rows}")
    rng = np.random.default_rng(SEED)
    customers, subject = _customers(rows), _subject(rows)
    group: list[pa.RecordBatch] = []
    for index in range(FILES):
        size = rows // FILES + (1 if index < rows % FILES else 0)
        numbers = rng.integers(1, customers + 1, size=size)
        numbers[numbers == subject.number] = subject.number + 1
        if index in SUBJECT_FILES:
            numbers[rng.integers(size)] = subject.number
        group.append(_batch(rng, numbers))
        if len(group) == FILES_PER_APPEND:
            yield group
            group = []
    if group:
        yield group


def _batch(rng: np.random.Generator, numbers: np.ndarray[Any, Any]) -> pa.RecordBatch:
    digits = pc.cast(pa.array(numbers), pa.string())
    events = pa.array(rng.integers(0, len(EVENTS), size=len(numbers)))
    return pa.RecordBatch.from_arrays(
        [
            pc.binary_join_element_wise("C", pc.utf8_lpad(digits, width=7, padding="0"), ""),
            pc.binary_join_element_wise("customer", digits, "@example.com", ""),
            pc.take(pa.array(EVENTS), events),
            pa.array(rng.integers(100, 100_000, size=len(numbers)), pa.int64()),
        ],
        schema=SCHEMA,
    )


def _without_subject(
    batches: Iterator[pa.RecordBatch], subject: Subject
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        keep = pc.fill_null(pc.not_equal(batch.column("customer_id"), subject.customer_id), True)
        yield batch.filter(keep)


# Iceberg ----------------------------------------------------------------------------------


def _iceberg(base: Path, rows: int, peak: PeakRss) -> None:
    subject = _subject(rows)
    print(
        f"iceberg (pyiceberg {pyiceberg.__version__}, SQLite SqlCatalog, local warehouse): "
        f"{rows:,} rows in {FILES} files by {-(-FILES // FILES_PER_APPEND)} appends; "
        f"subject in {len(SUBJECT_FILES)} rows of {len(SUBJECT_FILES)} files"
    )
    start = time.perf_counter()
    catalog = load_iceberg_catalog(CATALOG, "bench", base)
    catalog.create_namespace(NAMESPACE)
    tables = [
        catalog.create_table(
            f"{NAMESPACE}.{name}", schema=SCHEMA, properties={TARGET_FILE_SIZE: "1"}
        )
        for name in (ERASED, REWRITTEN)
    ]
    for group in _appends(rows):
        for table in tables:
            table.append(pa.RecordBatchReader.from_batches(SCHEMA, group))
    for table in tables:
        with table.transaction() as tx:
            tx.remove_properties(TARGET_FILE_SIZE)
        files = sum(1 for _ in table.scan().plan_files())
        assert files == FILES, f"{files} data files in the current snapshot, not {FILES}"
    on_disk = _bytes_under(Path(tables[0].location().removeprefix("file://")))
    print(
        f"  build (not measured): 2 identical tables in {time.perf_counter() - start:.1f} s, "
        f"{on_disk / MIB:,.0f} MiB on disk each, {len(tables[0].metadata.snapshots)} snapshots"
    )

    erase, (erased, history) = peak.step(
        lambda: _open_and_erase(
            open_lakehouse_table(CATALOG, "bench", f"{NAMESPACE}.{ERASED}", base), subject
        )
    )
    verify, residue = peak.step(lambda: erased.residue(subject.match, COLUMNS, subject.values))

    def rewrite() -> None:
        table = catalog.load_table(f"{NAMESPACE}.{REWRITTEN}")
        reader = table.scan().to_arrow_batch_reader()
        kept = _without_subject(iter(reader), subject)
        table.overwrite(pa.RecordBatchReader.from_batches(reader.schema, kept))

    baseline, _ = peak.step(rewrite)
    rewritten = catalog.load_table(f"{NAMESPACE}.{REWRITTEN}")
    left = rewritten.scan(row_filter=f"customer_id = '{subject.customer_id}'").to_arrow()
    assert left.num_rows == 0, f"the baseline left {left.num_rows} of the subject's rows"
    total = rewritten.scan(selected_fields=("amount",)).to_arrow().num_rows
    assert total == rows - len(SUBJECT_FILES), f"the baseline kept {total:,} rows"
    _report(erase, verify, baseline, history, residue)
    print(
        f"  baseline: {len(rewritten.metadata.snapshots)} snapshots after, "
        f"{sum(1 for _ in rewritten.scan().plan_files())} data file(s) in the current one"
    )


def _open_and_erase(
    table: LakehouseTable, subject: Subject
) -> tuple[LakehouseTable, HistoryErasure]:
    return table, table.erase(subject.values, subject.match, COLUMNS)


# Delta ------------------------------------------------------------------------------------


def _delta(base: Path, rows: int, peak: PeakRss) -> None:
    subject = _subject(rows)
    print(
        f"delta (deltalake {deltalake.__version__}): {rows:,} rows in {FILES} files by "
        f"{FILES} appends; subject in {len(SUBJECT_FILES)} rows of {len(SUBJECT_FILES)} files"
    )
    uris = {name: str(base / "delta" / name) for name in (ERASED, REWRITTEN)}
    start = time.perf_counter()
    for group in _appends(rows):
        for batch in group:
            for uri in uris.values():
                write_deltalake(uri, batch, mode="append")
    files = len(DeltaTable(uris[ERASED]).file_uris())
    assert files == FILES, f"{files} files in the current version, not {FILES}"
    print(
        f"  build (not measured): 2 identical tables in {time.perf_counter() - start:.1f} s, "
        f"{_bytes_under(Path(uris[ERASED])) / MIB:,.0f} MiB on disk each, "
        f"version {DeltaTable(uris[ERASED]).version()}"
    )

    config = DeltaConfig(root="delta")
    erase, (erased, history) = peak.step(
        lambda: _open_and_erase(open_lakehouse_table(config, "bench", ERASED, base), subject)
    )
    verify, residue = peak.step(lambda: erased.residue(subject.match, COLUMNS, subject.values))

    def rewrite() -> None:
        table = DeltaTable(uris[REWRITTEN])
        dataset = table.to_pyarrow_dataset()
        kept = _without_subject(iter(dataset.to_batches()), subject)
        reader = pa.RecordBatchReader.from_batches(dataset.schema, kept)
        write_deltalake(uris[REWRITTEN], reader, mode="overwrite")

    baseline, _ = peak.step(rewrite)
    rewritten = DeltaTable(uris[REWRITTEN])
    total = rewritten.to_pyarrow_dataset().count_rows()
    assert total == rows - len(SUBJECT_FILES), f"the baseline kept {total:,} rows"
    _report(erase, verify, baseline, history, residue)
    print(f"  baseline: version {rewritten.version()}, {len(rewritten.file_uris())} data file(s)")


# Measuring --------------------------------------------------------------------------------


def _report(
    erase: Step, verify: Step, baseline: Step, history: HistoryErasure, residue: Residue
) -> None:
    both = Step(
        erase.seconds + verify.seconds,
        erase.cpu_seconds + verify.cpu_seconds,
        max(erase.peak_mib, verify.peak_mib),
    )
    print(f"  {'step':<30} {'seconds':>8} {'/ baseline':>11} {'cpu s':>7} {'peak RSS':>12}")
    for name, step in (
        ("erase (open_table + erase)", erase),
        ("verify (residue)", verify),
        ("erase + verify", both),
        ("baseline: full rewrite", baseline),
    ):
        print(
            f"  {name:<30} {step.seconds:>8.2f} {step.seconds / baseline.seconds:>10.2f}x "
            f"{step.cpu_seconds:>7.2f} {step.peak_mib:>8,.0f} MiB"
        )
    removed = ", ".join(f"{n} {kind}" for kind, n in sorted(history.files_removed.items()))
    print(
        f"  erase: {history.rows_deleted} rows deleted of {history.rows_before}; snapshots "
        f"{history.snapshots_before} -> {history.snapshots_after}; removed {removed or 'nothing'}"
    )
    print(
        f"  residue: {'clean' if residue.clean else 'NOT CLEAN'}; {residue.snapshots_checked} "
        f"snapshot(s) scanned, {residue.files_checked} files read, "
        f"{len(residue.files_holding)} holding, {len(residue.files_unreadable)} unreadable"
    )
    assert history.rows_deleted == len(SUBJECT_FILES), history
    assert residue.clean, residue


def _bytes_under(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


if __name__ == "__main__":
    main()
