"""Daily: erasure requests near or past their Art. 12(3) deadline, and DPO extensions.

`erasure_deadlines` lists open requests due within a week or overdue (it fails, so that the
alerting everyone already watches fires, when any is overdue). `gdpr_erasure_extend` records
an extension of up to two months with its reason, in the registry and the signed records.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task

from erasure.model import REQUEST_REF_PATTERN
from erasure_airflow.queues import erasure_queue

log = logging.getLogger(__name__)
WARN_DAYS = 7

with DAG(
    dag_id="erasure_deadlines",
    schedule="@daily",
    catchup=False,
    is_paused_upon_creation=False,
    tags=["gdpr", "erasure"],
    default_args={"queue": erasure_queue()},
    doc_md=__doc__,
):

    @task
    def check_deadlines() -> dict[str, Any]:
        from erasure.config import Settings
        from erasure.deadlines import deadline_report
        from erasure.errors import ErasureError
        from erasure.registry.requests import RequestBook
        from erasure.store import open_store

        with open_store(Settings().store_url) as store:
            report = deadline_report(RequestBook(store), datetime.now().date(), WARN_DAYS)
        for line in report.lines:
            log.info("%s", line)
        if report.overdue:
            raise ErasureError(
                f"{len(report.overdue)} erasure request(s) are overdue: "
                + ", ".join(report.overdue)
            )
        return {"due_soon": report.due_soon, "overdue": report.overdue}

    check_deadlines()


with DAG(
    dag_id="gdpr_erasure_extend",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    tags=["gdpr", "erasure"],
    default_args={"queue": erasure_queue()},
    doc_md=__doc__,
    params={
        "request_ref": Param(type="string", pattern=REQUEST_REF_PATTERN, title="Request reference"),
        "months": Param(
            1,
            type="integer",
            enum=[1, 2],
            title="Extend by (months)",
            description="Art. 12(3): at most two further months, once.",
        ),
        "sealed_reason": Param(
            type="string",
            pattern=r"^vault:v[0-9]+:",
            title="Reason (sealed)",
            description="Set by the erasure desk, which seals the DPO's reason before it "
            "reaches Airflow. Extend a deadline on the desk, not here.",
        ),
    },
):

    @task
    def extend() -> str:
        from erasure import workflow
        from erasure.config import Settings
        from erasure.errors import ErasureError
        from erasure.services import Services
        from erasure_airflow.respondents import dpo_respondents

        context = get_current_context()
        params = context["params"]
        # The erasure desk creates these runs for the DPO logged in (nobody may trigger this
        # DAG over the API: erasure_airflow/auth.py): the run names her.
        by = str(getattr(context["dag_run"], "triggering_user_name", None) or "")
        settings = Settings()
        respondents = dpo_respondents(settings)
        if respondents is not None and by not in {str(r["name"]) for r in respondents}:
            raise ErasureError(
                f"this extension was asked for by {by or 'nobody named'}, who holds none of the "
                f"roles {', '.join(settings.dpo_roles)}: only the DPO extends a deadline, on "
                "the erasure desk"
            )
        with Services.open(settings) as svc:
            reason = svc.submissions.open_text(params["sealed_reason"])
            until = workflow.extend(
                svc, params["request_ref"], params["months"], reason, by or "unknown"
            )
        return until.isoformat()

    extend()
