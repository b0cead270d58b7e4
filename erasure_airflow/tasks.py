"""The glue every erasure task shares: the domain's services opened the Airflow way, plan
order kept by rescheduling, a failure recorded against its request, a step retried in place."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from erasure.config import Settings

if TYPE_CHECKING:
    from erasure.model import DatasetRef
    from erasure.services import Services

log = logging.getLogger(__name__)
T = TypeVar("T")

WAIT_FOR_ORDER = timedelta(seconds=2)
# A transient failure (warehouse, Vault) is retried soon; a lasting one fails the run, and the
# DPO clears the failed task after fixing it: every step resumes without acting twice.
RETRIES: dict[str, Any] = {"retries": 2, "retry_delay": timedelta(seconds=10)}


def open_services() -> Services:
    """The domain's services, catalog connections opened through Airflow's connections."""
    from erasure.services import Services
    from erasure_airflow.connections import postgres_url

    # Catalog connections given as airflow_conn_id open through the Postgres provider's hook.
    return Services.open(Settings(), resolve=postgres_url)


def record_failure(context: Any) -> None:
    """A task that failed for good is recorded (signed) against its request; clearing it
    resumes the request."""
    from erasure import workflow

    ref = (context.get("params") or {}).get("request_ref")
    ti = context.get("ti")
    if not ref or ti is None:
        return
    try:
        with open_services() as svc:
            workflow.fail(svc, str(ref), f"run {ti.run_id}: task {ti.task_id} failed", ti.run_id)
    except Exception:  # the run failed already: never hide that behind the callback's error
        log.exception("could not record the failure of request %s", ref)


def target(action: str, dataset: dict[str, str]) -> DatasetRef:
    """The dataset an action step acts on, as the plan task handed it over XCom; the task's log
    says which step it is at ("erase_rows crm.orders"), so a failure names its artefact."""
    from erasure.model import DatasetRef

    ref = DatasetRef(**dataset)
    log.info("%s %s", action, ref.name)
    return ref


@contextmanager
def in_order(wait: timedelta = WAIT_FOR_ORDER) -> Iterator[None]:
    """A step that must wait for an earlier one of this run is rescheduled, not failed."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    from erasure.workflow import NotYet

    try:
        yield
    except NotYet as waiting:
        log.info("%s", waiting)
        raise AirflowRescheduleException(datetime.now(UTC) + wait) from None


def retried_in_place(step: Callable[[], T], attempts: int = 3) -> T:
    """`step`, tried again on a store or Vault failure: a prompt is never retried by Airflow
    (a retry asks the DPO again and drops her answer), so its own step retries in place."""
    from erasure.errors import StoreError, VaultError

    for attempt in range(1, attempts + 1):
        try:
            return step()
        except (StoreError, VaultError) as exc:
            if attempt == attempts:
                raise
            log.warning("try %d of %d failed (%s): trying again", attempt, attempts, exc)
            time.sleep(RETRIES["retry_delay"].total_seconds())
    raise AssertionError("unreachable")


def preload_erasure() -> None:
    """Import what every erasure task imports, kinds and plug-ins included (no connection is
    opened: the forked tasks share modules, never sockets)."""
    import erasure.lineage
    import erasure.workflow  # the steps, the actions, the store
    from erasure.catalog import CONNECTIONS, REBUILD_TARGETS
    from erasure.config import KEYSTORES

    for name in erasure.lineage.__all__:  # the door loads its modules on first use
        getattr(erasure.lineage, name)
    for registry in (CONNECTIONS, REBUILD_TARGETS, KEYSTORES):
        registry.import_factories()  # the built-in kinds' and the installed plug-ins' factories


def preload_task_plugins() -> None:
    """Load the task SDK's plugins as every task does at its start to find its listeners
    (this package's plugin with its API modules, the OpenLineage listener), and keep them: in
    a process that forks tasks, every task then starts with them loaded (0.5 s of CPU a task
    otherwise, on two cores)."""
    from airflow.sdk.listener import get_listener_manager

    get_listener_manager()
