"""Producers rebuild what they produce: a dataset an Airflow task last wrote (its OpenLineage
events' `parent` run facet names the DAG) is rebuilt by triggering that DAG, with no entry of
its own, where the catalog's policy (`rebuild: {kind: producer, dags: [...]}`) allows it;
what cannot be re-run escalates naming its producer."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from erasure.actions.rebuild import RunOutcome, rebuild
from erasure.catalog import Catalog
from erasure.errors import RebuildFailed
from erasure.lineage import parse_event
from erasure.lineage.openlineage import airflow_dag, last_writers
from erasure.model import Action, DatasetRef, Plan, PlanItem
from erasure.planner import make_plan
from erasure.verify import producers_changed
from erasure.warehouse import Warehouse
from tests.unit.test_catalog_defaults import planner_estate
from tests.unit.test_planner import NOW, SUBJECT

PRODUCER_DEFAULT = """
defaults:
  - match: {namespace: w, name: "x.*"}
    kind: table
    connection: warehouse
    rebuild: {kind: producer, dags: ["build_*"]}
"""


def task_event(
    job: str,
    output: str,
    *,
    dag: str | None = "build_x",
    engine: str = "Airflow",
    at: str = "2026-11-28T10:00:00Z",
    state: str = "COMPLETE",
) -> dict[str, Any]:
    """A task's run event as Airflow's OpenLineage provider sends it (the facets that say
    which DAG), reading d.model and writing `output`."""
    facets: dict[str, Any] = {"processing_engine": {"name": engine, "version": "3.3.2"}}
    if dag is not None:
        facets["parent"] = {
            "run": {"runId": "01937c1e-0000-7000-8000-000000000001"},
            "job": {"namespace": "airflow", "name": dag},
        }
    return {
        "eventType": state,
        "eventTime": at,
        "producer": "https://github.com/apache/airflow/tree/providers-openlineage/2.20.3",
        "run": {"runId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{job}@{at}")), "facets": facets},
        "job": {"namespace": "airflow", "name": job},
        "inputs": [{"namespace": "w", "name": "d.model"}],
        "outputs": [{"namespace": "w", "name": output}],
    }  # fmt: skip


def plan_item(tmp_path: Path, events: list[dict[str, Any]]) -> PlanItem:
    catalog, warehouse = planner_estate(tmp_path, PRODUCER_DEFAULT)
    plan = make_plan(
        catalog, SUBJECT, warehouse=warehouse, now=NOW, events=[parse_event(e) for e in events]
    )
    return next(i for i in plan.items if i.dataset.name == "x.unknown")


def test_a_dataset_an_airflow_task_wrote_is_rebuilt_by_its_dag(tmp_path: Path) -> None:
    item = plan_item(tmp_path, [task_event("build_x.write_unknown", "x.unknown")])
    assert (item.action, item.rule) == (Action.REBUILD, "5")
    assert item.evidence["method"] == "producer"
    assert item.evidence["dag_id"] == "build_x"
    assert item.evidence["producer_job"] == "airflow/build_x.write_unknown"
    assert item.reason.startswith("rebuildable: its producer, DAG build_x, re-materialises")


def test_tasks_of_one_dag_rebuild_by_it_and_of_several_dags_escalate(tmp_path: Path) -> None:
    """A run of one DAG leaves what another job wrote: only a dataset written by tasks of
    one DAG alone is rebuilt by it."""
    one_dag = [
        task_event("build_x.first", "x.unknown", at="2026-11-01T00:00:00Z"),
        task_event("build_x.second", "x.unknown", at="2026-11-20T00:00:00Z"),
    ]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    item = plan_item(tmp_path / "one", one_dag)
    assert (item.action, item.evidence["dag_id"]) == (Action.REBUILD, "build_x")
    assert item.evidence["producer_jobs"] == ["airflow/build_x.second", "airflow/build_x.first"]
    two_dags = [*one_dag, task_event("build_y.t", "x.unknown", dag="build_y")]
    item = plan_item(tmp_path / "two", two_dags)
    assert (item.action, item.rule) == (Action.ESCALATE, "7")
    assert "tasks of 2 DAGs: a run of one leaves what the others wrote" in item.reason


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (None, "no run has reported writing it"),
        (
            task_event("spark_app", "x.unknown", engine="spark"),
            "written by 1 job(s) ('airflow/spark_app', last run ",
        ),
        (task_event("t", "x.unknown", dag=None), "one of which is no Airflow task"),
        (
            task_event("nightly.t", "x.unknown", dag="nightly"),
            "tasks of DAG 'nightly', which the catalog's rebuild policy does not let the "
            "erasure trigger (dags: ['build_*'])",
        ),
    ],
)
def test_what_cannot_be_re_run_escalates_naming_its_producer(
    tmp_path: Path, event: dict[str, Any] | None, reason: str
) -> None:
    item = plan_item(tmp_path, [event] if event else [])
    assert (item.action, item.rule) == (Action.ESCALATE, "7")
    assert reason in item.reason


def test_only_airflows_own_events_name_a_dag() -> None:
    airflow = parse_event(task_event("build_x.t", "x.y"))
    spark = parse_event(task_event("spark_app", "x.y", engine="spark"))
    assert airflow_dag([airflow]) == "build_x"
    assert airflow_dag([spark]) is None
    [writer] = last_writers([airflow])[DatasetRef("w", "x.y")]
    assert writer.dag_id == "build_x"


def rebuild_planned(catalog: Catalog, warehouse: Warehouse, planned: dict[str, Any]) -> Any:
    triggered: list[str] = []

    def trigger(dag_id: str, ready_at: datetime) -> RunOutcome:
        triggered.append(dag_id)
        return RunOutcome(run_id=f"manual__{dag_id}", state="success", started_at=ready_at)

    ref = DatasetRef("w", "x.unknown")
    done = rebuild(
        catalog, warehouse, ref, trigger_dag=trigger, ready_at=datetime.now(UTC),
        planned={**catalog.described_as(ref), **planned},
    )  # fmt: skip
    return done, triggered


def test_the_rebuild_triggers_the_dag_the_plan_named_and_asks_the_policy_again(
    tmp_path: Path,
) -> None:
    # no connection: the planner's estate has no table x.unknown to count afterwards
    catalog, warehouse = planner_estate(
        tmp_path, PRODUCER_DEFAULT.replace("connection: warehouse", "")
    )
    done, triggered = rebuild_planned(catalog, warehouse, {"dag_id": "build_x"})
    assert triggered == ["build_x"]
    assert (done.method, done.dag_id, done.run_id) == ("producer", "build_x", "manual__build_x")
    for planned in ({"dag_id": "nightly"}, {}):
        with pytest.raises(RebuildFailed, match="re-plan"):
            rebuild_planned(catalog, warehouse, planned)
    # the plan was made under another description (a default since edited): nothing runs
    with pytest.raises(RebuildFailed, match="described otherwise than when the plan was made"):
        rebuild_planned(catalog, warehouse, {"dag_id": "build_x", "described_by": "another"})


def test_a_job_named_after_the_subject_is_not_repeated_in_the_plan(tmp_path: Path) -> None:
    item = plan_item(tmp_path, [task_event("build_x.export_ann@example.com", "x.unknown")])
    assert item.action is Action.REBUILD  # its DAG is an Airflow DAG the policy allows
    assert item.evidence["producer_job"] == "(not repeated)"
    assert "ann@example.com" not in item.model_dump_json()


def test_verify_fails_when_the_producers_changed_since_the_plan(tmp_path: Path) -> None:
    (tmp_path / "then").mkdir()
    (tmp_path / "now").mkdir()
    planned = plan_item(tmp_path / "then", [task_event("build_x.t", "x.unknown")])
    plan = Plan.model_construct(items=[planned])
    same = Plan.model_construct(items=[planned])
    assert producers_changed(plan, same) == []
    # a Spark job started writing it since: the re-plan escalates, and the check fails
    later = plan_item(
        tmp_path / "now",
        [task_event("build_x.t", "x.unknown"), task_event("spark", "x.unknown", engine="spark")],
    )
    [check] = producers_changed(plan, Plan.model_construct(items=[later]))
    assert (check.target, check.passed) == ("x.unknown", False)


def test_a_run_named_after_the_subject_is_not_repeated_in_the_reason(tmp_path: Path) -> None:
    event = task_event("build_x.t", "x.unknown", dag="nightly")
    event["run"]["runId"] = "ann@example.com"
    item = plan_item(tmp_path, [event])
    assert item.action is Action.ESCALATE
    assert "ann@example.com" not in item.model_dump_json()
