"""Hears, in the API server, an erasure run or task forced to a state by hand (issue 19).

Airflow's API (and the UI's buttons, which call it) fires the listener hooks when a person
sets a DAG run's state (`msg` "... manually set ...") or task instances' states
(`previous_state` None: only the API server passes that; workers and the scheduler pass the
state the task left). For a `gdpr_erasure` run this records, in the erasure store, what was
set, on which run or task, by whom (the login Airflow's own audit log names for that route)
and when. The desk shows it at once; for a run forced to success or failed it also starts
the reconciler, which records the request failed (signed) without its usual grace, instead
of the desk saying "acting" until the next sweep. None of it completes a request or makes a
ruling: a marked prompt is no answer (`record_rulings` names it) and `complete` verifies
itself.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

ERASURE_DAG = "gdpr_erasure"
RECONCILE_DAG = "erasure_reconcile"
MANUAL = "manually set"  # in the `msg` the API passes for a run state set by hand
# Airflow's routes that set a run's or task's state and log their caller first (the audit
# log's event is the route function's name).
STATE_ROUTES = ("patch_dag_run", "patch_task_instance", "patch_task_group_instances")


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    if MANUAL in (msg or ""):
        _forced_run(dag_run, "success")


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    if MANUAL in (msg or ""):
        _forced_run(dag_run, "failed")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if previous_state is None:
        _forced_task(task_instance, "success")


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    if previous_state is None:
        _forced_task(task_instance, "failed")


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    if previous_state is None:
        _forced_task(task_instance, "skipped")


def _forced_run(dag_run: Any, state: str) -> None:
    if getattr(dag_run, "dag_id", None) != ERASURE_DAG:
        return
    if _note(dag_run, "run", state):
        # After the route's own transaction: it still holds Airflow's DB (SQLite: locked).
        threading.Thread(target=_start_reconciler, name="erasure-reconcile-now").start()


def _forced_task(ti: Any, state: str) -> None:
    if getattr(ti, "dag_id", None) != ERASURE_DAG:
        return
    map_index = getattr(ti, "map_index", -1)
    target = ti.task_id if map_index is None or map_index < 0 else f"{ti.task_id}[{map_index}]"
    _note(getattr(ti, "dag_run", None), target, state, run_id=ti.run_id, task_id=ti.task_id)


def _note(
    dag_run: Any, target: str, state: str, run_id: str | None = None, task_id: str | None = None
) -> bool:
    """Record the intervention against the run's request; whether it was recorded."""
    from erasure.registry.interventions import Intervention, InterventionBook

    run_id = run_id or getattr(dag_run, "run_id", None)
    ref = ((getattr(dag_run, "conf", None) or {}).get("request_ref")) if dag_run else None
    if not ref or not run_id:
        log.warning("erasure run %s set to %s by hand: no request reference in it", run_id, state)
        return False
    intervention = Intervention(
        request_ref=str(ref),
        run_id=run_id,
        target=target,
        state=state,
        by=_who(run_id, task_id),
        at=datetime.now(UTC),
    )
    try:
        from erasure_airflow import api as erasure_api

        InterventionBook(erasure_api.app.state.erasure.store()).note(intervention)
    except Exception:  # Airflow logs and swallows a listener's error: say what was lost
        log.exception("could not record that %s", intervention.describe())
        return False
    log.warning("request %s: %s", ref, intervention.describe())
    return True


def _who(run_id: str, task_id: str | None) -> str:
    """The login Airflow's audit log names as the caller of the route that set this state:
    its row for this run (and task) by a state-setting route, written the moment before;
    "unknown" when there is none (the bulk routes log no run), never a guess."""
    import sqlalchemy as sa
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    since = datetime.now(UTC) - timedelta(seconds=30)
    query = sa.select(Log.owner).where(
        Log.dag_id == ERASURE_DAG,
        Log.run_id == run_id,
        Log.event.in_(STATE_ROUTES),
        Log.dttm >= since,
        Log.owner.is_not(None),
    )
    if task_id is not None:  # the task's own route, or the run's (which sets its tasks too)
        query = query.where(sa.or_(Log.task_id == task_id, Log.event == "patch_dag_run"))
    with create_session() as session:
        owner = session.scalar(query.order_by(Log.dttm.desc(), Log.id.desc()).limit(1))
    return str(owner) if owner else "unknown"


def _start_reconciler(tries: int = 10) -> None:
    """A run of erasure_reconcile now: it records the request failed, naming the run. Tried
    again for a few seconds while the route that fired the hook still holds the database."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    run_id = f"forced-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}"
    for attempt in range(1, tries + 1):
        try:
            with create_session() as session:
                trigger_dag(
                    RECONCILE_DAG,
                    triggered_by=DagRunTriggeredByType.REST_API,
                    run_id=run_id,
                    session=session,
                )
            return
        except Exception:  # its next scheduled sweep records it all the same
            if attempt == tries:
                log.exception("could not start %s now", RECONCILE_DAG)
            time.sleep(1)
