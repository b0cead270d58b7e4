"""Lineage: what a plan walks, and the store it is kept in. The rest of the project enters here.

Rooms behind this door: `sources` (the graph a plan walks, from the catalog's sources),
`graph` (the domain graph, its closure and coverage) over `walk` (the engine) and `instants`,
`shrink` (gaps where an output's lineage shrank), `dbt` (manifests), `sql/` (column lineage of
SQL), `openlineage/` (run events), `store/` (the persistent store).

Names are imported on first use (PEP 562): the CLI and the Airflow tasks import this package,
and numpy, sqlglot and SQLAlchemy load only when a name that needs them is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from erasure.lineage.graph import (
        Closure,
        InMemoryLineageGraph,
        LineageGraph,
        RetainedView,
        coverage,
    )
    from erasure.lineage.openlineage import (
        LastWriter,
        RunEvent,
        edges_from_events,
        event_id,
        parse_event,
        read_event_file,
        read_event_items,
    )
    from erasure.lineage.shrink import shrink_gaps
    from erasure.lineage.sources import (
        CatalogLineage,
        build_lineage,
        declared_table_lineage,
        erasure_view,
    )
    from erasure.lineage.sql import (
        Depth,
        KnownTables,
        TableNaming,
        job_of,
        split_statements,
        sql_lineage,
        table_name,
    )
    from erasure.lineage.store import IngestReport, LineageStore, event_row
    from erasure.lineage.store.workers import default_workers

# Each exported name, and the module it lives in.
_HOMES: dict[str, str] = {
    # the graph a plan walks
    "CatalogLineage": "erasure.lineage.sources",
    "build_lineage": "erasure.lineage.sources",
    "declared_table_lineage": "erasure.lineage.sources",
    "erasure_view": "erasure.lineage.sources",
    "Closure": "erasure.lineage.graph",
    "InMemoryLineageGraph": "erasure.lineage.graph",
    "LineageGraph": "erasure.lineage.graph",
    "RetainedView": "erasure.lineage.graph",
    "coverage": "erasure.lineage.graph",
    "shrink_gaps": "erasure.lineage.shrink",
    # SQL column lineage
    "Depth": "erasure.lineage.sql",
    "KnownTables": "erasure.lineage.sql",
    "TableNaming": "erasure.lineage.sql",
    "job_of": "erasure.lineage.sql",
    "split_statements": "erasure.lineage.sql",
    "sql_lineage": "erasure.lineage.sql",
    "table_name": "erasure.lineage.sql",
    # OpenLineage run events
    "LastWriter": "erasure.lineage.openlineage",
    "RunEvent": "erasure.lineage.openlineage",
    "edges_from_events": "erasure.lineage.openlineage",
    "event_id": "erasure.lineage.openlineage",
    "parse_event": "erasure.lineage.openlineage",
    "read_event_file": "erasure.lineage.openlineage",
    "read_event_items": "erasure.lineage.openlineage",
    # the lineage store
    "IngestReport": "erasure.lineage.store",
    "LineageStore": "erasure.lineage.store",
    "default_workers": "erasure.lineage.store.workers",
    "event_row": "erasure.lineage.store",
}

__all__ = [
    "CatalogLineage",
    "Closure",
    "Depth",
    "InMemoryLineageGraph",
    "IngestReport",
    "KnownTables",
    "LastWriter",
    "LineageGraph",
    "LineageStore",
    "RetainedView",
    "RunEvent",
    "TableNaming",
    "build_lineage",
    "coverage",
    "declared_table_lineage",
    "default_workers",
    "edges_from_events",
    "erasure_view",
    "event_id",
    "event_row",
    "job_of",
    "parse_event",
    "read_event_file",
    "read_event_items",
    "shrink_gaps",
    "split_statements",
    "sql_lineage",
    "table_name",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
