"""Who last wrote a dataset, as its run events tell: the run, and the Airflow DAG it ran in.

Airflow's OpenLineage provider sends each task's events with a `processing_engine` run facet
naming Airflow and a `parent` run facet whose job is the task's DAG: a dataset such a task
last wrote can be rebuilt by triggering that DAG (catalog rebuild `{kind: producer}`). Events
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
from erasure.model import DatasetRef


@dataclass(frozen=True)
class LastWriter:
    """The run that last published writing a dataset (a COMPLETE, or a streaming run)."""

    job: str  # "<job namespace>/<job name>"
    run_id: str
    completed_at: datetime
    dag_id: str | None  # the Airflow DAG whose task it was; None: no Airflow task


def airflow_dag(events: Iterable[RunEvent]) -> str | None:
    """The DAG of an Airflow task's run: its events' parent job, when Airflow sent them."""
    for event in events:
        facets: dict[str, Any] = event.run.facets
        engine, parent = facets.get("processing_engine"), facets.get("parent")
        if not isinstance(engine, dict) or str(engine.get("name", "")).lower() != "airflow":
            continue
        job = parent.get("job") if isinstance(parent, dict) else None
        name = job.get("name") if isinstance(job, dict) else None
        if isinstance(name, str) and name.strip():
            return name
    return None


def last_writers(events: Iterable[RunEvent]) -> dict[DatasetRef, LastWriter]:
    """For each dataset a run published (completed, or streaming), the run published last:
    as the store's `last_writer` reads it."""
    runs: dict[tuple[str, str], list[RunEvent]] = {}
    for event in events:
        key = (f"{event.job.namespace}/{event.job.name}", event.run.run_id)
        runs.setdefault(key, []).append(event)
    found: dict[DatasetRef, LastWriter] = {}
    for (job, run_id), run in runs.items():
        published = run_lineage(run)
        if published.completed_at is None:
            continue
        writer = LastWriter(job, run_id, published.completed_at, airflow_dag(run))
        for ref in published.summary.outputs:
            known = found.get(ref)
            if known is None or known.completed_at < writer.completed_at:
                found[ref] = writer
    return found
