"""The LocalExecutor, counting each task's workloads in flight so a resumed task is not failed.

Why (the lost HITL answers of issue 9): a task that parks (a HITL prompt in `awaiting_input`,
or a deferral) and is resumed runs again under the *same* task-instance key, try number
included. When the answer comes within a scheduler loop or two of the prompt appearing, the
scheduler queues the resumed workload before it has read the exit of the parking one. In one
loop it then queues the resumed workload, hands it to a worker (it leaves `queued_tasks`),
reads the parking workload's exit ("success") and, in `process_executor_events`, finds the
task instance `queued` or `running` under that try with no workload the executor knows of
(`has_task` looks at `queued_tasks` and `running`, keyed by the same key): "finished with
state success, but the task instance's state attribute is queued", the task is failed as
killed externally, its try 2 asks the DPO again, and the resumed workload's report is refused
("Task Instance not found"). The scheduler already excuses a task still `scheduled` after a
trigger fired; once queued, nothing does.

The fix is where the knowledge is missing: the executor counts the workloads it was given
per key and not yet seen end, and `has_task` answers from that count, so the stale exit of
the parking workload is recognised as such while the resumed one is in flight.

It also imports the erasure domain and the task SDK's plugins once, before its workers fork:
every task process is forked from a worker, so each starts with them loaded. Otherwise every
task paid those imports (sqlglot, hvac, pydantic models, the catalog's kinds) again: 1.5 s
alone, 4-6 s with twenty requests running, most of a task's time.

Upstream: the stale-executor-event race family apache/airflow #66374 (CeleryExecutor, 3.2.0,
fixed for `scheduled` only in 3.2.2), #67287 (`queued`, 3.2.1) and #72716 (the resumed attempt
already `running`, 3.3.1, open). This subclass covers the LocalExecutor only: the Celery and
Kubernetes executors the chart runs are not patched.

Select it with AIRFLOW__CORE__EXECUTOR=erasure_airflow.patches.executor.ResumeSafeLocalExecutor
(the installed package); `make up` and the end-to-end stack do.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from airflow.executors import workloads
from airflow.executors.local_executor import LocalExecutor
from airflow.utils.state import TaskInstanceState
from packaging.specifiers import SpecifierSet

from erasure_airflow.tasks import preload_erasure, preload_task_plugins

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

# Checked on 3.3.2; the test of this patch fails on any Airflow outside this range, and on one
# whose BaseExecutor.has_task no longer answers from queued_tasks/running alone.
AIRFLOW_VERSIONS = SpecifierSet(">=3.2.0,<3.4")
UPSTREAM = (
    "https://github.com/apache/airflow/issues/66374",
    "https://github.com/apache/airflow/issues/67287",
    "https://github.com/apache/airflow/issues/72716",
)

_ENDED = (TaskInstanceState.SUCCESS, TaskInstanceState.FAILED)


class ResumeSafeLocalExecutor(LocalExecutor):
    """LocalExecutor whose `has_task` counts every workload of a key until its exit is read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight: Counter[Any] = Counter()

    def start(self) -> None:
        # Before the workers fork: each task process starts with the domain and the plugins.
        preload_erasure()
        preload_task_plugins()
        super().start()

    def queue_workload(self, workload: Any, session: Any) -> None:
        super().queue_workload(workload, session)
        if isinstance(workload, workloads.ExecuteTask):
            self.in_flight[workload.ti.key] += 1

    def change_state(
        self, key: Any, state: Any, info: Any = None, remove_running: bool = True
    ) -> None:
        if state in _ENDED and self.in_flight.get(key, 0) > 0:
            self.in_flight[key] -= 1
            if self.in_flight[key] == 0:
                del self.in_flight[key]
        super().change_state(key, state, info, remove_running)

    def has_task(self, task_instance: TaskInstance) -> bool:
        if super().has_task(task_instance):
            return True
        if self.in_flight.get(task_instance.key, 0) > 0:
            self.log.info(
                "%s: the exit read is the parked workload's; its resumed workload is in flight",
                task_instance.key,
            )
            return True
        return False
