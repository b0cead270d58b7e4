"""GDPR Art. 17 erasure: one run per request, from the DPO's desk to a verified completion.

Thin: every task calls one step of `erasure.workflow`; only request references, dataset
names, hashes and counts travel in XCom. Runs are started by the erasure desk (the plugin),
whose conf holds the request reference and the handle of the sealed submission, never what
the DPO typed; a second submission of the same reference does nothing new and says so in the
register task's log.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Param, dag, get_current_context, task

from erasure.config import Settings
from erasure.model import REQUEST_REF_PATTERN
from erasure.rulings import EXEMPTIONS
from erasure_airflow.operators import DpoPrompt, RebuildOperator
from erasure_airflow.queues import erasure_queue
from erasure_airflow.tasks import RETRIES, in_order, open_services, record_failure, target

if TYPE_CHECKING:
    from erasure.model import DatasetRef

log = logging.getLogger(__name__)

WAIT_FOR_DPO = timedelta(seconds=60)
EXEMPTION_LABELS = {str(k.value): v for k, v in EXEMPTIONS.items()}


def _refs(datasets: list[DatasetRef]) -> list[dict[str, str]]:
    """Datasets as XCom carries them: {"namespace", "name"}."""
    return [d.as_dict() for d in datasets]


@dag(
    dag_id="gdpr_erasure",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    # Four requests act at once, the rest wait their turn: on two cores, twenty at once finished
    # in 134 s with a p95 of 19 s from the DPO's last answer to the record, against 150 s and
    # 55 s at eight (every running request's tasks competing for the same slots).
    max_active_runs=4,
    tags=["gdpr", "erasure"],
    doc_md=__doc__,
    params={
        "request_ref": Param(
            type="string",
            pattern=REQUEST_REF_PATTERN,
            title="Request reference",
            description="Your reference for this request, e.g. DSR-2026-0042 (letters, digits, "
            ". _ -). One reference, one erasure: resubmitting it does nothing new.",
        ),
        "submission": Param(
            type="string",
            pattern=r"^sub-[0-9a-f]{32}$",
            title="Sealed submission",
            description="Set by the erasure desk, which seals what the DPO typed before any of "
            "it reaches Airflow. Do not trigger this DAG by hand: submit requests on the desk "
            "(Erasure > New request).",
        ),
    },
    render_template_as_native_obj=True,
    default_args={
        "on_failure_callback": lambda context: record_failure(context),
        "queue": erasure_queue(),  # the erasure workers' own queue and identity
        # A task later in the run goes before an earlier one of another run (Airflow's default
        # is the reverse): a request under way finishes before the next one's plan starts,
        # instead of twenty requests all advancing together and all finishing late.
        "weight_rule": "upstream",
    },
)
def gdpr_erasure() -> None:
    @task
    def register() -> dict[str, Any]:
        from erasure import workflow

        ctx = get_current_context()
        run_id = ctx["run_id"]
        with open_services() as svc:
            # Opens the sealed submission on this worker; refused, it is destroyed and the DPO
            # submits a corrected request on the desk.
            registration = workflow.register(svc, dict(ctx["params"]), run_id)
        duplicate = registration.owner_run_id != run_id
        if duplicate:
            log.warning(
                "request %s was already submitted and is handled by run %s (status %s): this "
                "run does nothing new",
                registration.request_ref,
                registration.owner_run_id,
                registration.status.value,
            )
        return {"request_ref": registration.request_ref, "duplicate": duplicate}

    @task(multiple_outputs=True, **RETRIES)
    def plan(registration: dict[str, Any]) -> dict[str, Any]:
        from erasure import workflow
        from erasure.model import Action
        from erasure.prompts import bound_prompts

        ref = registration["request_ref"]
        with open_services() as svc, in_order():  # a lakehouse table held: rescheduled
            planned = workflow.plan_request(svc, ref)
            pending = workflow.pending_escalations(svc, ref)
            dry_run = svc.requests.require(ref).dry_run
        log.info(
            "request %s planned: %d artefacts, coverage %.1f%%",
            ref,
            len(planned.items),
            planned.coverage * 100,
        )
        return {
            "request_ref": ref,
            "go": not registration["duplicate"] and not dry_run,
            "erase": _refs(workflow.items_for(planned, Action.ERASE_ROWS)),
            "shred": _refs(workflow.items_for(planned, Action.CRYPTO_SHRED)),
            "rebuild": _refs(workflow.items_for(planned, Action.REBUILD)),
            "aggregate": _refs(workflow.items_for(planned, Action.AGGREGATE_OK)),
            # Each prompt carries the artefact it asks about and the plan it was asked from.
            "prompts": [p.model_dump(mode="json") for p in bound_prompts(ref, planned, pending)],
        }

    @task.short_circuit
    def proceed(planned: dict[str, Any]) -> bool:
        """Stop here for a dry run or a duplicate submission."""
        return bool(planned["go"])

    # One task per action, acting on each of its artefacts in plan order (erasures children
    # first, rebuilds after their upstreams; each step also checks that order and, if broken,
    # the task is rescheduled). A step done is on record with its evidence: a retried or
    # cleared task skips it and resumes at the first artefact not done.
    @task(**RETRIES)
    def erase_rows(ref: str, datasets: list[dict[str, str]]) -> list[dict[str, Any]]:
        from erasure import workflow

        with open_services() as svc, in_order():
            return [
                {
                    "dataset": d,
                    "rows_deleted": workflow.erase(svc, ref, target("erase_rows", d)).rows_deleted,
                }
                for d in datasets
            ]

    # In order too: a subject's key may encrypt several datasets, and the second shred must
    # find the first's destruction on record to cite it (not claim the key again).
    @task(**RETRIES)
    def crypto_shred(ref: str, datasets: list[dict[str, str]]) -> list[dict[str, Any]]:
        from erasure import workflow

        with open_services() as svc:
            return [
                {
                    "dataset": d,
                    "keys_shredded": workflow.shred(
                        svc, ref, target("crypto_shred", d)
                    ).keys_shredded,
                }
                for d in datasets
            ]

    @task(trigger_rule="none_failed", **RETRIES)
    def aggregate_ok(ref: str, datasets: list[dict[str, str]]) -> list[dict[str, Any]]:
        from erasure import workflow

        with open_services() as svc, in_order():
            return [
                {
                    "dataset": d,
                    "min_group_size": workflow.confirm_aggregate(
                        svc, ref, target("aggregate_ok", d)
                    ).at_act.min_group_size,
                }
                for d in datasets
            ]

    # Each prompt brings its own options: a shared row is retained or deleted, a subject found
    # nowhere is confirmed not held, a derived artefact gets the four of DESIGN section 3.
    # No retries: a retry would ask the DPO again and drop the answer given (an answer given
    # as the prompt appears is kept by the stack's executor and API middleware, see
    # erasure_airflow/patches/).
    dpo_decides = DpoPrompt.partial(
        task_id="dpo_decides",
        retries=0,
        # An answered prompt resumes before other queued work: the DPO's answer is recorded
        # within seconds even while twenty requests' tasks wait for a slot.
        priority_weight=100,
        weight_rule="absolute",
        params={
            "justification": Param(
                "",
                type="string",
                title="Justification",
                description="Why this is right for this artefact. Required. Describe the "
                "person by role or by the request, never by name or identifier: the erasure "
                "seals what you type before Airflow stores your answer and refuses a "
                "justification that names the subject.",
            ),
            "scheduled_by": Param(
                None,
                type=["null", "string"],
                format="date",
                title="Rebuild or retrain by",
                description="For 'Rebuild or retrain by a date'.",
            ),
            "exemption": Param(
                None,
                type=["null", "string"],
                enum=[None, *EXEMPTION_LABELS],
                values_display={"null": "No exemption", **EXEMPTION_LABELS},
                title="Art. 17(3) exemption",
                description="For 'Retain under an Art. 17(3) exemption'.",
            ),
            "standing_until": Param(
                None,
                type=["null", "string"],
                format="date",
                title="Standing ruling until",
                description="Optional: apply this ruling to later requests "
                "for this dataset until this date.",
            ),
        },
        map_index_template="{{ task.subject }}",
    )

    @task(**RETRIES)
    def assign_prompts(planned: dict[str, Any]) -> list[dict[str, Any]]:
        """The prompts, each assigned to the users holding a DPO role: Airflow refuses any
        other user's answer (erasure_airflow.respondents)."""
        from erasure_airflow.respondents import assigned_users, dpo_respondents

        prompts: list[dict[str, Any]] = planned["prompts"]
        settings = Settings()
        respondents = dpo_respondents(settings) if prompts else None
        if respondents is None:
            return prompts
        assigned = assigned_users(respondents, settings.dpo_roles)
        log.info("prompts assigned to %s", ", ".join(u["name"] for u in assigned))
        return [{**prompt, "assigned_users": assigned} for prompt in prompts]

    @task(trigger_rule="none_failed", **RETRIES)
    def record_rulings(ref: str) -> int:
        """Every escalation is ruled: each prompt recorded its own answer as it resumed."""
        from erasure import workflow

        with open_services() as svc:
            return workflow.require_rulings(svc, ref)

    @task(trigger_rule="none_failed", **RETRIES)
    def tombstone(ref: str) -> int:
        from erasure import workflow

        with open_services() as svc:
            return len(workflow.tombstone(svc, ref).tombstones)

    @task(trigger_rule="none_failed", **RETRIES)
    def verify(ref: str) -> bool:
        from erasure import workflow

        with open_services() as svc, in_order():  # a lakehouse table held: rescheduled
            return workflow.verify(svc, ref).passed

    @task(**RETRIES)
    def complete(ref: str, verified: bool) -> dict[str, Any]:
        from erasure import workflow

        # Reached with verify marked success by hand, it waits for the DPO and then verifies.
        with open_services() as svc, in_order(WAIT_FOR_DPO):
            record = workflow.complete(svc, ref)
        # A second copy of the head outside the store, beside the one published in Vault.
        log.info("completion record seq %d sha256:%s", record.seq, record.record_hash)
        return {"seq": record.seq, "status": record.status, "record_hash": record.record_hash}

    registration = register()
    planned = plan(registration)
    ref = planned["request_ref"]
    gate = proceed(planned)

    erased = erase_rows(ref, planned["erase"])
    shredded = crypto_shred(ref, planned["shred"])
    rebuilt = RebuildOperator(
        task_id="rebuild",
        ref=ref,
        datasets=planned["rebuild"],
        trigger_rule="none_failed",
        **RETRIES,
    )
    kept = aggregate_ok(ref, planned["aggregate"])
    assigned = assign_prompts(planned)
    decided = dpo_decides.expand_kwargs(assigned)
    ruled = record_rulings(ref)
    decided >> ruled
    stone = tombstone(ref)
    # Tombstoned before any row goes: the nightly CRM sync, while the DPO decides, would
    # otherwise load the erased rows again.
    gate >> stone >> erased
    gate >> [shredded, assigned]
    erased >> [rebuilt, kept]
    verified = verify(ref)
    [stone, erased, shredded, rebuilt, kept, ruled] >> verified
    complete(ref, verified)


gdpr_erasure()
