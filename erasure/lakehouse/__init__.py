"""Erasure from lakehouse tables, history included: Iceberg (pyiceberg, any catalog) and Delta
(delta-rs). Open a table with `open_table`, then `erase` the located rows with every snapshot
and file that kept them, or `expire_history` after a rebuild, and prove it with `residue`.

The table classes load their engines (pyiceberg, deltalake, pyarrow: most of a second), so
they are imported on first use; the configs, the protocol and the evidence are light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from erasure.lakehouse.config import (
    DeltaConfig,
    IcebergCatalogConfig,
    LakehouseConfig,
    lakehouse_config,
    open_table,
)
from erasure.lakehouse.errors import LakehouseBusy, LakehouseError, LakehouseRefused
from erasure.lakehouse.evidence import DeletedRows, HistoryErasure, Residue
from erasure.lakehouse.table import LakehouseTable, Match, SubjectValues

if TYPE_CHECKING:
    from erasure.lakehouse.delta import DeltaLakeTable
    from erasure.lakehouse.iceberg import IcebergTable

__all__ = [
    "DeletedRows",
    "DeltaConfig",
    "DeltaLakeTable",
    "HistoryErasure",
    "IcebergCatalogConfig",
    "IcebergTable",
    "LakehouseBusy",
    "LakehouseConfig",
    "LakehouseError",
    "LakehouseRefused",
    "LakehouseTable",
    "Match",
    "Residue",
    "SubjectValues",
    "lakehouse_config",
    "open_table",
]


def __getattr__(name: str) -> Any:
    if name == "IcebergTable":
        from erasure.lakehouse.iceberg import IcebergTable

        return IcebergTable
    if name == "DeltaLakeTable":
        from erasure.lakehouse.delta import DeltaLakeTable

        return DeltaLakeTable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
