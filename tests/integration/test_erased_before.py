"""A person erased by one request and asked about again under another reference is told who
erased them and when, not that the identifier may be mistyped: the plan, the DPO's prompt and
the completion record say so, on SQLite and Postgres. A repeated typo is still a typo."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from erasure.planner import SUBJECT_SEARCH
from erasure.prompts import NOT_FOUND_PROMPT, escalation_prompt
from erasure.services import Services
from tests.integration.workflow_support import CONF, run_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]

FIRST = "DSR-ERASED-1"


def request(ref: str, id_type: str, identifier: str) -> dict[str, Any]:
    return {**CONF, "request_ref": ref, "identifier_type": id_type, "identifier": identifier}


def test_a_subject_erased_before_is_said_to_be_so_by_the_plan_the_prompt_and_the_record(
    svc: Services,
) -> None:
    first = run_request(svc, request(FIRST, "email", "alice.smith@example.com"))
    assert first.body["subject_found"] is True
    today = datetime.now(UTC).date().isoformat()

    # Again by her address, and by the customer id the first request expanded to.
    for ref, id_type, identifier in (
        ("DSR-ERASED-2", "email", " Alice.Smith@Example.com"),
        ("DSR-ERASED-3", "customer_id", "C0001"),
    ):
        record = run_request(svc, request(ref, id_type, identifier))

        plan = svc.plans.get(ref, 1)
        [search] = [i for i in plan.items if i.dataset == SUBJECT_SEARCH]
        assert search.reason.startswith(
            f"the {id_type} was already erased by {FIRST}, on {today}: its tombstone is on the "
            "suppression list, and it was found in no dataset (searched crm.customers"
        )
        assert "mistyped" not in search.reason
        prompt = escalation_prompt(search)
        assert prompt.subject == NOT_FOUND_PROMPT  # the same question, the same answer
        assert prompt.options == ["Confirm the subject is not held"]
        assert prompt.body.startswith(
            f"**The {id_type} of this request was already erased by {FIRST}, on {today}.** "
        )
        assert "alice" not in prompt.body.lower() and "c0001" not in prompt.body.lower()
        assert record.body["subject_found"] is False
        assert record.body["already_erased_by"] == {"request_ref": FIRST, "on": today}
    assert svc.ledger.verify().ok


def test_a_typo_found_nowhere_twice_is_still_a_typo(svc: Services) -> None:
    # The first request found nobody: its tombstone is of the typo, and it erased nothing.
    first = run_request(svc, request("DSR-TYPO-1", "email", "alice.smith@example.co"))
    assert "already_erased_by" not in first.body

    record = run_request(svc, request("DSR-TYPO-2", "email", "alice.smith@example.co"))

    [search] = [i for i in svc.plans.get("DSR-TYPO-2", 1).items if i.dataset == SUBJECT_SEARCH]
    assert search.reason.endswith("The identifier may be mistyped")
    assert escalation_prompt(search).body.startswith(
        "**The email of this request was found in no dataset.** It may be mistyped"
    )
    assert record.body["subject_found"] is False and "already_erased_by" not in record.body
