"""DPO rulings: per-option requirements, standing rulings, rulings of a request."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from erasure.model import DatasetRef
from erasure.rulings import (
    EXEMPTIONS,
    OPTION_LABELS,
    Exemption,
    Ruling,
    RulingBook,
    RulingError,
    RulingOption,
)
from erasure.store import Store, open_store
from erasure.store.schema import requests, rulings

MODEL = DatasetRef("warehouse", "ml.churn_model")
DECIDED = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as opened:
        with opened.engine.begin() as conn:
            now = datetime.now(UTC)
            conn.execute(
                requests.insert().values(
                    request_ref="REQ-1",
                    subject_hash="a" * 64,
                    identifier_type="email",
                    pepper_version=1,
                    legal_ground="art17_1_a",
                    received_on=date(2026, 2, 20),
                    due_on=date(2026, 3, 22),
                    status="awaiting_dpo",
                    run_id="erasure-REQ-1",
                    dry_run=False,
                    created_at=now,
                    updated_at=now,
                )
            )
        yield opened


@pytest.fixture
def book(store: Store) -> RulingBook:
    return RulingBook(store)


def ruling(**fields: Any) -> Ruling:
    values: dict[str, Any] = {
        "option": RulingOption.NON_PERSONAL,
        "author_id": "dpo-7",
        "author_name": "Dana Officer",
        "justification": "weights hold no row-level data; checked with membership inference",
        "decided_at": DECIDED,
        **fields,
    }
    return Ruling(dataset=MODEL, **values)


def test_every_option_and_exemption_has_a_label() -> None:
    assert set(OPTION_LABELS) == set(RulingOption)
    assert set(EXEMPTIONS) == set(Exemption)
    assert EXEMPTIONS[Exemption.E].endswith("legal claims")
    assert "statistical" in EXEMPTIONS["d"]  # type: ignore[index]
    assert OPTION_LABELS[RulingOption.RETAIN_EXEMPTION] == "Retain under an Art. 17(3) exemption"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"option": "retain_exemption"}, "retain_exemption must cite the Art. 17(3) point"),
        ({"option": "rebuild_by_date"}, "rebuild_by_date needs the date"),
        ({"justification": "   "}, "justification: must not be empty"),
        ({"exemption": "b"}, "only retain_exemption cites one"),
        ({"scheduled_by": date(2026, 4, 1)}, "only rebuild_by_date is scheduled"),
        (
            {"option": "rebuild_by_date", "scheduled_by": date(2026, 2, 1)},
            "scheduled_by: must not be before",
        ),
        ({"standing_until": date(2026, 2, 28)}, "standing_until: must not be before"),
        ({"exemption": "f", "option": "retain_exemption"}, "exemption"),
    ],
)
def test_each_option_requires_what_it_needs(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ruling(**fields)


def test_the_exemption_message_lists_the_points() -> None:
    with pytest.raises(ValidationError) as err:
        ruling(option="retain_exemption")
    assert "a (exercising the right of freedom of expression" in str(err.value)
    assert "e (the establishment, exercise or defence of legal claims)" in str(err.value)


def test_record_checks_again_what_model_copy_skipped(book: RulingBook) -> None:
    unchecked = ruling().model_copy(update={"option": RulingOption.RETAIN_EXEMPTION})
    with pytest.raises(RulingError, match=r"must cite the Art\. 17\(3\)"):
        book.record(unchecked)


def test_record_assigns_an_id_and_reads_back_the_same_ruling(book: RulingBook) -> None:
    kept = book.record(
        ruling(
            request_ref="REQ-1",
            option="retain_exemption",
            exemption="e",
            justification="litigation hold on the 2025 orders",
        )
    )
    assert kept.id is not None
    assert book.get(kept.id) == kept
    assert kept.exemption is Exemption.E and kept.dataset == MODEL
    assert book.for_request("REQ-1") == [kept]
    assert book.for_request("REQ-2") == []


def test_a_ruling_for_an_unregistered_request_is_refused(book: RulingBook) -> None:
    with pytest.raises(RulingError, match="'REQ-404' is not registered"):
        book.record(ruling(request_ref="REQ-404"))


def test_standing_ruling_applies_within_its_dates(book: RulingBook) -> None:
    standing = book.record(ruling(standing_until=date(2026, 6, 30)))
    book.record(ruling(request_ref="REQ-1", option="delete_artefact"))  # not standing

    assert book.standing_for(MODEL, date(2026, 3, 1)) == standing
    assert book.standing_for(MODEL, date(2026, 6, 30)) == standing
    assert book.standing_for(MODEL, date(2026, 7, 1)) is None
    assert book.standing_for(MODEL, date(2026, 2, 28)) is None  # before it was decided
    assert book.standing_for(DatasetRef("warehouse", "ml.other"), date(2026, 3, 1)) is None
    assert book.standing_for(DatasetRef("other-ns", MODEL.name), date(2026, 3, 1)) is None


def test_the_latest_standing_ruling_governs_even_to_shorten_an_older_one(
    book: RulingBook,
) -> None:
    older = book.record(ruling(standing_until=date(2026, 12, 31)))
    newer = book.record(
        ruling(
            option="rebuild_by_date",
            scheduled_by=date(2026, 5, 1),
            standing_until=date(2026, 4, 30),
            decided_at=datetime(2026, 4, 1, tzinfo=UTC),
        )
    )
    assert book.standing_for(MODEL, date(2026, 3, 15)) == older  # the newer one is not yet made
    assert book.standing_for(MODEL, date(2026, 4, 15)) == newer
    assert book.standing_for(MODEL, date(2026, 6, 1)) is None  # ask the DPO again


def test_a_standing_ruling_outlives_its_request(book: RulingBook, store: Store) -> None:
    kept = book.record(ruling(request_ref="REQ-1", standing_until=date(2026, 12, 31)))
    with store.engine.begin() as conn:
        conn.execute(requests.delete().where(requests.c.request_ref == "REQ-1"))
        assert conn.execute(sa.select(rulings.c.request_ref)).scalar_one() is None
    still = book.standing_for(MODEL, date(2026, 5, 1))
    assert still is not None and still.id == kept.id and still.request_ref is None


def test_the_database_refuses_an_option_without_its_requirement(store: Store) -> None:
    row = ruling().model_dump(exclude={"id", "dataset"})
    row.update(dataset_namespace=MODEL.namespace, dataset_name=MODEL.name)
    for bad in (
        {"option": "retain_exemption"},
        {"option": "rebuild_by_date"},
        {"justification": "  "},
        {"option": "shrug"},
    ):
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
            conn.execute(rulings.insert().values(**{**row, **bad}))
