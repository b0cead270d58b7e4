"""Who last wrote a dataset, read from the lineage store (SQLite and Postgres): the plan of a
dataset whose catalog policy says its producer rebuilds it names the DAG from the stored
events, under the dataset's identity or one of its aliases."""

from __future__ import annotations

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


def test_the_stored_events_name_the_dag_that_last_wrote_it(store: Store, tmp_path: Path) -> None:
    lineage = LineageStore(store)
    lineage.ingest_json(task_event("build_x.old", "x.unknown", at="2026-11-01T00:00:00Z"))
    lineage.ingest_json(
        task_event("build_y.new", "x.unknown", dag="build_y", at="2026-11-20T00:00:00Z")
    )
    # a Spark job that wrote another dataset later names no DAG for this one
    lineage.ingest_json(task_event("spark", "x.other", engine="spark", at="2026-11-25T00:00:00Z"))
    writer = lineage.last_writer([DatasetRef("w", "x.unknown")])
    assert writer is not None
    assert (writer.job, writer.dag_id) == ("airflow/build_y.new", "build_y")
    spark = lineage.last_writer([DatasetRef("w", "x.other")])
    assert spark is not None and spark.dag_id is None
    assert lineage.last_writer([DatasetRef("w", "x.none")]) is None

    catalog, warehouse = planner_estate(tmp_path, PRODUCER_DEFAULT)
    plan = make_plan(catalog, SUBJECT, warehouse=warehouse, now=NOW, lineage_store=lineage)
    item = next(i for i in plan.items if i.dataset.name == "x.unknown")
    assert (item.action, item.evidence.get("dag_id")) == (Action.REBUILD, "build_y")


def test_an_alias_the_producer_writes_under_names_the_writer(store: Store) -> None:
    lineage = LineageStore(store)
    lineage.ingest_json(task_event("build_x.t", "public.x_unknown", at="2026-11-01T00:00:00Z"))
    names = [DatasetRef("w", "x.unknown"), DatasetRef("w", "public.x_unknown")]
    writer = lineage.last_writer(names)
    assert writer is not None and writer.dag_id == "build_x"
