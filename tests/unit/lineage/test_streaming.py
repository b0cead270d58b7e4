"""Streaming runs publish their edges while RUNNING (OpenLineage `jobType` facet,
processingType STREAMING: Flink, Spark Structured Streaming), from their first RUNNING event;
a FAIL or ABORT withdraws them, a COMPLETE publishes at its own time. A batch run still open
publishes nothing. In memory and in the store (SQLite and Postgres) alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from erasure.lineage.openlineage import parse_event, runs_from_events, timeline_edges
from erasure.lineage.store import LineageStore
from erasure.model import DatasetRef
from erasure.store import Store
from tests.unit.lineage.test_store import NS, current, ingest, store  # noqa: F401

KAFKA = "kafka://broker:9092"


def streaming(kind: str, at: str, *, job_type: str | None = "STREAMING") -> dict[str, Any]:
    """A Flink job's event reading orders from Kafka into a table, as Flink's OpenLineage
    listener sends it (jobType facet, column lineage of the output)."""
    job_facets = {}
    if job_type is not None:
        job_facets["jobType"] = {
            "processingType": job_type, "integration": "FLINK", "jobType": "JOB",
        }  # fmt: skip
    return {
        "eventType": kind,
        "eventTime": at,
        "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.24.2/integration/flink",
        "run": {"runId": "01937c1e-0000-7000-8000-00000000f111"},
        "job": {"namespace": "flink-jobs", "name": "orders_to_lake", "facets": job_facets},
        "inputs": [{"namespace": KAFKA, "name": "orders"}],
        "outputs": [{
            "namespace": NS, "name": "lake.orders",
            "facets": {"columnLineage": {"fields": {"customer": {"inputFields": [
                {"namespace": KAFKA, "name": "orders", "field": "customer_email"},
            ]}}}},
        }],
    }  # fmt: skip


EDGE = ("orders.customer_email", "lake.orders.customer")


def in_memory(*events: dict[str, Any]) -> set[tuple[str, str]]:
    observed = timeline_edges(runs_from_events([parse_event(e) for e in events]))
    return {(str(e.source), str(e.target)) for e in observed.edges if e.valid_to is None}


def test_a_streaming_run_publishes_while_running_in_memory() -> None:
    started = streaming("START", "2026-11-01T00:00:00Z")
    running = streaming("RUNNING", "2026-11-01T00:05:00Z")
    assert in_memory(started) == set()
    assert in_memory(started, running) == {EDGE}
    # a batch job's RUNNING (or one that does not say) publishes nothing until it completes
    for job_type in ("BATCH", None):
        assert in_memory(streaming("RUNNING", "2026-11-01T00:05:00Z", job_type=job_type)) == set()
    # a FAIL ends it: nothing published (the erasure view keeps its attempt, table-level)
    failed = streaming("FAIL", "2026-11-03T00:00:00Z")
    assert in_memory(started, running, failed) == set()


def test_a_streaming_run_publishes_while_running_in_the_store(store: Store) -> None:  # noqa: F811
    ingest(store, streaming("START", "2026-11-01T00:00:00Z"))
    assert current(store) == set()
    ingest(store, streaming("RUNNING", "2026-11-01T00:05:00Z"))
    assert current(store) == {EDGE}
    graph = LineageStore(store).graph()
    orders = DatasetRef(KAFKA, "orders")
    published = datetime(2026, 11, 1, 0, 5, tzinfo=UTC)
    before, days_on = datetime(2026, 11, 1, 0, 1, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)
    instants = (before, published, days_on)
    reached = [len(graph.forward_closure([orders], as_of=t).datasets) for t in instants]
    assert reached == [1, 2, 2]  # from its first RUNNING, days on
    # a later RUNNING (a checkpoint) keeps it; the run's FAIL withdraws it
    ingest(store, streaming("RUNNING", "2026-11-02T00:05:00Z"))
    assert current(store) == {EDGE}
    ingest(store, streaming("FAIL", "2026-11-03T00:00:00Z"))
    assert current(store) == set()
    (run,) = LineageStore(store).runs()
    assert (run["state"], run["completed_at"]) == ("FAIL", None)


def test_a_streaming_run_that_completes_publishes_at_its_completion(store: Store) -> None:  # noqa: F811
    ingest(store, streaming("RUNNING", "2026-11-01T00:05:00Z"))
    ingest(store, streaming("COMPLETE", "2026-11-05T00:00:00Z"))
    assert current(store) == {EDGE}
    (run,) = LineageStore(store).runs()
    assert run["completed_at"] == datetime(2026, 11, 5, tzinfo=UTC)
