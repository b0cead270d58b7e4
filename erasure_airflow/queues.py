"""The Celery queue each kind of task runs on, so each runs under its own identity.

The erasure DAGs' tasks (which hold the erasure-worker Vault role and the worker's store role)
run on `ERASURE_TASK_QUEUE`; crm_ingest (pepper read, the suppression list read) on
`ERASURE_CRM_INGEST_QUEUE`; everything else on Airflow's default queue, served by workers
with no erasure identity at all. The Helm chart sets both variables and runs one Celery
worker set per queue, each with its own service account; unset (the embedded demo,
dag.test), every task uses the default queue. Read when a DAG file is parsed.
"""

from __future__ import annotations

import os

ERASURE_QUEUE_ENV = "ERASURE_TASK_QUEUE"
CRM_INGEST_QUEUE_ENV = "ERASURE_CRM_INGEST_QUEUE"


def _default_queue() -> str:
    from airflow.configuration import conf

    return conf.get("operators", "default_queue", fallback="default")


def erasure_queue() -> str:
    """The queue of the erasure DAGs' tasks."""
    return os.environ.get(ERASURE_QUEUE_ENV, "").strip() or _default_queue()


def crm_ingest_queue() -> str:
    """The queue of crm_ingest's tasks."""
    return os.environ.get(CRM_INGEST_QUEUE_ENV, "").strip() or _default_queue()
