"""Who last wrote a dataset, as its run events tell: the run, and the Airflow DAG it ran in.

Airflow's OpenLineage provider sends each task's events with a `processing_engine` run facet
naming Airflow and a `parent` run facet whose job is the task's DAG: a dataset only tasks of
one DAG wrote can be rebuilt by triggering that DAG (catalog rebuild `{kind: producer}`). Events
of any other producer name no DAG, whatever their parent facet says: a Spark job's parent may
be an Airflow task, but the erasure triggers only what Airflow itself said it ran.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from erasure.lineage.openlineage.runs import run_lineage
from erasure.lineage.openlineage.spec import RunEvent
from erasure.model import DAG_ID, DatasetRef


@dataclass(frozen=True)
class LastWriter:
    """A job's run that last published writing a dataset (a COMPLETE, or a streaming run)."""

    job: str  # "<job namespace>/<job name>"
    run_id: str
    completed_at: datetime
    dag_id: str | None  # the Airflow DAG whose task it was; None: no Airflow task


def airflow_dag(events: Iterable[RunEvent]) -> str | None:
    """The DAG of an Airflow task's run, when every event of it that says Airflow sent it
    names the same parent job, in the task's own namespace, as the task's DAG (its job is
    `<dag_id>.<task_id>`), and that name is a DAG id; else None (not an Airflow task, as far
    as this system can tell)."""
    dags: set[str | None] = set()
    for event in events:
        facets: dict[str, Any] = event.run.facets
        engine, parent = facets.get("processing_engine"), facets.get("parent")
        if not isinstance(engine, dict) or str(engine.get("name", "")).lower() != "airflow":
            continue
        job = parent.get("job") if isinstance(parent, dict) else None
        name = job.get("name") if isinstance(job, dict) else None
        namespace = job.get("namespace") if isinstance(job, dict) else None
        fits = (
            isinstance(name, str)
            and DAG_ID.fullmatch(name) is not None
            and namespace == event.job.namespace
            and event.job.name.startswith(f"{name}.")
        )
        dags.add(name if fits else None)
    return dags.pop() if len(dags) == 1 else None


def last_writers(events: Iterable[RunEvent]) -> dict[DatasetRef, list[LastWriter]]:
    """For each dataset a run published (completed, or streaming), each job's run published
    last, newest first: as the store's `writers` reads them."""
    runs: dict[tuple[str, str], list[RunEvent]] = {}
    for event in events:
        key = (f"{event.job.namespace}/{event.job.name}", event.run.run_id)
        runs.setdefault(key, []).append(event)
    found: dict[DatasetRef, dict[str, LastWriter]] = {}
    for (job, run_id), run in runs.items():
        published = run_lineage(run)
        if published.completed_at is None:
            continue
        writer = LastWriter(job, run_id, published.completed_at, airflow_dag(run))
        for ref in published.summary.outputs:
            known = found.setdefault(ref, {}).get(job)
            if known is None or known.completed_at < writer.completed_at:
                found[ref][job] = writer
    return {ref: newest_first(jobs.values()) for ref, jobs in found.items()}


def newest_first(writers: Iterable[LastWriter]) -> list[LastWriter]:
    return sorted(writers, key=lambda w: (w.completed_at, w.job), reverse=True)
