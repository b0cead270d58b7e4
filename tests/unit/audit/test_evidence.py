"""The effective erasure date: the day after which no copy of the subject's data remains."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from erasure.audit.evidence import EvidenceError, effective_erasure_date, parse_completion
from tests.unit.audit.support import REBUILD_BY, TAPE_RETENTION, completion_body


def test_it_is_the_completion_date_when_nothing_outlives_it() -> None:
    completed = datetime(2026, 11, 29, 23, 59, tzinfo=UTC)
    assert effective_erasure_date(completed) == date(2026, 11, 29)


def test_it_is_the_latest_of_every_date_that_keeps_a_copy_alive() -> None:
    assert effective_erasure_date(
        date(2026, 11, 29),
        snapshot_expiries=[date(2026, 12, 29), date(2027, 3, 1)],
        retention_expiries=[date(2027, 2, 27)],
        rebuild_by_dates=[date(2027, 1, 15)],
    ) == date(2027, 3, 1)
    assert effective_erasure_date(date(2026, 11, 29), rebuild_by_dates=[date(2027, 4, 1)]) == date(
        2027, 4, 1
    )


def test_the_completion_body_gathers_the_dates_itself() -> None:
    assert parse_completion(completion_body()).computed_effective_date() == REBUILD_BY
    with_tape = parse_completion(completion_body(with_tape=True))
    assert with_tape.computed_effective_date() == TAPE_RETENTION
    assert with_tape.has_exemptions


def test_rulings_in_the_rulings_table_shape_are_read_too() -> None:
    body = completion_body()
    ruling = body["rulings"][0]
    ruling["author_name"] = ruling.pop("author")
    ruling["scheduled_by"] = ruling.pop("rebuild_by_date")
    assert parse_completion(body).computed_effective_date() == REBUILD_BY


def test_an_unreadable_expiry_date_is_refused() -> None:
    body = completion_body()
    body["artefacts"][5]["evidence"]["snapshot_expiry_date"] = "next month"
    with pytest.raises(EvidenceError, match="snapshot_expiry_date is not an ISO date"):
        parse_completion(body)


def test_a_ruling_from_the_rulings_book_is_read_as_is() -> None:
    from erasure.model import DatasetRef
    from erasure.rulings import Ruling, RulingOption

    ruling = Ruling(
        dataset=DatasetRef("warehouse", "ml.churn_features"),
        option=RulingOption.REBUILD_BY_DATE,
        author_id="dpo-1",
        author_name="M. Okafor (DPO)",
        justification="Retrain on the January cycle.",
        scheduled_by=REBUILD_BY,
        decided_at=datetime(2026, 11, 20, 11, 2, tzinfo=UTC),
    )
    body = completion_body()
    body["rulings"] = [ruling.model_dump(mode="json")]
    evidence = parse_completion(body)
    assert evidence.rulings[0].dataset == "ml.churn_features"
    assert evidence.computed_effective_date() == REBUILD_BY


def test_a_ruling_on_a_same_named_table_of_another_namespace_rules_on_nothing_here() -> None:
    from erasure.model import DatasetRef
    from erasure.rulings import Ruling, RulingOption

    body = completion_body()
    escalated = next(a for a in body["artefacts"] if a["action"] == "escalate")
    ruled = next(r for r in body["rulings"] if r["dataset"] == escalated["dataset"])
    elsewhere = Ruling(
        dataset=DatasetRef("another-warehouse", escalated["dataset"]),
        option=RulingOption.RETAIN_EXEMPTION,
        exemption="b",
        author_id="dpo-1",
        author_name="M. Okafor (DPO)",
        justification="Kept for a legal obligation.",
        decided_at=datetime(2026, 11, 20, 11, 2, tzinfo=UTC),
    ).model_dump(mode="json")
    escalated["namespace"] = "warehouse"
    body["rulings"] = [r for r in body["rulings"] if r is not ruled] + [elsewhere]
    with pytest.raises(EvidenceError, match="was escalated and has no DPO ruling"):
        parse_completion(body)
    elsewhere["dataset"]["namespace"] = "warehouse"  # the same artefact: ruled
    parse_completion(body)
