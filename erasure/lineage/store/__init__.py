"""The persistent lineage store: raw events in, projected edge intervals out.

`lineage_store` holds the store (`LineageStore`); `intake` takes events in, `events` keeps
them raw, `projection` turns runs into edge sets, `declared` keeps declared sources, `index`
is the columnar index plans read, `bulk` the bulk statements, `workers` the forked readers
of large event files (imported only by an ingest that forks them).
"""

from __future__ import annotations

from erasure.lineage.store.declared import DeclaredSource
from erasure.lineage.store.events import QuarantinedEvent, event_row
from erasure.lineage.store.intake import IngestReport
from erasure.lineage.store.lineage_store import LineageStore, PurgeReport

__all__ = [
    "DeclaredSource",
    "IngestReport",
    "LineageStore",
    "PurgeReport",
    "QuarantinedEvent",
    "event_row",
]
