"""Triggers of the erasure DAGs: waits that run in Airflow's triggerer, never in a worker slot.

They live in the installed package because the triggerer imports a trigger by its classpath
(`erasure_airflow.triggers.DagRunEndTrigger`), and the DAG bundle is not on its sys.path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

ENDED = ("success", "failed")
GONE = "gone"  # the run was deleted while it was waited for


def run_end(dag_id: str, run_id: str) -> dict[str, str] | None:
    """{dag_id, run_id, state} once the DAG run has ended (or was deleted), else None.

    Asked of the Execution API through the process's supervisor: it works in a task and, wrapped
    by `sync_to_async`, in the triggerer, with no login."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    if RuntimeTaskInstance.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
        state = GONE
    else:
        found = RuntimeTaskInstance.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        state = str(getattr(found, "value", found))  # a DagRunState: str() is its name
    return {"dag_id": dag_id, "run_id": run_id, "state": state} if state in (*ENDED, GONE) else None


class DagRunEndTrigger(BaseTrigger):
    """Fires once the DAG run `run_id` of `dag_id` has ended (or was deleted): {dag_id, run_id,
    state}."""

    def __init__(self, dag_id: str, run_id: str, poll_interval: float = 5.0) -> None:
        super().__init__()
        self.dag_id = dag_id
        self.run_id = run_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"dag_id": self.dag_id, "run_id": self.run_id, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async

        ended = sync_to_async(run_end)
        while (event := await ended(self.dag_id, self.run_id)) is None:
            await asyncio.sleep(self.poll_interval)
        yield TriggerEvent(event)
