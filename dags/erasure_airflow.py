"""How erasure tasks reach Airflow itself: run a rematerialisation DAG and wait for it.

Two ways, chosen by ERASURE_AIRFLOW_ACCESS: `rest` (a real deployment: the run is triggered
over Airflow's REST API, authenticated, and the task then defers: `DagRunEndTrigger` waits
for the run in the triggerer, holding no worker slot) or `inprocess` (under `dag.test()`,
where no scheduler runs triggered DAGs: the run is executed in the task, to its end).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from erasure.actions.rebuild import AwaitingRun, RunOutcome, TriggerDag
from erasure.config import Settings, env_name
from erasure.errors import ConfigError, RebuildFailed

log = logging.getLogger(__name__)
DAGS_FOLDER = Path(__file__).resolve().parent
REBUILD_TIMEOUT_SECONDS = 3600
POLL_SECONDS = 3.0  # how often the triggerer asks for the run's state


def trigger_dag(settings: Settings, request_ref: str, attempt: int, map_index: int) -> TriggerDag:
    """A callable that runs one rematerialisation DAG: in process to its end, or over REST
    started and then AwaitingRun (the task defers until the run ended)."""

    def run(dag_id: str) -> RunOutcome:
        if settings.airflow_access == "inprocess":
            return _run_in_process(dag_id)
        run_id = rematerialisation_run_id(request_ref, dag_id, map_index, attempt)
        _start_over_rest(settings, dag_id, run_id)
        raise AwaitingRun(dag_id, run_id)

    return run


def run_ended(event: Mapping[str, Any]) -> TriggerDag:
    """The callable a resumed rebuild passes: the outcome `DagRunEndTrigger` reported."""
    outcome = RunOutcome(run_id=str(event["run_id"]), state=str(event["state"]))

    def ended(dag_id: str) -> RunOutcome:
        if dag_id != event["dag_id"]:
            raise RebuildFailed(
                f"the rebuild waited for DAG {event['dag_id']!r} but its catalog entry now names "
                f"{dag_id!r}: clear the task to rebuild it again"
            )
        return outcome

    return ended


def rematerialisation_run_id(request_ref: str, dag_id: str, map_index: int, attempt: int) -> str:
    """One run per rebuild task and try: a task that lost its worker finds its own run again
    (409, then waits for it), and two artefacts the same DAG builds never share a run (the
    second would take the first's, finished before its own upstreams were)."""
    return f"erasure-{request_ref}-{dag_id}-{map_index}-try{attempt}"


def _run_in_process(dag_id: str) -> RunOutcome:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(str(DAGS_FOLDER)).get_dag(dag_id)
    if dag is None:
        raise RebuildFailed(f"no DAG {dag_id!r} in {DAGS_FOLDER}")
    run = dag.test()
    return RunOutcome(run_id=run.run_id, state=str(run.state))


def _start_over_rest(settings: Settings, dag_id: str, run_id: str) -> None:
    """Trigger the run (a 409 is this task's own run, triggered before it lost its worker)."""
    base = settings.airflow_api_url.rstrip("/")
    if settings.airflow_api_user is None or settings.airflow_api_password is None:
        raise ConfigError(
            f"set {env_name('airflow_api_user')} and {env_name('airflow_api_password')}: "
            "rebuild tasks trigger rematerialisation DAGs through Airflow's REST API"
        )
    with httpx.Client(base_url=base, timeout=30) as client:
        token = client.post(
            "/auth/token",
            json={
                "username": settings.airflow_api_user,
                "password": settings.airflow_api_password.get_secret_value(),
            },
        )
        token.raise_for_status()
        client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        created = client.post(
            f"/api/v2/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None}
        )
        if created.status_code not in (200, 409):  # 409: this attempt triggered it already
            raise RebuildFailed(f"triggering {dag_id} failed (HTTP {created.status_code})")
    log.info("triggered %s run %s; waiting for it in the triggerer", dag_id, run_id)
