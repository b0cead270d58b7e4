"""Requests in limbo (`erasure.reconcile`, through `workflow.reconcile`): an open request whose
run is gone or ended is recorded failed once, keeps its parked identifier, and resumes.

Airflow's answer about a run is what the reconciler DAG passes in (`run_state`: a run id to
its state, None when deleted); here a dict plays Airflow's part, the estate, store, Vault
and records are the real ones of tests/unit/test_workflow.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from erasure import workflow
from erasure.audit.records import RecordKind
from erasure.errors import RequestError
from erasure.model import Action
from erasure.reconcile import CALLBACK_GRACE
from erasure.registry.requests import RequestStatus
from erasure.services import Services
from tests.unit.test_workflow import REF, act, estate, register, svc

__all__ = ["estate", "svc"]  # fixtures

pytestmark = pytest.mark.vault


def later() -> datetime:
    """A reconciler run after the failure callback's grace has passed."""
    return datetime.now(UTC) + CALLBACK_GRACE + timedelta(minutes=1)


def failed_records(svc: Services, ref: str) -> list[str]:
    return [str(r.body.get("reason")) for r in svc.ledger.show(ref) if r.kind is RecordKind.FAILED]


def test_a_run_marked_failed_mid_erasure_leaves_a_failed_record_and_clearing_resumes(
    svc: Services,
) -> None:
    register(svc)
    plan = workflow.plan_request(svc, REF)
    workflow.tombstone(svc, REF)
    workflow.erase(svc, REF, workflow.items_for(plan, Action.ERASE_ROWS)[0])
    assert svc.requests.require(REF).status is RequestStatus.ACTING
    runs = {f"erasure-{REF}": "failed"}  # set to failed from the UI while it erased

    [limbo] = workflow.reconcile(svc, runs.get, now=later())
    assert limbo.request_ref == REF and limbo.status is RequestStatus.ACTING
    assert svc.requests.require(REF).status is RequestStatus.FAILED
    [reason] = failed_records(svc, REF)
    assert f"erasure-{REF} ended failed" in reason and "clear" in reason
    assert svc.secrets.unpark(REF).identities  # the parked identifier is kept for the resume

    assert workflow.reconcile(svc, runs.get, now=later()) == []  # once per failure
    assert len(failed_records(svc, REF)) == 1

    act(svc)  # the DPO cleared the run: it resumes where it stopped
    workflow.verify(svc, REF)
    record = workflow.complete(svc, REF)
    assert record.status is not None and svc.requests.require(REF).closed


def test_a_deleted_run_leaves_its_request_failed_with_the_reason(svc: Services) -> None:
    register(svc)
    workflow.plan_request(svc, REF)

    [limbo] = workflow.reconcile(svc, {}.get, now=later())
    assert limbo.run_state is None
    [reason] = failed_records(svc, REF)
    assert "is gone (deleted from Airflow)" in reason and "same run id" in reason
    assert REF.lower() not in reason.replace(f"erasure-{REF}".lower(), "")  # names the run only


def test_running_closed_just_ended_and_finished_dry_runs_are_left_alone(svc: Services) -> None:
    running, just_ended, dry = REF, "REQ-WF-0002", "REQ-WF-0003"
    for ref in (running, just_ended):
        register(svc, ref)
        workflow.plan_request(svc, ref)
    register(svc, dry, dry_run=True)
    workflow.plan_request(svc, dry)
    runs = {f"erasure-{running}": "running", f"erasure-{just_ended}": "failed"}

    # The failure callback of a run that has just ended is still on its way: not yet.
    assert workflow.reconcile(svc, runs.get) == []
    # A dry run ends at its plan, whatever became of its run.
    assert [limbo.request_ref for limbo in workflow.reconcile(svc, runs.get, now=later())] == [
        just_ended
    ]
    assert svc.requests.require(running).status is RequestStatus.PLANNED
    assert svc.requests.require(dry).status is RequestStatus.PLANNED


def test_a_run_set_to_success_by_hand_is_recorded_failed_at_once_naming_who(
    svc: Services,
) -> None:
    """Issue 19: the listener recorded who forced the run's state; the reconciler the listener
    starts records the request failed at once (no grace), naming them, never complete."""
    from erasure.registry.interventions import RUN, Intervention

    register(svc)
    workflow.plan_request(svc, REF)
    workflow.tombstone(svc, REF)
    runs = {f"erasure-{REF}": "success"}  # forced to success from the UI mid-erasure
    assert workflow.reconcile(svc, runs.get) == []  # within the grace, unheard: left alone
    svc.interventions.note(
        Intervention(
            request_ref=REF,
            run_id=f"erasure-{REF}",
            target=RUN,
            state="success",
            by="admin",
            at=datetime.now(UTC),
        )
    )

    [limbo] = workflow.reconcile(svc, runs.get)  # at once: no grace for a forced end
    assert limbo.run_state == "success"
    [reason] = failed_records(svc, REF)
    assert "the run set to success by admin" in reason and "Clear the run's tasks" in reason
    assert svc.requests.require(REF).status is RequestStatus.FAILED
    assert not [r for r in svc.ledger.show(REF) if r.kind is RecordKind.COMPLETED]
    # Cleared and run to its end, the signed completion lists what was done by hand.
    act(svc)
    record = workflow.complete(svc, REF)
    [listed] = record.body["interventions"]
    assert (listed["target"], listed["state"], listed["by"]) == (RUN, "success", "admin")


def test_a_justification_sealed_for_a_prompt_that_never_opened_it_is_purged_in_a_week(
    svc: Services,
) -> None:
    from erasure.intake import note_binding

    prompt = note_binding("gdpr_erasure", "erasure-DSR-1", "dpo_decides", 0)
    handle = svc.submissions.seal_note("Retained for the open dispute.", prompt)
    assert workflow.reconcile(svc, {}.get) == []
    assert svc.submissions.open_note(handle, prompt)  # its prompt may still resume
    workflow.reconcile(svc, {}.get, now=datetime.now(UTC) + workflow.NOTE_LIFETIME + timedelta(1))
    with pytest.raises(RequestError, match="not sealed by the erasure plugin"):
        svc.submissions.open_note(handle, prompt)
