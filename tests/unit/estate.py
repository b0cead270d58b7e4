"""Small SQLite estates for unit tests: a catalog text plus the SQL that fills its warehouse."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from erasure.catalog import Catalog, load_catalog
from erasure.warehouse import Warehouse


def make_estate(
    tmp_path: Path, catalog_yaml: str, statements: list[str]
) -> tuple[Catalog, Warehouse]:
    """Write the catalog, run the statements on its `warehouse` connection, return both."""
    (tmp_path / "catalog.yaml").write_text(catalog_yaml)
    catalog = load_catalog(tmp_path / "catalog.yaml")
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))
    return catalog, warehouse
