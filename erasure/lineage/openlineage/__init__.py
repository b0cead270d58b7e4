"""Observed lineage: OpenLineage run events turned into column-level edges.

`spec` holds the run event as the spec defines it and its content hash; `kept_facets` what
of it is stored (the facets lineage reads, the SQL without its values); `readers` reads
events from files and bodies; `column_facets` reads the column lineage facet into links;
`runs` merges a run's events and publishes its edges, a job's runs a timeline; `event_json`
is the JSON codec behind them (msgspec).
"""

from __future__ import annotations

from erasure.lineage.openlineage.column_facets import PlainLinks, link_key
from erasure.lineage.openlineage.kept_facets import minimised
from erasure.lineage.openlineage.readers import (
    EventElement,
    EventItem,
    decoded_element,
    decoded_elements,
    decoded_line,
    event_lines,
    read_event_elements,
    read_event_file,
    read_event_items,
)
from erasure.lineage.openlineage.runs import (
    ObservedEvent,
    ObservedLineage,
    OutputLineage,
    RunLineage,
    RunSummary,
    attempt_edges,
    edges_from_events,
    link_edge,
    observed,
    run_lineage,
    runs_from_events,
    timeline,
    timeline_edges,
    transferable,
)
from erasure.lineage.openlineage.spec import (
    EventDataset,
    EventJob,
    EventRun,
    RunEvent,
    RunState,
    event_id,
    event_text,
    parse_decoded,
    parse_event,
)
from erasure.lineage.openlineage.writers import (
    LastWriter,
    airflow_dag,
    last_writers,
    newest_first,
)

__all__ = [
    "EventDataset",
    "EventElement",
    "EventItem",
    "EventJob",
    "EventRun",
    "LastWriter",
    "ObservedEvent",
    "ObservedLineage",
    "OutputLineage",
    "PlainLinks",
    "RunEvent",
    "RunLineage",
    "RunState",
    "RunSummary",
    "airflow_dag",
    "attempt_edges",
    "decoded_element",
    "decoded_elements",
    "decoded_line",
    "edges_from_events",
    "event_id",
    "event_lines",
    "event_text",
    "last_writers",
    "link_edge",
    "link_key",
    "minimised",
    "newest_first",
    "observed",
    "parse_decoded",
    "parse_event",
    "read_event_elements",
    "read_event_file",
    "read_event_items",
    "run_lineage",
    "runs_from_events",
    "timeline",
    "timeline_edges",
    "transferable",
]
