"""How erasure tasks reach Airflow itself: run a rematerialisation DAG and wait for it.

Two ways, chosen by ERASURE_AIRFLOW_ACCESS: `rest` (a real deployment: Airflow's REST API,
authenticated) or `inprocess` (under `dag.test()`, where no scheduler runs triggered DAGs).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx

from erasure.actions.rebuild import RunOutcome, TriggerDag
from erasure.config import Settings, env_name
from erasure.errors import ConfigError, RebuildFailed

log = logging.getLogger(__name__)
DAGS_FOLDER = Path(__file__).resolve().parent
REBUILD_TIMEOUT_SECONDS = 3600
POLL_SECONDS = 3


def trigger_dag(settings: Settings, request_ref: str, attempt: int, map_index: int) -> TriggerDag:
    """A callable that runs one rematerialisation DAG to its end and says how it ended."""

    def run(dag_id: str) -> RunOutcome:
        if settings.airflow_access == "inprocess":
            return _run_in_process(dag_id)
        run_id = rematerialisation_run_id(request_ref, dag_id, map_index, attempt)
        return _run_over_rest(settings, dag_id, run_id)

    return run


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


def _run_over_rest(settings: Settings, dag_id: str, run_id: str) -> RunOutcome:
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
        deadline = time.monotonic() + REBUILD_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            state = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json().get("state")
            if state in ("success", "failed"):
                return RunOutcome(run_id=run_id, state=state)
            time.sleep(POLL_SECONDS)
    raise RebuildFailed(f"{dag_id} run {run_id} did not finish within {REBUILD_TIMEOUT_SECONDS} s")
