"""What the DPO reads: every near-miss kind the matcher reports is said in words."""

from __future__ import annotations

from datetime import date

import pytest

from erasure.matching import NearMiss
from erasure.model import (
    DatasetRef,
    ErasedBefore,
    NearMissCount,
    SearchedColumns,
    SubjectSearch,
)
from erasure.planner import _not_found_item
from erasure.prompts import escalation_prompt

KINDS = [v for k, v in vars(NearMiss).items() if k.isupper()]


@pytest.mark.parametrize("kind", KINDS)
def test_each_near_miss_kind_is_said_in_words(kind: str) -> None:
    crm = DatasetRef("warehouse", "crm.customers")
    search = SubjectSearch(
        identifier_type="email",
        searched=[SearchedColumns(dataset=crm, columns=["email"])],
        near_misses=[NearMissCount(dataset=crm, column="email", kind=kind, rows=2)],
    )
    body = escalation_prompt(_not_found_item(search)).body
    assert "`crm.customers.email`: 2 row(s)" in body
    assert kind not in body  # the words, not the code


def test_a_subject_erased_before_is_said_to_be_so_and_asked_the_same_question() -> None:
    crm = DatasetRef("warehouse", "crm.customers")
    search = SubjectSearch(
        identifier_type="email",
        searched=[SearchedColumns(dataset=crm, columns=["email"])],
        near_misses=[],
        already_erased_by=ErasedBefore(request_ref="DSR-2026-0042", on=date(2026, 11, 20)),
    )
    item = _not_found_item(search)
    assert item.reason.startswith("the email was already erased by DSR-2026-0042, on 2026-11-20")
    assert "mistyped" not in item.reason
    prompt = escalation_prompt(item)
    assert prompt.body.startswith(
        "**The email of this request was already erased by DSR-2026-0042, on 2026-11-20.**"
    )
    plain = escalation_prompt(
        _not_found_item(search.model_copy(update={"already_erased_by": None}))
    )
    assert (prompt.subject, prompt.options) == (plain.subject, plain.options)
    assert prompt.body.split("\n\n")[1:] == plain.body.split("\n\n")[1:]  # only the lead differs
