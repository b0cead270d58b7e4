"""The raw events a store keeps, read back as a test looks at them."""

from __future__ import annotations

import sqlalchemy as sa

from erasure.lineage import RunEvent, parse_event
from erasure.store import Store
from erasure.store.schema import lineage_events


def stored_events(store: Store) -> list[RunEvent]:
    """Every stored raw event, in the order received."""
    query = sa.select(lineage_events.c.raw).order_by(
        lineage_events.c.received_at, lineage_events.c.event_id
    )
    with store.engine.connect() as conn:
        return [parse_event(str(raw)) for raw in conn.execute(query).scalars()]
