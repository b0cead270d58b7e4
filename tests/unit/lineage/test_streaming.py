"""Streaming runs publish their edges while RUNNING (OpenLineage `jobType` facet,
processingType STREAMING: Flink, Spark Structured Streaming), from their first RUNNING event,
however they end (they wrote until they did): the lineage at an instant stays what it was. A
batch run still open publishes nothing. In memory and in the store (SQLite and Postgres)."""

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
    # its FAIL ends it: what it wrote while it ran stays its lineage
    failed = streaming("FAIL", "2026-11-03T00:00:00Z")
    assert in_memory(started, running, failed) == {EDGE}


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
    # later RUNNING events (checkpoints) keep it, each a repetition: no edge set is rewritten
    for day in range(2, 12):
        report = ingest(store, streaming("RUNNING", f"2026-11-{day:02d}T00:05:00Z"))
        assert (report.edges_opened, report.edges_closed) == (0, 0)
    assert current(store) == {EDGE}
    # its ABORT ends the run, and the lineage at an instant of its life is as it was
    ingest(store, streaming("ABORT", "2026-11-13T00:00:00Z"))
    assert current(store) == {EDGE}
    graph = LineageStore(store).graph()
    assert [len(graph.forward_closure([orders], as_of=t).datasets) for t in instants] == [1, 2, 2]
    (run,) = LineageStore(store).runs()
    assert (run["state"], run["completed_at"]) == ("ABORT", published)


def test_a_streaming_run_that_completes_keeps_its_lineage_from_its_start(store: Store) -> None:  # noqa: F811
    ingest(store, streaming("RUNNING", "2026-11-01T00:05:00Z"))
    ingest(store, streaming("COMPLETE", "2026-11-05T00:00:00Z"))
    assert current(store) == {EDGE}
    (run,) = LineageStore(store).runs()
    assert run["completed_at"] == datetime(2026, 11, 1, 0, 5, tzinfo=UTC)
