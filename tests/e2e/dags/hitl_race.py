"""A purpose-built DAG for the answered-as-it-appears test: one mapped HITL prompt per index.

Each prompt offers three options and one free-text param; `collect` returns what every prompt
resumed with, in map order, so the test compares each accepted answer with the one recorded.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param, dag, task

OPTIONS = ["keep", "delete", "escalate"]


@dag(
    dag_id="hitl_race",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    max_active_runs=3,
    params={"prompts": Param(10, type="integer", minimum=1, maximum=200)},
    tags=["test"],
)
def hitl_race() -> None:
    @task
    def indexes(**context: Any) -> list[dict[str, str]]:
        count = int(context["params"]["prompts"])
        return [{"subject": f"prompt {i}"} for i in range(count)]

    asked = HITLOperator.partial(
        task_id="ask",
        options=OPTIONS,
        params={"token": Param("", type="string", title="Token")},
        map_index_template="{{ task.subject }}",
    ).expand_kwargs(indexes())

    @task
    def collect(answers: Any) -> list[dict[str, Any]]:
        return [
            {"chosen_options": a["chosen_options"], "token": a["params_input"].get("token")}
            for a in answers
        ]

    collect(asked.output)


hitl_race()
