"""The erasure DAG's own operators: a rebuild that waits in the triggerer, and the DPO's
prompt that records its answer as a ruling."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import BaseOperator

from erasure_airflow.tasks import in_order, open_services, retried_in_place, target

if TYPE_CHECKING:
    from erasure.actions.rebuild import RebuildEvidence
    from erasure.config import Settings
    from erasure.model import DatasetRef
    from erasure.prompts import Asked
    from erasure.rulings import DpoAnswer

log = logging.getLogger(__name__)

# A rematerialisation run that ends within ERASURE_REBUILD_WAIT_IN_TASK_SECONDS (default 10)
# of its trigger is waited for in the task, asked every BRIEF_POLL: handing the wait to the
# triggerer and back costs 2-4 s of its loops and the scheduler's. A longer run is waited for
# in the triggerer, holding no slot.
BRIEF_POLL = 0.2
POLL_SECONDS = 1.0  # how often the triggerer asks whether a rematerialisation run ended


def dpo_answer(
    hitl: dict[str, Any], justification: str, author_roles: frozenset[str] | None = None
) -> DpoAnswer:
    """An Airflow HITL answer (chosen option label, params, who, when) as the domain's answer,
    with the `justification` its sealed note held; `author_roles`: the DPO roles the answering
    user holds (None where nothing can tell)."""
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
            justification=justification,
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


class RebuildOperator(BaseOperator):
    """rebuild: re-materialise each derived artefact of the plan in lineage order, each after
    its upstreams (rescheduled until they are done). A DAG target's run is joined or triggered
    (one run serves every request ready before it starts), then waited for: briefly in the
    task, then in the triggerer (`DagRunEndTrigger`), so a long run holds no worker slot. A
    rebuild done is on record: a resumed, retried or cleared task goes on from the first one
    not done."""

    template_fields = ("ref", "datasets")

    def __init__(self, *, ref: str, datasets: list[dict[str, str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ref = ref
        self.datasets = datasets

    def execute(self, context: Any) -> list[dict[str, Any]]:
        return self._rebuild_each()

    def execute_complete(
        self, context: Any, event: dict[str, Any], dataset: dict[str, str]
    ) -> list[dict[str, Any]]:
        """Resumed once the awaited run ended: record how for `dataset` (a failed or deleted
        run fails the task), then go on with the rest."""
        self._rebuilt(target("rebuild", dataset), event)
        return self._rebuild_each()

    def _rebuild_each(self) -> list[dict[str, Any]]:
        from erasure import workflow
        from erasure_airflow.rebuild_runs import REBUILD_TIMEOUT_SECONDS, trigger_dag
        from erasure_airflow.triggers import DagRunEndTrigger

        done = []
        for dataset in self.datasets:
            artefact = target("rebuild", dataset)
            try:
                with open_services() as svc, in_order():
                    run = trigger_dag(svc, self.ref)
                    evidence = workflow.rebuild_artefact(svc, self.ref, artefact, run)
            except workflow.AwaitingRun as waiting:
                ended = _ended_soon(waiting.dag_id, waiting.run_id, svc.settings)
                if ended is None:
                    self.defer(
                        trigger=DagRunEndTrigger(waiting.dag_id, waiting.run_id, POLL_SECONDS),
                        method_name="execute_complete",
                        kwargs={"dataset": dataset},
                        timeout=timedelta(seconds=REBUILD_TIMEOUT_SECONDS),
                    )
                evidence = self._rebuilt(artefact, ended)
            done.append({"dataset": dataset, "method": evidence.method, "run_id": evidence.run_id})
        return done

    def _rebuilt(self, dataset: DatasetRef, event: dict[str, Any]) -> RebuildEvidence:
        from erasure import workflow
        from erasure_airflow.rebuild_runs import run_ended

        with open_services() as svc:
            return workflow.rebuild_artefact(svc, self.ref, dataset, run_ended(svc, event))


def _ended_soon(dag_id: str, run_id: str, settings: Settings) -> dict[str, str] | None:
    """The run's end as `DagRunEndTrigger` reports it, if it comes within the settings' wait
    in the task (None at once when that is 0)."""
    from erasure_airflow.triggers import run_end

    if settings.rebuild_wait_in_task_seconds == 0:
        return None
    deadline = time.monotonic() + settings.rebuild_wait_in_task_seconds
    while (ended := run_end(dag_id, run_id)) is None and time.monotonic() < deadline:
        time.sleep(BRIEF_POLL)
    return ended


class DpoPrompt(HITLOperator):
    """dpo_decides: one prompt, bound to the artefact it asks about (`asked`). When it resumes
    with the answer Airflow recorded (who gave it, when), that answer is recorded here as the
    ruling on that artefact and on nothing else. A prompt marked success or skipped by hand
    never resumes, so it is never a ruling; `record_rulings` then names it."""

    def __init__(self, *, asked: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asked = asked

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from erasure import workflow
        from erasure.intake import note_binding
        from erasure_airflow.respondents import author_roles, dpo_respondents

        answer = dict(super().execute_complete(context, event))  # a timeout raises here
        asked = self._asked(context)
        # The justification she typed was sealed by the plugin before Airflow stored the
        # answer (erasure_airflow.api.doors); the answer holds the note's handle.
        handle = str(dict(answer.get("params_input") or {}).get("justification") or "")
        ti = context["ti"]
        binding = note_binding(self.dag_id, context["run_id"], self.task_id, _index(ti))
        with open_services() as svc:
            try:
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
                reason = retried_in_place(lambda: svc.submissions.open_note(handle, binding))
                # Asked now, not when the prompt was assigned: whoever lost the role since may
                # not rule.
                roles = author_roles(dpo_respondents(svc.settings), answer.get("responded_by_user"))
                ruled = retried_in_place(
                    lambda: workflow.rule_on(
                        svc, asked, dpo_answer(answer, reason, roles), self.subject
                    )
                )
            finally:  # kept with the ruling, or refused: either way the note has served
                _destroy_note(svc, handle, binding)
        log.info("ruling on %s recorded: %s", asked.dataset.name, ruled.ruling.option.value)
        return {"asked": asked.model_dump(mode="json"), "option": ruled.ruling.option.value}

    def _asked(self, context: Any) -> Asked:
        """What this prompt asks about, which must be about this run's own request."""
        from erasure.errors import StepError
        from erasure.prompts import Asked

        asked = Asked.model_validate(self.asked)
        if asked.request_ref != (context.get("params") or {}).get("request_ref"):
            raise StepError(
                f"this prompt asks about request {asked.request_ref}, not this run's: its "
                "answer is no ruling here"
            )
        return asked


def _index(ti: Any) -> int:
    """The prompt's map index (-1 unmapped)."""
    index = getattr(ti, "map_index", -1)
    return -1 if index is None else int(index)


def _destroy_note(svc: Any, handle: str, binding: str) -> None:
    """The prompt's note destroyed; a failure is logged, not raised (the ruling stands, and
    the daily reconciler purges what is left)."""
    from erasure.errors import ErasureError
    from erasure.intake import NOTE_HANDLE

    if not NOTE_HANDLE.match(handle):
        return
    try:
        retried_in_place(lambda: svc.submissions.destroy_note(handle, binding))
        # An earlier answer's note for this prompt whose task never resumed serves nothing.
        retried_in_place(lambda: svc.submissions.destroy_notes_of(binding))
    except ErasureError as exc:
        log.warning(
            "the answer's sealed note %s is still kept (%s): the reconciler purges it", handle, exc
        )
