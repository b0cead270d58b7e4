"""One rematerialisation run serves every request whose erasures were done before it started.

A rebuild by DAG needs a run of its DAG that reads the cleaned sources: one that starts after
everything the request's plan puts before the rebuild is done (`ready_at`). Instead of a run
per request, a rebuild joins the newest run a rebuild triggered when that run

- has not started yet (queued: every read it makes comes after this rebuild looked), or
- started at least CLOCK_SKEW after `ready_at` (running or succeeded),

and otherwise claims and triggers the DAG's next run. Rematerialisation DAGs run one at a time
(max_active_runs=1), so while a run works the next one queues and every request that becomes
ready meanwhile joins it: N requests sharing an artefact need about two runs, not N.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from erasure.errors import RebuildFailed
from erasure.model import DagRun
from erasure.registry.rematerialisations import RematerialisationRun, RunBook

# How far the scheduler's clock (a run's start) may be ahead of the workers' (when an erasure
# was logged done) without a run that started before the erasure looking as if it started after.
CLOCK_SKEW = timedelta(seconds=2)
CANDIDATES = 3  # the newest runs looked at before a new one is claimed
CLAIMS = 5  # new run numbers tried when each was found taken (an older Airflow run of that id)


class AirflowRuns(Protocol):
    """The Airflow side of rematerialisation runs (the adapter supplies it)."""

    def start(self, dag_id: str, run_id: str) -> bool:
        """Trigger the run; False if a run of that id exists already."""

    def status(self, dag_id: str, run_id: str) -> DagRun | None:
        """The run's state, None if Airflow has no such run."""


def serves(status: DagRun | None, ready_at: datetime) -> bool:
    """Whether a run in `status` rebuilds from sources cleaned by `ready_at`."""
    if status is None:
        return False
    if status.state == "queued":
        return True
    return (
        status.state in ("running", "success")
        and status.started_at is not None
        and status.started_at >= ready_at + CLOCK_SKEW
    )


def run_for(
    book: RunBook, airflow: AirflowRuns, dag_id: str, request_ref: str, ready_at: datetime
) -> RematerialisationRun:
    """The run of `dag_id` that rebuilds for `request_ref`: a serving one joined, or a new one
    claimed and triggered."""
    for run in book.recent(dag_id, CANDIDATES):
        if serves(airflow.status(dag_id, run.run_id), ready_at):
            return run
    for _ in range(CLAIMS):
        run = book.claim(dag_id, request_ref)
        # False: another rebuild triggered this claim a moment ago, or Airflow holds an older
        # run of that id (its store was reset): serving or not, Airflow says.
        started = airflow.start(dag_id, run.run_id)
        if started or serves(airflow.status(dag_id, run.run_id), ready_at):
            return run
    raise RebuildFailed(
        f"DAG {dag_id!r}: {CLAIMS} new rematerialisation run ids in a row exist in Airflow "
        "already and none of those runs can serve this request; check that the erasure store "
        "and Airflow belong to the same deployment, then retry"
    )
