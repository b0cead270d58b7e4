"""Raw OpenLineage run events, kept in the erasure store as evidence.

Events arrive on the plugin's Marquez-compatible endpoint (and from files). Each is stored
as received, once, less the run and job facets that are not lineage (`openlineage.minimised`:
Airflow's run facet carries the DAG run's conf, which is no evidence of lineage): the key
is its content hash (`openlineage.event_id`), so a producer that retries, or a file read
twice, adds nothing. Stored events are immutable (the database
refuses UPDATE). Adding one projects it into the lineage store's runs and edges
(`erasure.lineage.store`), which is what plans read; `events()` returns the raw evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import sqlalchemy as sa

from erasure.errors import LineageError
from erasure.lineage.openlineage import RunEvent, event_id, parse_event
from erasure.lineage.store import LineageStore, event_row
from erasure.store.database import Store, store_errors
from erasure.store.schema import lineage_events


class EventStore:
    """The store's `lineage_events` table: add events idempotently, read them all back.

    Adding goes through `LineageStore.ingest`, so every stored event is projected at once.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lineage = LineageStore(store)

    def add(self, event: RunEvent) -> bool:
        """Store `event` unless an identical one is stored; True if it was new."""
        return self.add_all([event]) == 1

    def add_all(self, events: Iterable[RunEvent]) -> int:
        """Store every event (duplicates skipped); returns how many were new.

        An event that cannot be stored as is (an overlong job or run id) raises LineageError
        before anything is stored; bulk ingest quarantines it instead.
        """
        batch = list(events)
        now = datetime.now(UTC)
        for event in batch:
            event_row(event, now)
        return self._lineage.ingest(batch).stored

    def events(self) -> list[RunEvent]:
        """Every stored event, in the order received."""
        query = sa.select(lineage_events.c.event_id, lineage_events.c.raw).order_by(
            lineage_events.c.received_at, lineage_events.c.event_id
        )
        with (
            store_errors(self._store, "read the OpenLineage events"),
            self._store.engine.connect() as conn,
        ):
            rows = conn.execute(query).all()
        return [_parse_stored(str(row.event_id), str(row.raw)) for row in rows]

    def count(self) -> int:
        """How many distinct events are stored."""
        query = sa.select(sa.func.count()).select_from(lineage_events)
        with (
            store_errors(self._store, "count the OpenLineage events"),
            self._store.engine.connect() as conn,
        ):
            return int(conn.execute(query).scalar_one())


def _parse_stored(stored_id: str, raw: str) -> RunEvent:
    try:
        event = parse_event(raw)
    except LineageError as exc:
        raise LineageError(f"stored OpenLineage event {stored_id} cannot be read: {exc}") from None
    if event_id(event) != stored_id:
        raise LineageError(
            f"stored OpenLineage event {stored_id} does not match its content hash: it was "
            "altered in the store"
        )
    return event
