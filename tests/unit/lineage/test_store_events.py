"""Raw OpenLineage events in the lineage store: once each, as received, never edited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.lineage import LineageStore
from erasure.lineage.openlineage import (
    RunEvent,
    edges_from_events,
    event_id,
    parse_event,
    read_event_file,
)
from erasure.store import Store, open_store
from erasure.store.schema import lineage_events
from tests.unit.lineage.stored_events import stored_events

DEMO_EVENTS = Path(__file__).resolve().parents[3] / "erasure/sample/estate/lineage/events.jsonl"


def _event(
    run_id: str = "01937a10-0000-7000-8000-0000000000aa", kind: str = "COMPLETE"
) -> RunEvent:
    return parse_event(
        {
            "eventType": kind,
            "eventTime": "2026-11-28T01:04:12Z",
            "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.20.3",
            "run": {"runId": run_id},
            "job": {"namespace": "airflow", "name": "build_marts.orders_daily"},
            "inputs": [{"namespace": "postgres://wh:5432", "name": "crm.orders"}],
            "outputs": [{"namespace": "postgres://wh:5432", "name": "marts.orders_daily"}],
        }
    )


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/erasure.db"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with open_store(db_url) as store:
        yield store


def _add(store: Store, *events: RunEvent) -> int:
    """Ingest the events; how many were new."""
    return LineageStore(store).ingest(list(events)).stored


def _count(store: Store) -> int:
    return LineageStore(store).counts()["events"]


def test_the_same_event_twice_is_stored_once(store: Store) -> None:
    assert _add(store, _event()) == 1
    assert _add(store, _event()) == 0
    assert _count(store) == 1


def test_key_order_and_whitespace_do_not_make_a_new_event(store: Store) -> None:
    raw = _event().raw
    reordered = json.dumps(dict(reversed(list(raw.items()))), indent=4)
    assert _add(store, _event())
    assert _add(store, parse_event(reordered)) == 0
    assert _count(store) == 1


def test_a_different_event_of_the_same_run_is_new(store: Store) -> None:
    assert _add(store, _event(kind="START"))
    assert _add(store, _event(kind="COMPLETE"))
    assert _count(store) == 2


def test_events_come_back_as_received_in_arrival_order(store: Store) -> None:
    sent = [_event("run-b", "START"), _event("run-a", "COMPLETE"), _event("run-b", "FAIL")]
    assert _add(store, *sent, sent[0]) == 3
    back = stored_events(store)
    assert [event_id(e) for e in back] == [event_id(e) for e in sent]
    assert [e.raw for e in back] == [e.raw for e in sent]


def test_stored_events_survive_reopening_the_store(db_url: str) -> None:
    with open_store(db_url) as store:
        _add(store, _event())
    with open_store(db_url) as store:
        assert _count(store) == 1
        assert _add(store, _event()) == 0


def test_the_planner_sees_the_same_edges_as_from_the_file(store: Store) -> None:
    from_file = read_event_file(DEMO_EVENTS)
    assert _add(store, *from_file) == len(from_file)
    assert _add(store, *from_file) == 0
    stored = edges_from_events(stored_events(store))
    direct = edges_from_events(from_file)
    assert stored.edges == direct.edges
    assert stored.gaps == direct.gaps


def test_the_database_refuses_to_edit_a_stored_event(store: Store) -> None:
    _add(store, _event())
    with pytest.raises(sa.exc.IntegrityError, match="immutable"), store.engine.begin() as conn:
        conn.execute(lineage_events.update().values(raw="{}"))
