"""What the DPO reads: every near-miss kind the matcher reports is said in words."""

from __future__ import annotations

import pytest

from erasure.matching import NearMiss
from erasure.model import DatasetRef, NearMissCount, SearchedColumns, SubjectSearch
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
