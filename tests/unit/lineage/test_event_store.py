"""Raw OpenLineage events in the erasure store: once each, as received, never edited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.errors import LineageError
from erasure.lineage.event_store import EventStore
from erasure.lineage.openlineage import (
    RunEvent,
    edges_from_events,
    event_id,
    parse_event,
    read_event_file,
)
from erasure.store import Store, open_store
from erasure.store.schema import lineage_events

DEMO_EVENTS = (
    Path(__file__).resolve().parents[3] / "erasure/sample/estate/lineage/events.jsonl"
)


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


def test_the_same_event_twice_is_stored_once(store: Store) -> None:
    events = EventStore(store)
    assert events.add(_event()) is True
    assert events.add(_event()) is False
    assert events.count() == 1


def test_key_order_and_whitespace_do_not_make_a_new_event(store: Store) -> None:
    events = EventStore(store)
    raw = _event().raw
    reordered = json.dumps(dict(reversed(list(raw.items()))), indent=4)
    assert events.add(_event())
    assert events.add(parse_event(reordered)) is False
    assert events.count() == 1


def test_a_different_event_of_the_same_run_is_new(store: Store) -> None:
    events = EventStore(store)
    assert events.add(_event(kind="START"))
    assert events.add(_event(kind="COMPLETE"))
    assert events.count() == 2


def test_events_come_back_as_received_in_arrival_order(store: Store) -> None:
    events = EventStore(store)
    sent = [_event("run-b", "START"), _event("run-a", "COMPLETE"), _event("run-b", "FAIL")]
    assert events.add_all([*sent, sent[0]]) == 3
    back = events.events()
    assert [event_id(e) for e in back] == [event_id(e) for e in sent]
    assert [e.raw for e in back] == [e.raw for e in sent]


def test_stored_events_survive_reopening_the_store(db_url: str) -> None:
    with open_store(db_url) as store:
        EventStore(store).add(_event())
    with open_store(db_url) as store:
        assert EventStore(store).count() == 1
        assert EventStore(store).add(_event()) is False


def test_the_planner_sees_the_same_edges_as_from_the_file(store: Store) -> None:
    from_file = read_event_file(DEMO_EVENTS)
    events = EventStore(store)
    assert events.add_all(from_file) == len(from_file)
    assert events.add_all(from_file) == 0
    stored = edges_from_events(events.events())
    direct = edges_from_events(from_file)
    assert stored.edges == direct.edges
    assert stored.gaps == direct.gaps


def test_the_database_refuses_to_edit_a_stored_event(store: Store) -> None:
    EventStore(store).add(_event())
    with pytest.raises(sa.exc.IntegrityError, match="immutable"), store.engine.begin() as conn:
        conn.execute(lineage_events.update().values(raw="{}"))


def test_an_event_altered_in_the_store_is_refused_on_read(store: Store) -> None:
    EventStore(store).add(_event())
    with store.engine.begin() as conn:  # whoever holds the file can drop the trigger
        conn.exec_driver_sql("DROP TRIGGER lineage_events_no_update")
        conn.execute(lineage_events.update().values(raw=json.dumps(_event("other").raw)))
    with pytest.raises(LineageError, match="does not match its content hash"):
        EventStore(store).events()


def test_a_run_id_longer_than_the_column_is_refused_before_the_database(store: Store) -> None:
    with pytest.raises(LineageError, match="runId is longer than 255"):
        EventStore(store).add(_event("x" * 300))
    assert EventStore(store).count() == 0
