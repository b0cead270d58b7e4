"""Raw OpenLineage run events, kept in the erasure store as evidence.

Events arrive on the plugin's Marquez-compatible endpoint (and from files). Each is stored
as received, once: the key is its content hash (`openlineage.event_id`), so a producer that
retries, or a file read twice, adds nothing. Stored events are immutable (the database
refuses UPDATE); the planner reads them back with `events()` and turns them into edges with
`openlineage.edges_from_events`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

import sqlalchemy as sa

from erasure.errors import LineageError
from erasure.lineage.openlineage import RunEvent, event_id, parse_event
from erasure.store.database import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import LINEAGE_JOB_LENGTH, LINEAGE_RUN_ID_LENGTH, lineage_events


class EventStore:
    """The store's `lineage_events` table: add events idempotently, read them all back."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def add(self, event: RunEvent) -> bool:
        """Store `event` unless an identical one is stored; True if it was new."""
        row = _row(event, datetime.now(UTC))
        insert = (
            conflict_insert(lineage_events, self._store.dialect)
            .values(**row)
            .on_conflict_do_nothing(index_elements=["event_id"])
            # RETURNING, not rowcount: psycopg 3 reports -1 for INSERT ... ON CONFLICT.
            .returning(lineage_events.c.event_id)
        )
        with (
            store_errors(self._store, "store an OpenLineage event"),
            self._store.engine.begin() as conn,
        ):
            return conn.execute(insert).first() is not None

    def add_all(self, events: Iterable[RunEvent]) -> int:
        """Store every event (duplicates skipped); returns how many were new."""
        return sum(self.add(event) for event in events)

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


def _row(event: RunEvent, received_at: datetime) -> dict[str, object]:
    job = f"{event.job.namespace}/{event.job.name}"
    if len(job) > LINEAGE_JOB_LENGTH:
        raise LineageError(
            f"OpenLineage event: job namespace and name are longer than {LINEAGE_JOB_LENGTH} "
            "characters together; shorten the job name"
        )
    if len(event.run.run_id) > LINEAGE_RUN_ID_LENGTH:
        raise LineageError(
            f"OpenLineage event: run.runId is longer than {LINEAGE_RUN_ID_LENGTH} characters; "
            "the spec expects a UUID"
        )
    return {
        "event_id": event_id(event),
        "job": job,
        "run_id": event.run.run_id,
        "event_type": event.event_type.value if event.event_type is not None else None,
        "event_time": event.event_time,
        "raw": json.dumps(event.raw, ensure_ascii=False, default=str),
        "received_at": received_at,
    }


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
