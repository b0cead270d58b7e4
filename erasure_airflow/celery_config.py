"""`[celery] celery_config_options = erasure_airflow.celery_config.CELERY_CONFIG`: Airflow's own
Celery configuration, with the erasure domain imported once when a Celery worker loads it.

Each task a Celery worker runs is a process forked from one of its pool processes, which are
forked from the worker after it loaded this module: so every task starts with the domain
loaded (sqlglot, hvac, the pydantic models, the catalog's kinds), as on the erasure's
LocalExecutor, instead of importing it again. The scheduler loads it too (its executor builds
the same Celery app); nothing connects at import.
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from erasure_airflow.tasks import preload_erasure

preload_erasure()
CELERY_CONFIG = dict(DEFAULT_CELERY_CONFIG)
