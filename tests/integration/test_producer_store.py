"""Who last wrote a dataset, read from the lineage store (SQLite and Postgres): the plan of a
dataset whose catalog policy says its producer rebuilds it names the DAG from the stored
events, under the dataset's identity or one of its aliases."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from erasure.lineage import LineageStore
from erasure.model import Action, DatasetRef
from erasure.planner import make_plan
from erasure.store import Store
from tests.unit.test_catalog_defaults import planner_estate
from tests.unit.test_planner import NOW, SUBJECT
from tests.unit.test_producer_rebuild import PRODUCER_DEFAULT, task_event

pytestmark = pytest.mark.integration


def test_the_stored_events_name_each_job_that_wrote_it_and_its_dag(
    store: Store, tmp_path: Path
) -> None:
    lineage = LineageStore(store)
    lineage.ingest_json(task_event("build_x.old", "x.unknown", at="2026-11-01T00:00:00Z"))
    lineage.ingest_json(
        task_event("build_y.new", "x.unknown", dag="build_y", at="2026-11-20T00:00:00Z")
    )
    # a Spark job that wrote another dataset later names no DAG for this one
    lineage.ingest_json(task_event("spark", "x.other", engine="spark", at="2026-11-25T00:00:00Z"))
    writers = lineage.writers([DatasetRef("w", "x.unknown")])
    assert [(w.job, w.dag_id) for w in writers] == [
        ("airflow/build_y.new", "build_y"),
        ("airflow/build_x.old", "build_x"),
    ]
    [spark] = lineage.writers([DatasetRef("w", "x.other")])
    assert spark.dag_id is None
    assert lineage.writers([DatasetRef("w", "x.none")]) == []

    catalog, warehouse = planner_estate(tmp_path, PRODUCER_DEFAULT)
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW, lineage_store=lineage)
    item = next(i for i in plan.items if i.dataset.name == "x.unknown")
    # two DAGs wrote it: a run of one would leave the other's rows
    assert (item.action, item.rule) == (Action.ESCALATE, "7")
    assert item.evidence["dag_ids"] == ["build_x", "build_y"]


def test_an_alias_the_producer_writes_under_names_the_writer(store: Store) -> None:
    lineage = LineageStore(store)
    lineage.ingest_json(task_event("build_x.t", "public.x_unknown", at="2026-11-01T00:00:00Z"))
    names = [DatasetRef("w", "x.unknown"), DatasetRef("w", "public.x_unknown")]
    [writer] = lineage.writers(names)
    assert writer.dag_id == "build_x"


def test_a_completed_write_says_when_its_run_began(store: Store) -> None:
    """A rebuild's proof needs a run begun after the sources were clean: its first event."""
    lineage = LineageStore(store)
    for kind, at in (("START", "2026-11-01T00:00:00Z"), ("COMPLETE", "2026-11-01T00:10:00Z")):
        event = task_event("build_x.t", "x.unknown", at=at, state=kind)
        event["run"]["runId"] = "01937c1e-0000-7000-8000-0000000000aa"
        lineage.ingest_json(event)
    after, until = datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
    [run] = lineage.completed_writes(DatasetRef("w", "x.unknown"), after, until)
    assert run["started_at"] == datetime(2026, 11, 1, tzinfo=UTC)
    assert run["completed_at"] == datetime(2026, 11, 1, 0, 10, tzinfo=UTC)
