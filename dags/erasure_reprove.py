"""Daily: every completed erasure proved again from its own record, and the VACUUMs that
erasures could not run, run.

For each completed request, every tombstone its record cites must still be in the
suppression list (a deleted one brings the subject back at the next CRM sync) and every key
it destroyed must still be absent from Vault (a key restored from a snapshot makes the
shredded copies readable again). Anything missing fails the task, naming the request
reference and what is missing, never an identifier (erasure.reprove).

`reclaim_space` runs VACUUM on every table an erasure deleted rows from but could not vacuum
(the role not the owner, a timeout, a transaction older than the delete) and records when it
ran; one past the date its completion record gave fails the task, naming the table
(erasure.actions.reclaim).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import DAG, task

from erasure_airflow.queues import erasure_queue

log = logging.getLogger(__name__)

with DAG(
    dag_id="erasure_reprove",
    schedule="@daily",
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=False,
    tags=["gdpr", "erasure"],
    default_args={"queue": erasure_queue()},
    doc_md=__doc__,
):

    @task
    def reprove() -> dict[str, Any]:
        from erasure import workflow
        from erasure.config import Settings
        from erasure.services import Services
        from erasure_airflow.connections import postgres_url

        with Services.open(Settings(), resolve=postgres_url) as svc:
            found = workflow.reprove(svc)
        log.info(
            "re-proved %d completed request(s): %d tombstone(s), %d key(s), %d missing",
            found.requests, found.tombstones, found.keys, len(found.missing),
        )  # fmt: skip
        found.require()  # raises ReproofError naming each request and what is missing
        return {"requests": found.requests, "tombstones": found.tombstones, "keys": found.keys}

    @task
    def reclaim_space() -> dict[str, Any]:
        from erasure import workflow
        from erasure.config import Settings
        from erasure.services import Services
        from erasure_airflow.connections import postgres_url

        with Services.open(Settings(), resolve=postgres_url) as svc:
            done = workflow.reclaim_pending(svc)
        log.info(
            "vacuumed %d table(s) covering %d pending erasure(s); %d still pending, %d overdue",
            len(done.vacuumed), done.entries_covered, len(done.pending), len(done.overdue),
        )  # fmt: skip
        done.require()  # raises ReclaimOverdue naming each table past its date
        return done.model_dump(mode="json")

    reprove()
    reclaim_space()
