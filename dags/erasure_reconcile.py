"""Every 10 minutes: erasure requests left in limbo by a run that is gone or has ended.

A `gdpr_erasure` run marked failed or deleted from the UI or API, or whose worker died
before the failure callback ran, leaves its request open for ever. `erasure_reconcile`
records each such request failed (a signed `failed` record naming the run), keeping its
parked identifier: clearing the run (or, for a deleted one, starting it again under its
run id) resumes it. It asks Airflow for the runs' states through the task's own Execution
API channel: no login, no ORM.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, task

from erasure_airflow.queues import erasure_queue

log = logging.getLogger(__name__)
ERASURE_DAG = "gdpr_erasure"

with DAG(
    dag_id="erasure_reconcile",
    schedule=timedelta(minutes=10),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=False,
    tags=["gdpr", "erasure"],
    default_args={"queue": erasure_queue()},
    doc_md=__doc__,
):

    @task
    def reconcile() -> dict[str, Any]:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        from erasure import workflow
        from erasure.config import Settings
        from erasure.services import Services
        from erasure_airflow.connections import postgres_url

        def run_state(run_id: str) -> str | None:
            if not RuntimeTaskInstance.get_dr_count(dag_id=ERASURE_DAG, run_ids=[run_id]):
                return None
            state = RuntimeTaskInstance.get_dagrun_state(dag_id=ERASURE_DAG, run_id=run_id)
            return str(getattr(state, "value", state))  # a DagRunState: str() is its name

        with Services.open(Settings(), resolve=postgres_url) as svc:
            found = workflow.reconcile(svc, run_state)
        for limbo in found:
            log.warning("request %s recorded failed: %s", limbo.request_ref, limbo.reason)
        return {"failed": [limbo.request_ref for limbo in found]}

    reconcile()
