"""`POST /erasure/api/v1/requests/{ref}/resume`: start a failed request's deleted run again.

A request whose run was deleted from Airflow is recorded failed by the reconciler
(dags/erasure_reconcile.py) with its identifier still parked. Its reference is registered,
so the desk refuses a new submission of it; this route (DPO only) creates the run again under
the request's own run id, and the run resumes the request where it stopped. A run that still
exists is cleared in Airflow instead (its failed tasks, with downstream).
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict

from erasure.errors import RequestError
from erasure.model import REQUEST_REF
from erasure.reconcile import resume_ticket
from erasure_airflow.api.auth import Caller, DpoDep, backend_of
from erasure_airflow.api.backend import ErasureBackend
from erasure_airflow.api.routes import NO_SUCH_REQUEST

log = logging.getLogger(__name__)

ERASURE_DAG_ID = "gdpr_erasure"
router = APIRouter(prefix="/api/v1")
BackendDep = Annotated[ErasureBackend, Depends(backend_of)]


class Resume(BaseModel):
    """The body: an empty JSON object. Asking for it keeps the route JSON-only like every
    other that acts (a form on another site cannot post JSON: erasure_airflow.api.csrf)."""

    model_config = ConfigDict(extra="forbid")


class Resumed(BaseModel):
    request_ref: str
    run_id: str
    run_url: str


@router.post("/requests/{ref}/resume", status_code=status.HTTP_201_CREATED)
async def resume_request(ref: str, body: Resume, caller: DpoDep, backend: BackendDep) -> Resumed:
    """Create the failed request's run again (it was deleted); 409 if it still exists. The
    body is `{}`."""
    return await run_in_threadpool(_resume, backend, ref, caller)


def _resume(backend: ErasureBackend, ref: str, caller: Caller) -> Resumed:
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.exceptions import DagRunAlreadyExists
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    requests = backend.requests()
    if not REQUEST_REF.match(ref) or requests.get(ref) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, NO_SUCH_REQUEST)
    try:
        run_id, ticket = resume_ticket(requests, ref)
    except RequestError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    conflict = HTTPException(
        status.HTTP_409_CONFLICT,
        "the request's run exists: clear its failed tasks (with downstream) in Airflow to "
        "resume it",
    )
    with create_session() as session:
        if DagRun.find(dag_id=ERASURE_DAG_ID, run_id=run_id, session=session):
            raise conflict
        try:
            trigger_dag(
                ERASURE_DAG_ID,
                triggered_by=DagRunTriggeredByType.REST_API,
                triggering_user_name=caller.name,
                run_id=run_id,
                conf=ticket.conf(),
                session=session,
            )
        except DagRunAlreadyExists:
            raise conflict from None
    log.info("request %s resumed by %s: run %s created again", ref, caller.name, run_id)
    return Resumed(request_ref=ref, run_id=run_id, run_url=f"/dags/{ERASURE_DAG_ID}/runs/{run_id}")
