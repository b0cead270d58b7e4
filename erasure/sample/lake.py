"""The demo estate's lakehouse: an Iceberg table and a Delta table, each with a history.

`events.activity` (Iceberg, through pyiceberg's SQL catalog in `lake/catalog.db`) gets the
customers' activity in three appends: three snapshots, each holding rows of every customer.
`orders_ledger` (Delta, `lake/delta/orders_ledger`) gets the order lines in two commits
with its change data feed on. Written the way their producers write them: appends, no
compaction, history kept.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

ICEBERG_TABLE = "events.activity"
DELTA_TABLE = "orders_ledger"

_ACTIVITY = pa.schema(
    [
        pa.field("customer_id", pa.string()),
        pa.field("email", pa.string()),
        pa.field("event", pa.string()),
        pa.field("hour", pa.int32()),
    ]
)
_LEDGER = pa.schema(
    [
        pa.field("order_id", pa.int64()),
        pa.field("customer_id", pa.string()),
        pa.field("amount_pence", pa.int64()),
    ]
)


def iceberg_catalog(target: Path) -> object:
    """The demo's Iceberg catalog, as the catalog file's `lakehouses.lake` describes it."""
    from pyiceberg.catalog.sql import SqlCatalog

    lake = target.resolve() / "lake"
    (lake / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        "lake", uri=f"sqlite:///{lake / 'catalog.db'}", warehouse=(lake / "warehouse").as_uri()
    )


def build_lake(target: Path, engine: sa.Engine) -> None:
    """Create and fill the lakehouse tables from the warehouse's sources."""
    from deltalake import write_deltalake

    with engine.connect() as conn:
        people = conn.execute(sa.text("SELECT id, email FROM crm.customers ORDER BY id")).all()
        orders = conn.execute(
            sa.text("SELECT id, customer_id, amount FROM crm.orders ORDER BY id")
        ).all()
    catalog = iceberg_catalog(target)
    catalog.create_namespace("events")  # type: ignore[attr-defined]
    table = catalog.create_table(ICEBERG_TABLE, schema=_ACTIVITY)  # type: ignore[attr-defined]
    for hour, event in enumerate(("login", "browse", "checkout")):
        table.append(
            pa.Table.from_pylist(
                [
                    {"customer_id": pid, "email": email, "event": event, "hour": hour}
                    for pid, email in people
                ],
                schema=_ACTIVITY,
            )
        )
    ledger = str(target / "lake" / "delta" / DELTA_TABLE)
    lines = [
        {"order_id": oid, "customer_id": cid, "amount_pence": int(amount * 100)}
        for oid, cid, amount in orders
    ]
    half = len(lines) // 2
    cdf = {"delta.enableChangeDataFeed": "true"}
    write_deltalake(ledger, pa.Table.from_pylist(lines[:half], schema=_LEDGER), configuration=cdf)
    write_deltalake(ledger, pa.Table.from_pylist(lines[half:], schema=_LEDGER), mode="append")


def rebuild_lake(estate: Path) -> None:
    """The lake of a copied estate built again from its own warehouse: Iceberg keeps absolute
    paths in its catalog and metadata, so a copied lake would still be the original's."""
    import shutil

    from erasure.catalog import load_catalog
    from erasure.warehouse import Warehouse

    shutil.rmtree(estate / "lake", ignore_errors=True)
    warehouse = Warehouse(load_catalog(estate / "catalog.yaml"))
    try:
        build_lake(estate, warehouse.engine("warehouse"))
    finally:
        warehouse.dispose()


def drop_lake(estate: Path) -> None:
    """The estate's catalog and lineage without the lakehouse tables (the files stay, unused):
    for the fault matrix (tests/integration/test_faults.py says why)."""
    import re

    catalog = estate / "catalog.yaml"
    text = catalog.read_text()
    for name in ("events.activity", "orders_ledger"):
        entry = re.search(rf"\n  - namespace: lake\n    name: {re.escape(name)}\n(    .*\n)+", text)
        if entry is not None:
            text = text.replace(entry.group(0), "\n")
    lakehouses = re.search(r"\nlakehouses:\n(  .*\n)+", text)
    if lakehouses is not None:
        text = text.replace(lakehouses.group(0), "\n")
    catalog.write_text(text)
    events = estate / "lineage" / "events.jsonl"
    lines = events.read_text().splitlines()
    events.write_text("\n".join(line for line in lines if '"lake_export.' not in line) + "\n")
