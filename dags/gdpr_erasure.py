"""GDPR Art. 17 erasure: one run per request, from the DPO's desk to a verified completion.

Thin: every task calls one step of `erasure.workflow`; only request references, dataset
names, hashes and counts travel in XCom. Runs are started by the erasure desk (the plugin),
whose conf holds the request reference and the handle of the sealed submission, never what
the DPO typed; a second submission of the same reference does nothing new and says so in the
register task's log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import BaseOperator, Param, dag, get_current_context, task

from erasure.config import Settings
from erasure.model import REQUEST_REF_PATTERN
from erasure.rulings import EXEMPTIONS

if TYPE_CHECKING:
    from erasure.model import DatasetRef
    from erasure.prompts import Asked
    from erasure.rulings import DpoAnswer

log = logging.getLogger(__name__)
T = TypeVar("T")


WAIT_FOR_ORDER = timedelta(seconds=2)
WAIT_FOR_DPO = timedelta(seconds=60)
POLL_SECONDS = 3.0  # how often the triggerer asks whether a rematerialisation run ended
# A transient failure (warehouse, Vault) is retried soon; a lasting one fails the run, and the
# DPO clears the failed task after fixing it: every step resumes without acting twice.
RETRIES: dict[str, Any] = {"retries": 2, "retry_delay": timedelta(seconds=10)}
EXEMPTION_LABELS = {str(k.value): v for k, v in EXEMPTIONS.items()}


def _services() -> Any:
    from erasure_connections import postgres_url

    from erasure.services import Services

    # Catalog connections given as airflow_conn_id open through the Postgres provider's hook.
    return Services.open(Settings(), resolve=postgres_url)


def _record_failure(context: Any) -> None:
    """A task that failed for good is recorded (signed) against its request; clearing it
    resumes the request."""
    from erasure import workflow

    ref = (context.get("params") or {}).get("request_ref")
    ti = context.get("ti")
    if not ref or ti is None:
        return
    try:
        with _services() as svc:
            workflow.fail(svc, str(ref), f"run {ti.run_id}: task {ti.task_id} failed", ti.run_id)
    except Exception:  # the run failed already: never hide that behind the callback's error
        log.exception("could not record the failure of request %s", ref)


def dpo_answer(hitl: dict[str, Any], author_roles: frozenset[str] | None = None) -> DpoAnswer:
    """An Airflow HITL answer (chosen option label, params, who, when) as the domain's answer;
    `author_roles`: the DPO roles the answering user holds (None where nothing can tell)."""
    from pydantic import ValidationError

    from erasure.errors import describe_invalid
    from erasure.rulings import DpoAnswer, RulingError, option_for_label

    chosen = list(hitl.get("chosen_options") or [])
    if len(chosen) != 1:
        raise RulingError("the answer must choose exactly one option")
    params = dict(hitl.get("params_input") or {})
    user = dict(hitl.get("responded_by_user") or {})
    responded = hitl.get("responded_at")
    try:
        return DpoAnswer(
            option=option_for_label(str(chosen[0])),
            author_id=str(user.get("id") or "unknown"),
            author_name=str(user.get("name") or user.get("id") or "unknown"),
            justification=str(params.get("justification") or ""),
            exemption=params.get("exemption") or None,
            scheduled_by=params.get("scheduled_by") or None,
            standing_until=params.get("standing_until") or None,
            decided_at=responded if responded else datetime.now(UTC),
            author_roles=author_roles,
        )
    except ValidationError as exc:
        raise RulingError(
            f"the DPO's answer cannot be read ({describe_invalid(exc, locations=True)}): clear "
            "its dpo_decides prompt and the tasks after it, and answer again"
        ) from None


def _label(action: str, dataset: dict[str, str]) -> DatasetRef:
    """Name the mapped task in the UI ("erase_rows crm.orders"); the dataset it acts on."""
    from erasure.model import DatasetRef

    ref = DatasetRef(**dataset)
    get_current_context()["artefact"] = f"{action} {ref.name}"  # type: ignore[literal-required]
    return ref


def _refs(datasets: list[DatasetRef]) -> list[dict[str, str]]:
    """Datasets as XCom carries them: {"namespace", "name"}."""
    return [d.as_dict() for d in datasets]


@contextmanager
def _in_order(wait: timedelta = WAIT_FOR_ORDER) -> Iterator[None]:
    """A step that must wait for an earlier one of this run is rescheduled, not failed."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    from erasure.workflow import NotYet

    try:
        yield
    except NotYet as waiting:
        log.info("%s", waiting)
        raise AirflowRescheduleException(datetime.now(UTC) + wait) from None


class RebuildOperator(BaseOperator):
    """rebuild: re-materialise one derived artefact, after its upstreams (rescheduled until
    they are done). A DAG target's run is joined or triggered (one run serves every request
    ready before it starts), then waited for in the triggerer (`DagRunEndTrigger`): the task
    holds no worker slot while the run needs one."""

    template_fields = ("ref", "dataset")

    def __init__(self, *, ref: str, dataset: dict[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ref = ref
        self.dataset = dataset

    def execute(self, context: Any) -> dict[str, Any]:
        from erasure_airflow import REBUILD_TIMEOUT_SECONDS, trigger_dag
        from erasure_triggers import DagRunEndTrigger

        from erasure import workflow

        target = _label("rebuild", self.dataset)
        try:
            with _services() as svc, _in_order():
                run = trigger_dag(svc, self.ref)
                evidence = workflow.rebuild_artefact(svc, self.ref, target, run)
        except workflow.AwaitingRun as waiting:
            self.defer(
                trigger=DagRunEndTrigger(waiting.dag_id, waiting.run_id, POLL_SECONDS),
                method_name="execute_complete",
                timeout=timedelta(seconds=REBUILD_TIMEOUT_SECONDS),
            )
        return {"dataset": self.dataset, "method": evidence.method, "run_id": evidence.run_id}

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resumed once the run ended: record how (a failed or deleted run fails the task)."""
        from erasure_airflow import run_ended

        from erasure import workflow

        target = _label("rebuild", self.dataset)
        with _services() as svc:
            evidence = workflow.rebuild_artefact(svc, self.ref, target, run_ended(svc, event))
        return {"dataset": self.dataset, "method": evidence.method, "run_id": evidence.run_id}


class DpoPrompt(HITLOperator):
    """dpo_decides: one prompt, bound to the artefact it asks about (`asked`). When it resumes
    with the answer Airflow recorded (who gave it, when), that answer is recorded here as the
    ruling on that artefact and on nothing else. A prompt marked success or skipped by hand
    never resumes, so it is never a ruling; `record_rulings` then names it."""

    def __init__(self, *, asked: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asked = asked

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from erasure_respondents import author_roles, dpo_respondents

        from erasure import workflow

        answer = dict(super().execute_complete(context, event))  # a timeout raises here
        asked = self._asked(context)
        with _services() as svc:
            earlier = workflow.ruling_on_record(svc, asked.request_ref, asked.dataset)
            if earlier is not None:  # a prompt cleared after its answer was signed
                log.warning(
                    "%s was ruled already (%s, signed): this answer changes nothing",
                    asked.dataset.name,
                    earlier.ruling.option.value,
                )
                return {
                    "asked": asked.model_dump(mode="json"),
                    "option": earlier.ruling.option.value,
                }
            # Asked now, not when the prompt was assigned: whoever lost the role since may
            # not rule.
            roles = author_roles(dpo_respondents(svc.settings), answer.get("responded_by_user"))
            ruled = _transient_retries(
                lambda: workflow.rule_on(svc, asked, dpo_answer(answer, roles), self.subject)
            )
        log.info("ruling on %s recorded: %s", asked.dataset.name, ruled.ruling.option.value)
        return {"asked": asked.model_dump(mode="json"), "option": ruled.ruling.option.value}

    def _asked(self, context: Any) -> Asked:
        """What this prompt asks about, which must be about this run's own request."""
        from erasure.progress import StepError
        from erasure.prompts import Asked

        asked = Asked.model_validate(self.asked)
        if asked.request_ref != (context.get("params") or {}).get("request_ref"):
            raise StepError(
                f"this prompt asks about request {asked.request_ref}, not this run's: its "
                "answer is no ruling here"
            )
        return asked


def _transient_retries(step: Callable[[], T], attempts: int = 3) -> T:
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


@dag(
    dag_id="gdpr_erasure",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    max_active_runs=8,
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
    default_args={"on_failure_callback": lambda context: _record_failure(context)},
)
def gdpr_erasure() -> None:
    @task
    def register() -> dict[str, Any]:
        from erasure import workflow

        ctx = get_current_context()
        run_id = ctx["run_id"]
        with _services() as svc:
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
        with _services() as svc:
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

    @task
    def pick(planned: dict[str, Any], key: str) -> Any:
        """One list of the plan, to map a task over (Airflow maps only over whole XComs)."""
        return planned[key]

    # Mapped tasks run one at a time in plan order: erasures children first, rebuilds after
    # their upstreams (each task also checks that order and fails, to be retried, if broken).
    @task(map_index_template="{{ artefact }}", max_active_tis_per_dagrun=1, **RETRIES)
    def erase_rows(ref: str, dataset: dict[str, str]) -> dict[str, Any]:
        from erasure import workflow

        target = _label("erase_rows", dataset)
        with _services() as svc, _in_order():
            evidence = workflow.erase(svc, ref, target)
        return {"dataset": dataset, "rows_deleted": evidence.rows_deleted}

    # One at a time too: a subject's key may encrypt several datasets, and the second shred
    # must find the first's destruction on record to cite it (not claim the key again).
    @task(map_index_template="{{ artefact }}", max_active_tis_per_dagrun=1, **RETRIES)
    def crypto_shred(ref: str, dataset: dict[str, str]) -> dict[str, Any]:
        from erasure import workflow

        target = _label("crypto_shred", dataset)
        with _services() as svc:
            evidence = workflow.shred(svc, ref, target)
        return {"dataset": dataset, "keys_shredded": evidence.keys_shredded}

    @task(map_index_template="{{ artefact }}", trigger_rule="none_failed", **RETRIES)
    def aggregate_ok(ref: str, dataset: dict[str, str]) -> dict[str, Any]:
        from erasure import workflow

        target = _label("aggregate_ok", dataset)
        with _services() as svc, _in_order():
            evidence = workflow.confirm_aggregate(svc, ref, target)
        return {"dataset": dataset, "min_group_size": evidence.at_act.min_group_size}

    # Each prompt brings its own options: a shared row is retained or deleted, a subject found
    # nowhere is confirmed not held, a derived artefact gets the four of DESIGN section 3.
    # No retries: a retry would ask the DPO again and drop the answer given (an answer given
    # as the prompt appears is kept by the stack's executor and API middleware, see
    # plugins/erasure_executor.py and plugins/erasure_hitl.py).
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
                description="Why this is right for this artefact. Required.",
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
        other user's answer (erasure_respondents)."""
        from erasure_respondents import assigned_users, dpo_respondents

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

        with _services() as svc:
            return workflow.require_rulings(svc, ref)

    @task(trigger_rule="none_failed", **RETRIES)
    def tombstone(ref: str) -> int:
        from erasure import workflow

        with _services() as svc:
            return len(workflow.tombstone(svc, ref).tombstones)

    @task(trigger_rule="none_failed", **RETRIES)
    def verify(ref: str) -> bool:
        from erasure import workflow

        with _services() as svc:
            return workflow.verify(svc, ref).passed

    @task(**RETRIES)
    def complete(ref: str, verified: bool) -> dict[str, Any]:
        from erasure import workflow

        # Reached with verify marked success by hand, it waits for the DPO and then verifies.
        with _services() as svc, _in_order(WAIT_FOR_DPO):
            record = workflow.complete(svc, ref)
        return {"seq": record.seq, "status": record.status, "record_hash": record.record_hash}

    registration = register()
    planned = plan(registration)
    ref = planned["request_ref"]
    gate = proceed(planned)

    def items(key: str) -> Any:
        return pick.override(task_id=f"{key}_items")(planned, key)

    erased = erase_rows.partial(ref=ref).expand(dataset=items("erase"))
    shredded = crypto_shred.partial(ref=ref).expand(dataset=items("shred"))
    rebuilt = RebuildOperator.partial(
        task_id="rebuild",
        ref=ref,
        map_index_template="{{ artefact }}",
        max_active_tis_per_dagrun=1,
        trigger_rule="none_failed",
        **RETRIES,
    ).expand(dataset=items("rebuild"))
    kept = aggregate_ok.partial(ref=ref).expand(dataset=items("aggregate"))
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
