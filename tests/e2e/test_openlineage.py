"""Observed lineage from a real pipeline: a rematerialisation DAG run under `airflow
standalone` reports its run through Airflow's OpenLineage provider (the http transport
`make up` configures) to the erasure plugin, and the next plan walks the edges it reported.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from erasure.catalog import load_catalog
from erasure.lineage import LineageStore, build_lineage
from erasure.model import DatasetRef, EdgeOrigin
from erasure.store import open_store
from erasure.warehouse import Warehouse
from local.up.stack import Stack

pytestmark = pytest.mark.e2e

DAG = "build_marts"
JOB = "airflow/build_marts.rematerialise"  # OpenLineage job: <namespace>/<dag_id>.<task_id>
ARRIVAL_SECONDS = 120.0


def test_a_rebuild_runs_events_arrive_and_its_edges_are_in_the_next_plan(
    airflow_standalone: Stack,
) -> None:
    stack = airflow_standalone
    assert stack.settings is not None
    run_id = f"lineage-e2e-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=stack.base_url, timeout=30, trust_env=False) as client:
        client.headers["Authorization"] = f"Bearer {stack.token('admin')}"
        response = client.post(
            f"/api/v2/dags/{DAG}/dagRuns", json={"dag_run_id": run_id, "logical_date": None}
        )
        assert response.status_code == 200, response.text
        deadline = time.monotonic() + ARRIVAL_SECONDS
        state = "queued"
        while time.monotonic() < deadline and state not in ("success", "failed"):
            time.sleep(2)
            state = client.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}").json()["state"]
        assert state == "success", f"{DAG} run ended {state}"

    with open_store(stack.settings.store_url) as store:
        lineage = LineageStore(store)
        runs: list[dict[str, object]] = []
        deadline = time.monotonic() + ARRIVAL_SECONDS
        while time.monotonic() < deadline:  # the provider sends after the task finished
            runs = [r for r in lineage.runs() if r["job"] == JOB and r["state"] == "COMPLETE"]
            if runs:
                break
            time.sleep(2)
        assert runs, f"no COMPLETE run of {JOB} arrived; runs seen: {lineage.runs(limit=10)}"
        assert "warehouse/marts.orders_daily" in runs[0]["outputs"]  # type: ignore[operator]

        catalog = load_catalog(stack.settings.catalog_path)  # type: ignore[arg-type]
        warehouse = Warehouse(catalog)
        try:
            plan_lineage = build_lineage(catalog, warehouse, store=lineage, as_of=datetime.now(UTC))
        finally:
            warehouse.dispose()
    orders_daily = DatasetRef("warehouse", "marts.orders_daily")
    observed = [
        e
        for e in plan_lineage.graph.edges_into(orders_daily, as_of=plan_lineage.as_of)
        if e.origin is EdgeOrigin.OBSERVED and e.producer == JOB
    ]
    assert observed, "the plan's lineage has no edge the rebuild run reported"
    assert {e.source.dataset.name for e in observed} == {"crm.orders"}
    assert all(e.target.column is not None for e in observed)  # column lineage, not table only


def test_the_erasure_dags_report_no_lineage(airflow_standalone: Stack) -> None:
    """The chart's emission policy (helm/values.yaml openlineage.silentDags): the load test
    ran twenty gdpr_erasure runs by now, and none of their tasks reported an event."""
    stack = airflow_standalone
    assert stack.settings is not None
    with open_store(stack.settings.store_url) as store:
        jobs = {str(r["job"]) for r in LineageStore(store).runs(limit=10_000)}
    assert any(job.startswith("airflow/build_") for job in jobs), jobs
    silent = [job for job in jobs if job.startswith(("airflow/gdpr_erasure", "airflow/erasure_"))]
    assert not silent, silent
