"""The lineage store: events projected once into runs and edge intervals, read back by plans.

Every test runs on SQLite (embedded) and on the local Postgres (production) alike.
"""

from __future__ import annotations

import gc
import json
import random
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure.errors import LineageError
from erasure.lineage.graph import snapshot_digest
from erasure.lineage.openlineage import (
    EventElement,
    parse_event,
    runs_from_events,
    timeline_edges,
)
from erasure.lineage.store import DeclaredSource, LineageStore
from erasure.model import (
    DatasetRef,
    EdgeOrigin,
    EdgeSubtype,
    EdgeType,
    FieldRef,
    LineageEdge,
)
from erasure.store import Store, open_store
from erasure.store.schema import lineage_edge_sets, lineage_index
from tests.unit.lineage.stored_events import stored_events

NS = "postgres://wh:5432"
JOB = "build_marts.customer_ltv"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/erasure.db"
    else:
        base = request.getfixturevalue("postgres_url")
        url = base
    with open_store(url) as opened:
        if request.param == "postgres":  # one database for the session: start each test empty
            with opened.engine.begin() as conn:
                for table in (
                    "lineage_index", "lineage_edge_sets", "lineage_outputs", "lineage_runs",
                    "lineage_sources", "lineage_quarantine", "lineage_datasets",
                ):  # fmt: skip
                    conn.exec_driver_sql(f"DELETE FROM {table}")
                conn.exec_driver_sql("ALTER TABLE lineage_events DISABLE TRIGGER USER")
                conn.exec_driver_sql("DELETE FROM lineage_events")
                conn.exec_driver_sql("ALTER TABLE lineage_events ENABLE TRIGGER USER")
        yield opened


def event(
    run: str,
    kind: str = "COMPLETE",
    at: str = "2026-11-01T02:00:00Z",
    columns: dict[str, list[str]] | None = None,
    job: str = JOB,
    output: str = "marts.customer_ltv",
) -> dict[str, Any]:
    """A run event of `job` writing `output`; `columns` maps output column -> input columns."""
    fields = {
        target: {
            "inputFields": [
                {"namespace": NS, "name": "crm.orders", "field": source} for source in sources
            ]
        }
        for target, sources in (columns or {"ltv": ["amount"]}).items()
    }
    return {
        "eventType": kind,
        "eventTime": at,
        "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.20.3",
        "run": {"runId": run},
        "job": {"namespace": "airflow", "name": job},
        "inputs": [{"namespace": NS, "name": "crm.orders"}],
        "outputs": [
            {"namespace": NS, "name": output, "facets": {"columnLineage": {"fields": fields}}}
        ],
    }


def ingest(store: Store, *events: dict[str, Any]) -> Any:
    return LineageStore(store).ingest([parse_event(e) for e in events])


def current(store: Store) -> set[tuple[str, str]]:
    graph = LineageStore(store).graph()
    return {(str(e.source), str(e.target)) for e in graph.edges() if e.valid_to is None}


ORDERS = DatasetRef(NS, "crm.orders")
LTV = DatasetRef(NS, "marts.customer_ltv")


def test_a_completed_run_publishes_its_edges_once(store: Store) -> None:
    first = ingest(store, event("r1", "START"), event("r1"))
    assert (first.stored, first.runs, first.edges_opened) == (2, 1, 1)
    again = ingest(store, event("r1", "START"), event("r1"))
    assert (again.stored, again.duplicates, again.edges_opened) == (0, 2, 0)
    assert current(store) == {("crm.orders.amount", "marts.customer_ltv.ltv")}
    (run,) = LineageStore(store).runs()
    assert (run["state"], run["events"]) == ("COMPLETE", 2)


def test_failed_and_aborted_runs_are_evidence_without_edges(store: Store) -> None:
    ingest(store, event("r1", "START"), event("r1", "FAIL"), event("r2", "ABORT"))
    assert current(store) == set()
    assert {r["state"] for r in LineageStore(store).runs()} == {"FAIL", "ABORT"}


def test_a_later_complete_supersedes_the_jobs_earlier_edges(store: Store) -> None:
    ingest(store, event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["amount"]}))
    ingest(store, event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["net_amount"]}))
    graph = LineageStore(store).graph()
    old = datetime(2026, 11, 1, 12, tzinfo=UTC)
    new = datetime(2026, 11, 2, 12, tzinfo=UTC)
    into = {at: {str(e.source) for e in graph.edges_into(LTV, as_of=at)} for at in (old, new)}
    assert into == {old: {"crm.orders.amount"}, new: {"crm.orders.net_amount"}}
    assert {str(e.source) for e in graph.edges_into(LTV)} == {"crm.orders.net_amount"}
    before = datetime(2026, 10, 1, tzinfo=UTC)
    assert graph.forward_closure([ORDERS], as_of=before).datasets == [ORDERS]


def test_repeated_runs_with_the_same_lineage_add_no_edge_rows(store: Store) -> None:
    runs = [event(f"r{d}", at=f"2026-11-{d:02d}T02:00:00Z") for d in range(1, 29)]
    report = ingest(store, *runs)
    assert (report.stored, report.edges_opened, report.edges_closed) == (28, 1, 0)
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(lineage_edge_sets)).scalar() == 1


def test_a_late_run_is_placed_in_its_time_not_its_arrival(store: Store) -> None:
    ingest(store, event("r3", at="2026-11-03T02:00:00Z", columns={"ltv": ["c"]}))
    ingest(store, event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}))
    ingest(store, event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["b"]}))
    graph = LineageStore(store).graph()
    sources = {
        day: {
            str(e.source)
            for e in graph.edges_into(LTV, as_of=datetime(2026, 11, day, 12, tzinfo=UTC))
        }
        for day in (1, 2, 3)
    }
    assert sources == {1: {"crm.orders.a"}, 2: {"crm.orders.b"}, 3: {"crm.orders.c"}}


def test_the_store_agrees_with_the_in_memory_timeline(store: Store) -> None:
    events = [
        event("r1", "START", at="2026-11-01T01:00:00Z"),
        event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"], "n": ["b"]}),
        event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["a"]}),
        event("r3", "FAIL", at="2026-11-03T02:00:00Z", columns={"ltv": ["z"]}),
        event("r4", at="2026-11-04T02:00:00Z", columns={"ltv": ["a"], "n": ["b"]}),
        event("x1", at="2026-11-02T03:00:00Z", job="other", output="marts.other"),
    ]
    parsed = [parse_event(e) for e in events]
    LineageStore(store, batch_size=2).ingest(parsed)
    expected = timeline_edges(runs_from_events(parsed)).edges
    graph = LineageStore(store).graph()
    assert set(graph.edges()) == set(expected)
    assert graph.snapshot_id() == snapshot_digest(expected)


def test_a_late_repetition_of_the_current_lineage_changes_nothing(store: Store) -> None:
    ingest(store, event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}))
    ingest(store, event("r3", at="2026-11-03T02:00:00Z", columns={"ltv": ["b"]}))
    ingest(store, event("r5", at="2026-11-05T02:00:00Z", columns={"ltv": ["b"]}))
    before = LineageStore(store).graph().snapshot_id()
    sets = sa.select(lineage_edge_sets.c.id).order_by("id")
    with store.engine.connect() as conn:
        before_sets = conn.execute(sets).scalars().all()
    late = ingest(store, event("r4", at="2026-11-04T02:00:00Z", columns={"ltv": ["b"]}))
    assert (late.stored, late.edges_opened, late.edges_closed) == (1, 0, 0)  # not replayed
    with store.engine.connect() as conn:
        assert conn.execute(sets).scalars().all() == before_sets
    assert LineageStore(store).graph().snapshot_id() == before
    # Late with the current links but before the current set began: its interval moves.
    ingest(store, event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["b"]}))
    graph = LineageStore(store).graph()
    on_the_2nd = datetime(2026, 11, 2, 12, tzinfo=UTC)
    assert {str(e.source) for e in graph.edges_into(LTV, as_of=on_the_2nd)} == {"crm.orders.b"}


def _agrees_with_the_timeline(store: Store, sent: list[dict[str, Any]]) -> None:
    for e in sent:  # one at a time: each arrives after the others before it
        ingest(store, e)
    expected = timeline_edges(runs_from_events([parse_event(e) for e in sent])).edges
    assert set(LineageStore(store).graph().edges()) == set(expected)


def test_one_batch_replaying_many_outputs_gives_the_timeline_of_each(store: Store) -> None:
    """Late runs, a FAIL after a COMPLETE and a run completing again, for several jobs and
    outputs in one batch: each output replayed alone gives its own timeline; an output no
    completed run writes any more keeps no current edges."""
    early = []
    for k in range(4):
        job, output = f"job{k}", f"marts.out{k}"
        early.append(event(f"a{k}", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]},
                           job=job, output=output))  # fmt: skip
        early.append(event(f"c{k}", at="2026-11-03T02:00:00Z", columns={"ltv": ["c"]},
                           job=job, output=output))  # fmt: skip
    early.append(event("x0", at="2026-11-01T02:00:00Z", job="job9", output="marts.gone"))
    ingest(store, *early)
    late = [
        event("b0", at="2026-11-02T02:00:00Z", columns={"ltv": ["b"]}, job="job0",
              output="marts.out0"),
        event("b1", at="2026-11-02T02:00:00Z", columns={"ltv": ["b"], "n": ["id"]},
              job="job1", output="marts.out1"),
        event("c2", "FAIL", at="2026-11-03T05:00:00Z", columns={"ltv": ["c"]}, job="job2",
              output="marts.out2"),
        event("a3", at="2026-11-04T02:00:00Z", columns={"ltv": ["a"]}, job="job3",
              output="marts.out3"),
        event("x0", "FAIL", at="2026-11-01T05:00:00Z", job="job9", output="marts.gone"),
    ]  # fmt: skip
    report = ingest(store, *late)
    assert report.stored == len(late)
    expected = timeline_edges(runs_from_events([parse_event(e) for e in early + late])).edges
    assert set(LineageStore(store).graph().edges()) == set(expected)
    assert not any(e.target.dataset.name == "marts.gone" for e in expected)


def test_a_run_that_fails_after_its_complete_takes_its_edges_back(store: Store) -> None:
    _agrees_with_the_timeline(
        store,
        [
            event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}),
            event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["b"]}),
            event("r2", "FAIL", at="2026-11-02T05:00:00Z", columns={"ltv": ["b"]}),
        ],
    )


def test_an_output_whose_only_run_failed_after_all_starts_afresh(store: Store) -> None:
    _agrees_with_the_timeline(
        store,
        [
            event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}),
            event("r1", "FAIL", at="2026-11-01T05:00:00Z", columns={"ltv": ["a"]}),
            event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["a"]}),
        ],
    )


def test_a_completed_run_that_completes_again_later_moves_in_the_timeline(store: Store) -> None:
    _agrees_with_the_timeline(
        store,
        [
            event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}),
            event("r2", at="2026-11-03T02:00:00Z", columns={"ltv": ["a"]}),
            event("r1", at="2026-11-02T02:00:00Z", columns={"ltv": ["a"]}),  # r1 again, later
        ],
    )


def test_a_late_run_at_the_instant_the_current_set_began_is_placed_by_run_id(
    store: Store,
) -> None:
    _agrees_with_the_timeline(
        store,
        [
            event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}),
            event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["a"]}),
            event("r0", at="2026-11-01T02:00:00Z", columns={"ltv": ["a"]}),  # opens it, by id
        ],
    )


@pytest.mark.parametrize("seed", range(16))
def test_any_arrival_order_gives_the_timeline_of_the_runs(store: Store, seed: int) -> None:
    # Runs of two jobs over 14 days, lineage changing now and then, failures, runs of one
    # job completing at the same instant, runs whose COMPLETE is followed by a later
    # COMPLETE or a FAIL; sent in a random order, in random batches, some twice: the store
    # holds what all of them say.
    rng = random.Random(seed)
    lineages = [{"ltv": ["a"]}, {"ltv": ["b"]}, {"ltv": ["a"], "n": ["c"]}]
    events = []
    for day in range(1, 15):
        for job, output in ((JOB, "marts.customer_ltv"), ("build_marts.other", "marts.other")):
            at = f"2026-11-{day:02d}T0{len(events) % 10}:00:00Z"
            for run in [f"{job}-{day}"] + ([f"{job}-{day}-tie"] if rng.random() < 0.2 else []):
                kind = "FAIL" if rng.random() < 0.1 else "COMPLETE"
                columns = lineages[min(day // 5, 2)] if rng.random() < 0.8 else rng.choice(lineages)
                events.append(event(run, kind, at, columns, job=job, output=output))
                if rng.random() < 0.15:  # the run ends again, later
                    later = f"2026-11-{day:02d}T1{rng.randint(0, 9)}:00:00Z"
                    again = rng.choice(["COMPLETE", "FAIL"])
                    events.append(event(run, again, later, rng.choice(lineages), job, output))
    order = events + rng.sample(events, 5)
    rng.shuffle(order)
    lineage = LineageStore(store, batch_size=rng.randint(1, 6))
    for start in range(0, len(order), 7):
        lineage.ingest([parse_event(e) for e in order[start : start + 7]])
    expected = timeline_edges(runs_from_events([parse_event(e) for e in events])).edges
    assert set(LineageStore(store).graph().edges()) == set(expected)


def test_plans_read_an_index_that_follows_every_change(store: Store) -> None:
    lineage = LineageStore(store)
    ingest(store, event("r1", at="2026-11-01T02:00:00Z"))
    first = lineage.graph()  # builds and saves the index
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(lineage_index.c.version)).scalar() is not None
    ingest(store, event("r2", at="2026-11-02T02:00:00Z", columns={"ltv": ["b"]}))
    second = lineage.graph()  # the saved index plus the rows changed since
    assert set(second.edges()) != set(first.edges())
    assert second.snapshot_id() == snapshot_digest(second.edges())
    rebuilt = LineageStore(store)
    with store.engine.begin() as conn:
        conn.execute(lineage_index.delete())
    assert rebuilt.graph().snapshot_id() == second.snapshot_id()


def test_a_job_event_is_stored_as_sent_and_published_until_a_run_supersedes_it(
    store: Store,
) -> None:
    """Static lineage (an OpenLineage JobEvent, no run) is accepted over the HTTP door's path,
    stored as sent, and published as its job's lineage until a later run of the job."""
    static = event("unused", at="2026-10-31T00:00:00Z", columns={"ltv": ["amount"]})
    del static["eventType"], static["run"]
    static["schemaURL"] = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/JobEvent"
    lineage = LineageStore(store)
    report = lineage.ingest_json([static, static], origin="http")
    assert (report.received, report.stored, report.duplicates) == (2, 1, 1)
    assert current(store) == {("crm.orders.amount", "marts.customer_ltv.ltv")}
    (run,) = lineage.runs()
    assert (run["state"], str(run["run_id"]).startswith("job-event:")) == ("COMPLETE", True)
    (stored,) = stored_events(store)
    assert "run" not in stored.content() and stored.content()["schemaURL"].endswith("JobEvent")
    ingest(store, event("r1", at="2026-11-01T02:00:00Z", columns={"ltv": ["net_amount"]}))
    assert current(store) == {("crm.orders.net_amount", "marts.customer_ltv.ltv")}


def test_a_jobs_next_run_after_an_upgrade_is_read_under_todays_rules(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Projected by a version before declared inputs a column facet leaves out reached the
    output, a job's lineage is read again at its next run (the rules' version is part of the
    facets' digest), not taken for a repetition of what the old rules projected."""
    from erasure.lineage.openlineage import column_facets, runs

    def run(run_id: str, at: str) -> dict[str, Any]:
        found = event(run_id, at=at)
        found["inputs"].append({"namespace": NS, "name": "crm.customers"})  # not in the facet
        return found

    with monkeypatch.context() as old:  # as the version before projected it
        old.setattr(runs, "LINK_RULES", 1)
        old.setattr(runs, "declared_links", lambda *_: [])
        old.setattr(column_facets, "declared_links", lambda *_: [])
        ingest(store, run("r1", "2026-11-01T02:00:00Z"))
        assert current(store) == {("crm.orders.amount", "marts.customer_ltv.ltv")}
    ingest(store, run("r2", "2026-11-02T02:00:00Z"))  # the same facets, the next night
    assert current(store) == {
        ("crm.orders.amount", "marts.customer_ltv.ltv"),
        ("crm.customers.*", "marts.customer_ltv.*"),
    }


def test_malformed_events_are_quarantined_with_their_reason(store: Store) -> None:
    lineage = LineageStore(store)
    broken = event("r1")
    del broken["eventTime"]
    report = lineage.ingest_json([event("r2"), broken, "not an event"], origin="http")
    assert (report.received, report.stored, report.quarantined) == (3, 1, 2)
    reasons = [q.reason for q in lineage.quarantined()]
    assert any("eventTime" in r for r in reasons)
    assert any("must be a JSON object" in r for r in reasons)
    assert report.results[1]["error"] and report.results[0]["stored"] is True


def test_an_event_file_with_bad_lines_stores_the_good_ones(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(event("r1")) + "\n{not json\n" + json.dumps(event("r2")) + "\n")
    report = LineageStore(store).ingest_file(path)
    assert (report.stored, report.quarantined) == (2, 1)
    (bad,) = LineageStore(store).quarantined()
    assert bad.origin == f"{path}:2"
    # The body is not kept (it was never minimised): its digest says which it was.
    assert re.fullmatch(r"sha256:[0-9a-f]{64} \(9 bytes, not kept\)", bad.body)


CANARY = "zoë.canary@example.org"


def _with_airflow_facets(e: dict[str, Any]) -> dict[str, Any]:
    """`e` as Airflow's OpenLineage provider sends it: the DAG run's conf and note in `run`."""
    dag_run = {"conf": {"identifier": CANARY, "notes": f"called about {CANARY}"}, "note": CANARY}
    e["run"]["facets"] = {
        "airflow": {"dagRun": dag_run},
        "errorMessage": {"message": f"parameters: ('{CANARY}',)"},
        "parent": {"run": {"runId": "01a231cf-c230-787d-8d3a-39f8446f0a0d"}},
    }
    e["job"]["facets"] = {"airflow": {"taskTree": {}}, "ownership": {"owners": [CANARY]}}
    return e


def _stored_text(store: Store) -> str:
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT raw FROM lineage_events").all()
        rows += conn.exec_driver_sql("SELECT body FROM lineage_quarantine").all()
    return "\n".join(str(row[0]) for row in rows)


def test_run_and_job_facets_that_are_not_lineage_are_never_stored(
    store: Store, tmp_path: Path
) -> None:
    lineage = LineageStore(store)
    lineage.ingest([parse_event(_with_airflow_facets(event("r1", "START")))])
    broken = _with_airflow_facets(event("r2"))
    del broken["eventTime"]
    lineage.ingest_json([_with_airflow_facets(event("r2")), broken], origin="http")
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(_with_airflow_facets(event("r3"))) + "\n")
    report = lineage.ingest_file(path)

    assert report.stored == 1 and lineage.quarantined()
    stored = _stored_text(store)
    assert "canary" not in stored and "canary" not in json.dumps(stored)
    (kept,) = [e for e in stored_events(store) if e.run.run_id == "r3"]
    assert set(kept.run.facets) == {"parent"} and not kept.job.facets
    assert current(store) == {("crm.orders.amount", "marts.customer_ltv.ltv")}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_facet_given_twice_under_one_key_never_stores_the_first(
    store: Store, tmp_path: Path, workers: int
) -> None:
    """JSON text with a key twice decodes to its last value: a producer sending an ownership
    facet and then `"facets": {}` (or a transformationDescription, then the marker) must not
    have the first stored with the text as read (RFC 8259: names SHOULD be unique)."""
    line = json.dumps(event("r1"))
    owned = json.dumps({"ownership": {"owners": [{"name": CANARY}]}})
    twice = line.replace('"outputs": [{', f'"outputs": [{{"facets": {owned}, "facets": {{}}, ', 1)
    assert twice != line
    path = tmp_path / "events.jsonl"
    path.write_text(twice + "\n")
    report = LineageStore(store).ingest_file(path, workers=workers)
    assert report.stored == 1
    assert "canary" not in _stored_text(store)


def test_events_differing_only_in_dropped_facets_are_one_event(store: Store) -> None:
    plain, with_conf = event("r1"), _with_airflow_facets(event("r1"))
    del with_conf["run"]["facets"]["parent"]
    assert ingest(store, plain).stored == 1
    assert ingest(store, with_conf).stored == 0


def _with_dataset_facets(e: dict[str, Any]) -> dict[str, Any]:
    """`e` with the dataset facets producers add beside lineage, each quoting the canary, and
    a `sql` job facet whose statement names it as a value and in a comment."""
    measured = {"columnMetrics": {"email": {"min": CANARY, "distinctCount": 1}}}
    e["inputs"][0]["facets"] = {
        "dataQualityMetrics": measured,
        "symlinks": {"identifiers": [{"namespace": NS, "name": "crm.orders_v2", "type": "TABLE"}]},
    }
    e["inputs"][0]["inputFacets"] = {"dataQualityMetrics": measured}
    output = e["outputs"][0]
    # The facets lineage keeps, each with the free text the spec allows in it.
    e["inputs"][0]["facets"]["symlinks"]["identifiers"][0]["description"] = CANARY
    for column in output["facets"]["columnLineage"]["fields"].values():
        column["transformationDescription"] = f"drops {CANARY}"
        for source in column["inputFields"]:
            source["transformations"] = [
                {"type": "DIRECT", "subtype": "IDENTITY", "description": CANARY, "masking": False}
            ]
    output["facets"] |= {
        "schema": {"fields": [{"name": "ltv", "type": "numeric", "description": CANARY}]},
        "ownership": {"owners": [{"name": f"user:{CANARY}"}]},
        "columnMetrics": measured,
        "acme_sample_rows": {"rows": [[CANARY, 42]]},
    }
    output["outputFacets"] = {"outputStatistics": {"rowCount": 1}, "note": CANARY}
    output["sample"] = CANARY  # a key the spec does not define
    e["job"]["facets"] = {
        "sql": {
            "query": f"INSERT INTO marts.customer_ltv SELECT o.amount AS ltv FROM crm.orders AS o "
            f"WHERE o.email <> '{CANARY}' AND o.amount > 12.5 -- not {CANARY}",
            "dialect": "postgres",
        },
        "documentation": {"description": f"asked for by {CANARY}"},
    }
    return e


def test_dataset_facets_that_are_not_lineage_and_sql_values_are_never_stored(
    store: Store, tmp_path: Path
) -> None:
    lineage = LineageStore(store)
    lineage.ingest([parse_event(_with_dataset_facets(event("r1", "START")))])
    lineage.ingest_json([_with_dataset_facets(event("r2"))], origin="http")
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(_with_dataset_facets(event("r3"))) + "\n")
    assert lineage.ingest_file(path).stored == 1

    stored = _stored_text(store)
    assert "canary" not in stored.lower() and "12.5" not in stored
    (kept,) = [e for e in stored_events(store) if e.run.run_id == "r3"]
    (source,), (output,) = kept.content()["inputs"], kept.content()["outputs"]
    assert source.keys() == {"namespace", "name", "facets"} == output.keys()
    assert set(source["facets"]) == {"symlinks"}
    assert set(output["facets"]) == {"schema", "columnLineage"}
    assert set(kept.job.facets) == {"sql"}
    assert kept.job.facets["sql"] == {
        "query": "INSERT INTO marts.customer_ltv SELECT o.amount AS ltv FROM crm.orders AS o "
        "WHERE o.email <> %s AND o.amount > %s",
        "dialect": "postgres",
    }
    # Lineage is read as before from what is kept.
    assert current(store) == {("crm.orders.amount", "marts.customer_ltv.ltv")}


def test_a_query_that_cannot_be_read_is_dropped_and_says_so(store: Store) -> None:
    unreadable = event("r1")
    unreadable["job"]["facets"] = {"sql": {"query": f"SELEC '{CANARY}' FROM (("}}
    assert ingest(store, unreadable).stored == 1
    assert "canary" not in _stored_text(store).lower()
    (kept,) = stored_events(store)
    assert kept.job.facets["sql"] == {"queryDropped": True}


def _declared(key: str, digest: str, source_col: str, calls: list[str]) -> DeclaredSource:
    def parse() -> tuple[list[LineageEdge], list[Any]]:
        calls.append(key)
        edge = LineageEdge(
            FieldRef(ORDERS, source_col),
            FieldRef(LTV, "ltv"),
            EdgeType.DIRECT,
            EdgeSubtype.AGGREGATION,
            EdgeOrigin.DECLARED,
            "sql:marts.customer_ltv.sql",
        )
        return [edge], []

    return DeclaredSource(key=key, kind="sql", digest=digest, parse=parse)


def test_declared_lineage_is_parsed_when_it_changes_not_per_plan(store: Store) -> None:
    lineage, calls = LineageStore(store), []
    lineage.sync_declared("catalog:a", [_declared("sql:x", "d1", "amount", calls)])
    lineage.sync_declared("catalog:a", [_declared("sql:x", "d1", "amount", calls)])
    assert calls == ["sql:x"]
    lineage.sync_declared("catalog:a", [_declared("sql:x", "d2", "net", calls)])
    assert calls == ["sql:x", "sql:x"]
    graph = lineage.graph()
    assert {str(e.source) for e in graph.edges_into(LTV)} == {"crm.orders.net"}
    # the first version was always valid, until the change
    assert {
        str(e.source) for e in graph.edges_into(LTV, as_of=datetime(2000, 1, 1, tzinfo=UTC))
    } == {"crm.orders.amount"}
    lineage.sync_declared("catalog:a", [])  # the file is gone from the catalog
    assert list(lineage.graph().edges_into(LTV)) == []


def test_two_plans_storing_the_same_new_declared_lineage_at_once_both_succeed(
    store: Store,
) -> None:
    """Twenty requests planned at once: the second plan read the sources as unknown before the
    first stored them, then waited for the first's lock; it must not insert them again."""
    calls: list[str] = []
    second: list[BaseException | list[Any]] = []

    def plan_beside() -> None:
        try:
            second.append(LineageStore(store).sync_declared("catalog:a", sources()))
        except BaseException as exc:  # reported by the main thread
            second.append(exc)

    beside = threading.Thread(target=plan_beside)

    def parse_slowly() -> tuple[list[LineageEdge], list[Any]]:
        beside.start()  # reads the sources as unknown, then waits for this plan's lock
        time.sleep(0.5)
        return _declared("sql:x", "d1", "amount", calls).parse()

    def sources() -> list[DeclaredSource]:
        return [DeclaredSource(key="sql:x", kind="sql", digest="d1", parse=parse_slowly)]

    LineageStore(store).sync_declared("catalog:a", sources())
    beside.join(timeout=30)
    assert second == [[]], second  # no gaps, no error
    assert calls == ["sql:x"]  # parsed once: the second plan found it stored
    assert {str(e.source) for e in LineageStore(store).graph().edges_into(LTV)} == {
        "crm.orders.amount"
    }


def test_a_dataset_another_process_stored_since_is_not_stored_again(store: Store) -> None:
    """The API server's long-lived store and a CLI ingest beside it: each one's dataset ids
    are a cache, read again for what it does not know before inserting."""
    server, cli = LineageStore(store), LineageStore(store)
    server.ingest([parse_event(event("r1"))])  # the server's cache: crm.orders, customer_ltv
    cli.ingest([parse_event(event("r2", job="other", output="marts.new_mart"))])
    server.ingest([parse_event(event("r3", job="third", output="marts.new_mart"))])  # no error
    assert any(target.startswith("marts.new_mart.") for _source, target in current(store))


def test_datasets_are_told_apart_by_namespace_and_name_however_they_are_spelled(
    store: Store,
) -> None:
    """Dataset identities are bound as JSON: quotes, backslashes, other scripts and the same
    name in two namespaces each get their own id, found again by a store that starts cold."""
    names = ['marts."quoted"', "marts.back\\slash", "marts.ünïcode_表", "s3://bucket/a b/c"]
    sent = []
    for k, name in enumerate(names):
        for namespace in (NS, "s3://other"):
            e = event(f"r{k}{namespace}", job=f"job{k}", output=name)
            e["outputs"][0]["namespace"] = namespace
            sent.append(e)
    ingest(store, *sent)
    with store.engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT id, namespace, name FROM lineage_datasets").all()
    identities = {(ns, name) for _, ns, name in stored}
    assert len(stored) == len(identities) == 2 * len(names) + 1  # and crm.orders
    assert {(ns, n) for n in names for ns in (NS, "s3://other")} <= identities
    again = ingest(store, *[{**e, "run": {"runId": e["run"]["runId"] + "b"}} for e in sent])
    assert again.stored == len(sent)
    with store.engine.connect() as conn:
        after = conn.exec_driver_sql("SELECT id, namespace, name FROM lineage_datasets").all()
    assert sorted(after) == sorted(stored)  # no identity stored twice, no id moved


def test_plans_saving_the_index_at_once_all_succeed(store: Store) -> None:
    ingest(store, event("r1"))
    start = threading.Barrier(6)
    failures: list[BaseException] = []

    def plan() -> None:
        start.wait()
        try:
            LineageStore(store).graph()
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=plan) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(lineage_index)).scalar() == 1


def test_retention_purges_old_evidence_but_keeps_current_edges(store: Store) -> None:
    lineage = LineageStore(store)
    ingest(store, event("r1", at="2025-01-01T02:00:00Z", columns={"ltv": ["a"]}))
    ingest(store, event("r2", at="2025-02-01T02:00:00Z", columns={"ltv": ["b"]}))
    report = lineage.purge(30, now=datetime(2026, 12, 1, tzinfo=UTC))
    assert (report.events, report.runs, report.edges) == (2, 2, 1)
    assert current(store) == {("crm.orders.b", "marts.customer_ltv.ltv")}


def test_a_plan_over_the_store_is_the_plan_over_the_files(tmp_path: Path) -> None:
    """The demo estate planned both ways: same items, coverage, gaps and lineage snapshot."""
    from pydantic import SecretStr

    from erasure.model import SubjectRef
    from erasure.sample.seed import DEMO_SUBJECT, build_demo
    from erasure.workflow import make_plan

    catalog = build_demo(tmp_path / "demo")
    subject = SubjectRef(type=DEMO_SUBJECT[0], value=SecretStr(DEMO_SUBJECT[1]))
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    in_memory = make_plan(catalog, subject, now=now, as_of=now)
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as opened:
        stored = make_plan(catalog, subject, now=now, as_of=now, lineage_store=LineageStore(opened))
        again = make_plan(catalog, subject, now=now, as_of=now, lineage_store=LineageStore(opened))
    for plan in (stored, again):
        assert plan.items == in_memory.items
        assert (plan.coverage, plan.gaps, plan.cycles) == (
            in_memory.coverage,
            in_memory.gaps,
            in_memory.cycles,
        )
        assert plan.lineage_snapshot == in_memory.lineage_snapshot
        assert plan.lineage_as_of == now


def test_an_http_body_is_stored_as_its_events_and_its_bad_elements_quarantined(
    store: Store,
) -> None:
    lineage = LineageStore(store)
    good = json.dumps(event("r1"), indent=1)
    body = f"[{good}, {json.dumps('not an event')}]".encode()
    report = lineage.ingest_body(body, origin="http")
    assert (report.received, report.stored, report.quarantined) == (2, 1, 1)
    with store.engine.connect() as conn:
        raw = conn.exec_driver_sql("SELECT raw FROM lineage_events").scalar_one()
    # The event encoded again, compact, in the order sent: never the text as sent, which may
    # hold a key twice (tests: a facet given twice).
    assert raw == json.dumps(json.loads(good), separators=(",", ":"))
    assert lineage.ingest_body(body, origin="http").stored == 0  # the same body again
    surrogate = json.dumps(event("r2")).replace('"r2"', '"r2\\ud800"')  # not valid Unicode
    report = lineage.ingest_body(f"[{surrogate}, {json.dumps(event('r3'))}]".encode())
    assert (report.stored, report.quarantined) == (1, 1)
    reasons = sorted(q.reason for q in lineage.quarantined())
    assert "lone surrogate" in reasons[0] and "must be a JSON object" in reasons[1]


def test_an_http_body_that_is_not_json_is_quarantined_whole(store: Store) -> None:
    lineage = LineageStore(store)
    with pytest.raises(LineageError, match="not valid JSON"):
        lineage.ingest_body(b'[{"eventType": "START", oops', origin="http")
    (kept,) = lineage.quarantined()
    assert kept.origin == "http" and kept.body.startswith("sha256:") and "oops" not in kept.body


def test_ingest_leaves_the_garbage_collector_as_it_found_it(store: Store) -> None:
    lineage = LineageStore(store, batch_size=1)
    assert gc.isenabled()
    lineage.ingest([parse_event(event("r1")), parse_event(event("r2"))])
    assert gc.isenabled()
    gc.disable()
    try:
        lineage.ingest_body(json.dumps([event("r3")]).encode())
        assert not gc.isenabled()  # whoever turned it off turns it back on
    finally:
        gc.enable()


def test_a_file_read_again_is_hashed_and_looked_up_not_validated_again(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(event(f"r{k}")) for k in range(5)) + "\n{not json\n")
    assert LineageStore(store).ingest_file(path).stored == 5
    validated: list[str] = []
    parse = EventElement.parse
    monkeypatch.setattr(
        EventElement, "parse", lambda self: validated.append(self.where) or parse(self)
    )
    again = LineageStore(store).ingest_file(path)
    assert (again.stored, again.duplicates, again.quarantined) == (0, 5, 1)
    assert validated == []


def test_batches_are_read_ahead_in_order_and_a_reading_error_stops_ingest(store: Store) -> None:
    def events() -> Iterator[Any]:
        for k in range(5):
            yield parse_event(event(f"r{k}"))
        raise LineageError("the file went away")

    lineage = LineageStore(store, batch_size=2)
    with pytest.raises(LineageError, match="went away"):
        lineage.ingest(events())
    assert lineage.counts()["events"] == 4  # the two whole batches before the error
    report = lineage.ingest(parse_event(event(f"r{k}")) for k in range(7))
    assert [r["stored"] for r in report.results] == [False] * 4 + [True] * 3


def test_an_http_body_keeps_no_run_or_job_facet_that_is_not_lineage(store: Store) -> None:
    lineage = LineageStore(store)
    broken = _with_airflow_facets(event("r2"))
    del broken["eventTime"]
    body = json.dumps([_with_airflow_facets(event("r1")), broken]).encode()
    report = lineage.ingest_body(body, origin="http")
    assert (report.stored, report.quarantined) == (1, 1)
    stored = _stored_text(store)
    assert "canary" not in stored and "canary" not in json.dumps(stored)
    (kept,) = stored_events(store)
    assert set(kept.run.facets) == {"parent"} and not kept.job.facets


def test_completed_writes_are_the_complete_runs_that_wrote_the_dataset_in_the_window(
    store: Store,
) -> None:
    ingest(
        store,
        event("a", "COMPLETE", at="2026-11-01T02:00:00Z"),
        event("b", "FAIL", at="2026-11-01T03:00:00Z"),
        event("c", "COMPLETE", at="2026-11-01T04:00:00Z", output="marts.other"),
        event("d", "COMPLETE", at="2026-11-01T05:00:00Z"),
        event("e", "COMPLETE", at="2026-11-01T09:00:00Z"),
    )
    after = datetime(2026, 11, 1, 2, 30, tzinfo=UTC)
    until = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)

    writes = LineageStore(store).completed_writes(LTV, after, until)

    assert [w["run_id"] for w in writes] == ["d"]  # not before, failed, elsewhere, or later
    assert writes[0]["inputs"] == [ORDERS.qualified]
    assert writes[0]["job"].endswith(JOB)


def test_unpublished_runs_are_read_once_per_job_shape_latest_first(store: Store) -> None:
    ingest(
        store,
        event("f-1", "FAIL", "2026-11-01T02:00:00Z"),
        event("f-2", "FAIL", "2026-11-02T02:00:00Z"),  # the same job and datasets, later
        event("a-1", "ABORT", "2026-11-01T03:00:00Z", output="marts.other"),
        {**event("n-1", "FAIL", "2026-11-03T02:00:00Z"), "inputs": []},  # read nothing known
        event("c-1", "START", "2026-11-04T01:00:00Z"),
        event("c-1", "COMPLETE", "2026-11-04T02:00:00Z"),  # published: not unpublished
        event("w-1", "COMPLETE", "2026-11-05T01:00:00Z", output="marts.withdrawn"),
        event("w-1", "FAIL", "2026-11-05T02:00:00Z", output="marts.withdrawn"),
    )
    runs = {(r.run_id, r.state) for r in LineageStore(store).unpublished_runs()}
    # A FAIL after its COMPLETE withdrew the run's edges: it is read as unpublished too.
    assert runs == {("f-2", "FAIL"), ("a-1", "ABORT"), ("w-1", "FAIL")}


# ---------------------------------------------------------------------------------------------
# A bad event costs only itself


def _bad_neighbours() -> list[tuple[str, Any, str]]:
    """(what, element, the reason's fragment): each refused alone, its batch kept."""
    future = event("01937a10-0000-7000-8000-0000000b0001", at="9999-12-31T00:00:00Z")
    tomorrow = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    return [
        ("over-long column", event("01937a10-0000-7000-8000-0000000b0002",
                                   columns={"c" * 600: ["amount"]}),
         "outputs[0].facets.columnLineage: a column name is longer than 512 characters"),
        ("over-long input column", event("01937a10-0000-7000-8000-0000000b0003",
                                         columns={"ltv": ["a" * 600]}),
         "an input column name is longer than 512 characters"),
        ("NUL in a dataset name", event("01937a10-0000-7000-8000-0000000b0004",
                                        output="marts.\u0000x"),
         "outputs[0].name holds a control character"),
        ("over-long dataset name", event("01937a10-0000-7000-8000-0000000b0005",
                                         output="m" * 2000),
         "outputs[0].name is longer than 1024 characters"),
        ("DEL in a dataset name, as sent", event("01937a10-0000-7000-8000-0000000b0009",
                                                 output="marts.\x7fx"),
         "outputs[0].name holds a control character"),
        ("over-long run id", event("r" * 256), "run.runId is longer than 255 characters"),
        ("eventTime 9999-12-31", future, "eventTime is more than a day ahead"),
        ("eventTime two days ahead", event("01937a10-0000-7000-8000-0000000b0006", at=tomorrow),
         "eventTime is more than a day ahead"),
        ("eventTime before 1970", event("01937a10-0000-7000-8000-0000000b0007",
                                        at="1969-12-31T23:59:59Z"),
         "eventTime is before 1970-01-01"),
        ("nested 100 deep", {**event("01937a10-0000-7000-8000-0000000b0008"),
                             "x": json.loads("[" * 100 + "]" * 100)},
         "nests arrays and objects more than 64 levels deep"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", _bad_neighbours(), ids=lambda c: c[0])
def test_a_bad_event_in_a_batch_is_refused_alone_with_its_index(
    store: Store, case: tuple[str, Any, str]
) -> None:
    _, bad, reason = case
    good = [event(f"01937a10-0000-7000-8000-0000000a000{n}", output=f"marts.m{n}")
            for n in range(2)]  # fmt: skip
    body = json.dumps([good[0], bad, good[1]]).encode()
    report = LineageStore(store).ingest_body(body, origin="http")
    assert (report.received, report.stored, report.quarantined) == (3, 2, 1)
    assert "error" in report.results[1] and reason in report.results[1]["error"]
    assert [r.get("stored") for r in (report.results[0], report.results[2])] == [True, True]
    outputs = {e.target.dataset.name for e in LineageStore(store).graph().edges()}
    assert {"marts.m0", "marts.m1"} <= outputs
    [quarantined] = LineageStore(store).quarantined()
    assert reason in quarantined.reason


def test_a_body_nested_thousands_deep_is_refused_naming_the_limit(store: Store) -> None:
    with pytest.raises(LineageError, match="more than 64 levels deep"):
        LineageStore(store).ingest_body(b'{"a":' * 3000 + b"1" + b"}" * 3000, origin="http")
    # An array is a batch: cut into its elements without decoding them, each judged alone.
    good = json.dumps(event("01937a10-0000-7000-8000-0000000d0001", output="marts.d1"))
    body = ("[" + good + ", " + "[" * 3000 + "]" * 3000 + ', {"a": "]"}]').encode()
    report = LineageStore(store).ingest_body(body, origin="http")
    assert (report.received, report.stored, report.quarantined) == (3, 1, 2)
    assert "more than 64 levels deep" in report.results[1]["error"]
    assert "must be a JSON object" not in report.results[1]["error"]
    assert LineageStore(store).counts()["events"] == 1


def test_a_body_holding_nul_is_quarantined_on_any_database(store: Store) -> None:
    with pytest.raises(LineageError, match="not valid JSON"):
        LineageStore(store).ingest_body(b'{"eventType": "\x00START"}', origin="http")
    [quarantined] = LineageStore(store).quarantined()
    assert "\x00" not in quarantined.body and "START" not in quarantined.body


def test_an_event_file_with_bad_lines_keeps_its_good_ones(store: Store, tmp_path: Path) -> None:
    lines = [
        json.dumps(event("01937a10-0000-7000-8000-0000000c0001", output="marts.f1")),
        "[" * 5000 + "]" * 5000,
        json.dumps(event("01937a10-0000-7000-8000-0000000c0002", at="9999-01-01T00:00:00Z")),
        json.dumps(event("01937a10-0000-7000-8000-0000000c0003", output="marts.f3")),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for workers in (0, 1):
        with open_store(f"sqlite:///{tmp_path}/w{workers}.db") as fresh:
            report = LineageStore(fresh).ingest_file(path, workers=workers)
            assert (report.stored, report.quarantined) == (2, 2)
            errors = [r["error"] for r in report.results if "error" in r]
            assert f"{path}:2: " in errors[0] and "more than 64 levels deep" in errors[0]
            assert "eventTime is more than a day ahead" in errors[1]


def test_a_dataset_name_holding_a_nul_is_refused_not_cut_short(tmp_path: Path) -> None:
    """SQLite's json_extract ends a string at NUL: `a\x00b` must never be looked up (or
    stored) as `a`, another dataset's name."""
    from erasure.errors import LineageError
    from erasure.lineage.store.bulk import stored_datasets
    from erasure.model import DatasetRef

    store = open_store(f"sqlite:///{tmp_path / 'nul.db'}")
    with store.engine.connect() as conn, pytest.raises(LineageError, match="NUL"):
        stored_datasets(conn, [DatasetRef(namespace="w", name="a\x00b")])
