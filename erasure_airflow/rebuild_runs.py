"""How erasure tasks reach Airflow itself: run a rematerialisation DAG and wait for it.

Two ways, chosen by ERASURE_AIRFLOW_ACCESS: `rest` (a real deployment: the rebuild joins a run
that serves it, or triggers one, over Airflow's REST API (erasure.actions.coalesce); the task
then defers and `DagRunEndTrigger` waits for the run in the triggerer, holding no worker
slot) or `inprocess` (under `dag.test()`, where no scheduler runs triggered DAGs: the run is
executed in the task, to its end).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from erasure.actions.coalesce import run_for
from erasure.actions.rebuild import AwaitingRun, RunOutcome, TriggerDag
from erasure.config import Settings, env_name
from erasure.errors import ConfigError, RebuildFailed
from erasure.model import DagRun

if TYPE_CHECKING:
    from erasure.services import Services

log = logging.getLogger(__name__)
REBUILD_TIMEOUT_SECONDS = 3600


def trigger_dag(svc: Services, request_ref: str) -> TriggerDag:
    """A callable that runs one rematerialisation DAG for `request_ref`: in process to its end,
    or over REST joined or started (erasure.actions.coalesce) and then AwaitingRun (the task
    defers until the run ended)."""

    def run(dag_id: str, ready_at: datetime) -> RunOutcome:
        if svc.settings.airflow_access == "inprocess":
            return _run_in_process(dag_id, request_ref)
        with RestRuns(svc.settings) as airflow:
            joined = run_for(svc.rematerialisations, airflow, dag_id, request_ref, ready_at)
        if joined.triggered_for != request_ref:
            log.info(
                "joined %s run %s (triggered for %s)", dag_id, joined.run_id, joined.triggered_for
            )
        raise AwaitingRun(dag_id, joined.run_id)

    return run


def run_ended(svc: Services, event: Mapping[str, Any]) -> TriggerDag:
    """The callable a resumed rebuild passes: the outcome `DagRunEndTrigger` reported, with when
    the run started (Airflow says) and for which request it was triggered (the store says)."""
    run_id = str(event["run_id"])
    with RestRuns(svc.settings) as airflow:
        status = airflow.status(str(event["dag_id"]), run_id)
    claimed = svc.rematerialisations.get(run_id)
    outcome = RunOutcome(
        run_id=run_id,
        state=str(event["state"]),
        started_at=status.started_at if status is not None else None,
        triggered_for=claimed.triggered_for if claimed is not None else None,
    )

    def ended(dag_id: str, ready_at: datetime) -> RunOutcome:
        if dag_id != event["dag_id"]:
            raise RebuildFailed(
                f"the rebuild waited for DAG {event['dag_id']!r} but its catalog entry now names "
                f"{dag_id!r}: clear the task to rebuild it again"
            )
        return outcome

    return ended


class RestRuns:
    """Rematerialisation runs over Airflow's REST API (erasure.actions.coalesce.AirflowRuns)."""

    def __init__(self, settings: Settings) -> None:
        if settings.airflow_api_user is None or settings.airflow_api_password is None:
            raise ConfigError(
                f"set {env_name('airflow_api_user')} and {env_name('airflow_api_password')}: "
                "rebuild tasks trigger rematerialisation DAGs through Airflow's REST API"
            )
        self._settings = settings
        self._client = httpx.Client(base_url=settings.airflow_api_url.rstrip("/"), timeout=30)

    def __enter__(self) -> RestRuns:
        settings = self._settings
        assert settings.airflow_api_user is not None and settings.airflow_api_password is not None
        token = self._client.post(
            "/auth/token",
            json={
                "username": settings.airflow_api_user,
                "password": settings.airflow_api_password.get_secret_value(),
            },
        )
        token.raise_for_status()
        self._client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        return self

    def __exit__(self, *_exc: object) -> None:
        self._client.close()

    def start(self, dag_id: str, run_id: str) -> bool:
        created = self._client.post(
            f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None},
        )
        if created.status_code == 409:
            return False
        if created.status_code != 200:
            raise RebuildFailed(f"triggering {dag_id} failed (HTTP {created.status_code})")
        log.info("triggered %s run %s; waiting for it in the triggerer", dag_id, run_id)
        return True

    def status(self, dag_id: str, run_id: str) -> DagRun | None:
        found = self._client.get(
            f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"
        )
        if found.status_code == 404:
            return None
        if found.status_code != 200:
            raise RebuildFailed(f"reading {dag_id} run {run_id} failed (HTTP {found.status_code})")
        body = found.json()
        started = body.get("start_date")
        return DagRun(
            run_id=run_id,
            state=str(body["state"]),
            started_at=datetime.fromisoformat(started) if started else None,
        )


def _run_in_process(dag_id: str, request_ref: str) -> RunOutcome:
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    # The DAG folder Airflow is configured with ([core] dags_folder), where the DAGs live.
    dags_folder = settings.DAGS_FOLDER
    dag = DagBag(str(dags_folder)).get_dag(dag_id)
    if dag is None:
        raise RebuildFailed(f"no DAG {dag_id!r} in {dags_folder}")
    run = dag.test()
    return RunOutcome(
        run_id=run.run_id,
        state=str(run.state),
        started_at=run.start_date,
        triggered_for=request_ref,
        in_process=True,
    )
