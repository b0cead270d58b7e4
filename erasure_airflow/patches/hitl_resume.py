"""API-server middleware: an answered HITL prompt whose task parked meanwhile is resumed.

Why (issue 9, the second way an answer was lost): Airflow 3.3.2's response handler (PATCH
.../hitlDetails) loads the task instance and its HITL row, *then* locks them with
`session.get(..., with_for_update=...)`, which locks but keeps the attributes loaded before
the lock (SQLAlchemy's identity map; no populate_existing). When the worker's park
(running -> awaiting_input) commits between that load and the lock, the handler still sees
`running`, saves the answer and does not resume the task; the park itself had looked for an
answer before there was one. The prompt then sits answered in `awaiting_input` for ever
(no trigger, and no timeout sweep without a response_timeout).

After a 200 from that route, and before the 200 reaches the caller, this middleware locks
the task instance in a fresh session (what it reads is what it locked) and, when it is
parked with a response on record, resumes it exactly as the handler would have
(`handle_event_submit`). In every other order either the park sees the answer and resumes
the task itself, or the handler resumes the task it finds parked.

Upstream: no issue reports this race (searched apache/airflow for the HITL response handler,
`with_for_update` and `populate_existing`); the handler came with the `awaiting_input` state,
apache/airflow #68028 (3.3.0).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from packaging.specifiers import SpecifierSet
from starlette.concurrency import run_in_threadpool

log = logging.getLogger(__name__)

# `awaiting_input` and this handler exist since 3.3.0; checked on 3.3.2. The test of this patch
# fails outside this range, and once the handler's lock reloads what it locks.
AIRFLOW_VERSIONS = SpecifierSet(">=3.3.0,<3.4")
UPSTREAM: tuple[str, ...] = ()  # none found; the handler: apache/airflow #68028

HITL_ANSWER = re.compile(
    r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/(?P<run_id>[^/]+)/taskInstances/"
    r"(?P<task_id>[^/]+)/(?P<map_index>-?\d+)/hitlDetails$"
)


class ResumeAnsweredPrompts:
    """Pure ASGI middleware around Airflow's root app (registered by erasure_airflow.plugin)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        found = HITL_ANSWER.search(scope.get("path", "")) if scope["type"] == "http" else None
        if found is None or scope.get("method") != "PATCH":
            await self.app(scope, receive, send)
            return

        async def checked_send(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                # The route's session has committed (SessionDep runs at function scope).
                await run_in_threadpool(resume_if_parked, **found.groupdict())
            await send(message)

        await self.app(scope, receive, checked_send)


def resume_if_parked(dag_id: str, run_id: str, task_id: str, map_index: str) -> bool:
    """Resume the task instance if it is parked in awaiting_input with an answer on record."""
    import sqlalchemy as sa
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import handle_event_submit
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    with create_session(scoped=False) as session:
        # Task instance first, then the HITL row: the lock order of Airflow's own handlers.
        ti = session.scalar(
            sa.select(TaskInstance)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.run_id == run_id,
                TaskInstance.task_id == task_id,
                TaskInstance.map_index == int(map_index),
            )
            .with_for_update(of=TaskInstance)
        )
        if ti is None or ti.state != TaskInstanceState.AWAITING_INPUT:
            return False
        detail = session.scalar(
            sa.select(HITLDetail).where(HITLDetail.ti_id == ti.id).with_for_update(of=HITLDetail)
        )
        if detail is None or not detail.response_received:
            return False
        log.warning(
            "%s.%s[%s] of run %s was answered while it parked: resuming it",
            dag_id,
            task_id,
            map_index,
            run_id,
        )
        handle_event_submit(
            TriggerEvent(detail.as_resume_event_payload()), task_instance=ti, session=session
        )
        return True
