"""`[celery] celery_config_options = erasure_airflow.celery_config.CELERY_CONFIG`: Airflow's own
Celery configuration, with what every task loads loaded once, when a Celery worker starts.

Each task a Celery worker runs is a process forked from one of its pool processes, which are
forked from the worker: so what the worker loads before its pool starts, every task starts
with, as on the erasure's LocalExecutor (whose workers fork from the scheduler):

- the erasure domain (sqlglot, hvac, the pydantic models, the catalog's kinds), imported with
  this module (the scheduler, whose executor builds the same Celery app, imports it too);
- the task SDK's plugins (this package's plugin with its API modules, the OpenLineage
  listener), which every task otherwise loads at its start to find its listeners: on two
  cores, 0.5 s of CPU per task and 42% of a twenty-request load's CPU. Loaded on
  `worker_init`, in the worker alone: the scheduler needs none of them.

Nothing connects at load: the forked tasks share modules, never sockets.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
from celery.signals import worker_init  # type: ignore[import-untyped]

from erasure_airflow.tasks import preload_erasure, preload_task_plugins

preload_erasure()
CELERY_CONFIG = dict(DEFAULT_CELERY_CONFIG)


def load_task_plugins(**_kwargs: Any) -> None:
    preload_task_plugins()


worker_init.connect(load_task_plugins)
