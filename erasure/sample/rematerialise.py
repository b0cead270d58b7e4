"""What the demo's rematerialisation DAGs do: rebuild their tables from the declared SQL.

Each demo DAG owns some derived tables; re-materialising one drops and re-creates its tables
in one transaction from `sql/<table>.sql`, so a failure leaves the previous tables.
"""

from __future__ import annotations

import sqlalchemy as sa

from erasure.actions.transaction import transaction
from erasure.catalog import Catalog
from erasure.errors import RebuildFailed, describe_failure
from erasure.model import DatasetRef, LineageEdge
from erasure.warehouse import Warehouse

# dag_id -> the tables it materialises, in order.
REMATERIALISATION_DAGS: dict[str, list[str]] = {
    "build_marts": ["marts.orders_daily"],
    "build_reports": ["reports.monthly_revenue"],
}


def select_of(catalog: Catalog, table: str) -> str:
    """The declared SELECT that produces `table` (comments dropped)."""
    text = (catalog.base_dir / "sql" / f"{table}.sql").read_text()
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


def rematerialise(catalog: Catalog, warehouse: Warehouse, dag_id: str) -> dict[str, int]:
    """Drop and re-create the DAG's tables from the cleaned sources; rows per table."""
    if dag_id not in REMATERIALISATION_DAGS:
        raise RebuildFailed(
            f"no rematerialisation DAG {dag_id!r}; known: {', '.join(REMATERIALISATION_DAGS)}"
        )
    rows: dict[str, int] = {}
    for table in REMATERIALISATION_DAGS[dag_id]:
        ds = catalog.by_name(table)
        with warehouse.connect(ds) as conn:
            try:
                with transaction(conn):
                    conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
                    conn.execute(sa.text(f"CREATE TABLE {table} AS {select_of(catalog, table)}"))
                    rows[table] = int(
                        conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
                    )
            except sa.exc.DBAPIError as exc:
                raise RebuildFailed(
                    f"{dag_id}: rebuilding {table} failed ({describe_failure(exc)}); "
                    "the previous table is kept"
                ) from None
    warehouse.forget_tables()
    return rows


def table_lineage(
    catalog: Catalog, warehouse: Warehouse, dag_id: str
) -> dict[DatasetRef, list[LineageEdge]]:
    """Column lineage of each table the DAG rebuilds, from its declared SELECT: what the run
    reports to OpenLineage."""
    from erasure.lineage import declared_table_lineage

    tables = REMATERIALISATION_DAGS.get(dag_id, [])
    return {
        catalog.by_name(table).ref: declared_table_lineage(
            catalog, warehouse, table, select_of(catalog, table)
        )
        for table in tables
    }
