"""The request book (`erasure.registry.requests`): status moves forward and completes only after
verifying; the Art. 12(3) deadline, its one extension, and the requests due soon."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from erasure.catalog import Catalog
from erasure.errors import RequestError
from erasure.registry.requests import RequestStatus, add_months
from erasure.store import open_store
from tests.unit.registry.support import MemoryKeyStore, Peppers, request
from tests.unit.registry_support import Books, books_for, register


def test_status_moves_forward_and_completes_only_after_verifying(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    with pytest.raises(RequestError, match="cannot go from registered to complete"):
        registry.requests.set_status("REQ-1", RequestStatus.COMPLETE)
    for status in ("planned", "acting", "failed", "acting", "verifying"):
        assert registry.requests.set_status("REQ-1", status).status == status
    again = registry.requests.set_status("REQ-1", "verifying")  # the same status: a no-op
    assert again.status is RequestStatus.VERIFYING
    registry.requests.set_status("REQ-1", RequestStatus.COMPLETE_WITH_EXEMPTIONS)
    with pytest.raises(RequestError, match="allowed next: nothing"):
        registry.requests.set_status("REQ-1", RequestStatus.ACTING)
    with pytest.raises(RequestError, match="status must be one of"):
        registry.requests.set_status("REQ-1", "done")


def test_a_failed_request_resumes_but_cannot_jump_to_complete(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    registry.requests.set_status("REQ-1", "failed")
    with pytest.raises(RequestError, match="failed to complete"):
        registry.requests.set_status("REQ-1", "complete")
    assert registry.requests.set_status("REQ-1", "planned").status is RequestStatus.PLANNED


def test_mark_submission_destroyed_keeps_the_first_time(registry: Books, catalog: Catalog) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    first = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
    registry.requests.mark_submission_destroyed("REQ-1", first)
    later = registry.requests.mark_submission_destroyed("REQ-1", first + timedelta(hours=1))
    assert later.submission_destroyed_at == first
    with pytest.raises(RequestError, match="naive"):
        registry.requests.mark_submission_destroyed("REQ-1", datetime(2026, 1, 10))


def test_extension_is_once_at_most_two_months_with_a_reason_within_the_first_month(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")  # due 2026-02-09
    today = date(2026, 2, 1)
    with pytest.raises(RequestError, match="1 or 2 months"):
        registry.requests.extend("REQ-1", 3, "complex", today=today)  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="needs a reason"):
        registry.requests.extend("REQ-1", 2, "   ", today=today)
    with pytest.raises(RequestError, match="within the first month"):
        registry.requests.extend("REQ-1", 1, "complex", today=date(2026, 2, 10))

    extended = registry.requests.extend("REQ-1", 2, "14 backups to restore and search", today=today)
    assert extended.extended_until == date(2026, 4, 9)
    assert extended.effective_due_on == date(2026, 4, 9)
    assert extended.extension_reason == "14 backups to restore and search"
    with pytest.raises(RequestError, match="already extended until 2026-04-09"):
        registry.requests.extend("REQ-1", 1, "more", today=today)


def test_a_closed_request_is_not_extended(registry: Books, catalog: Catalog) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    for status in ("planned", "acting", "verifying", "complete"):
        registry.requests.set_status("REQ-1", status)
    with pytest.raises(RequestError, match="is complete: nothing to extend"):
        registry.requests.extend("REQ-1", 1, "late", today=date(2026, 1, 20))


def test_due_within_lists_open_requests_by_effective_deadline(
    registry: Books, catalog: Catalog
) -> None:
    def submit(ref: str, received: date) -> None:
        register(
            registry,
            request(ref, identifier=f"{ref.lower()}@example.org", received_on=received),
            catalog=catalog,
            run_id=f"erasure-{ref}",
        )

    today = date(2026, 3, 1)
    submit("OVERDUE", date(2026, 1, 1))  # due 01-31
    submit("SOON", date(2026, 2, 3))  # due 03-05
    submit("LATER", date(2026, 2, 20))  # due 03-22
    submit("EXTENDED", date(2026, 2, 1))  # due 03-03, extended to 04-03
    submit("DONE", date(2026, 1, 2))  # due 02-01, but complete
    registry.requests.extend("EXTENDED", 1, "large estate", today=date(2026, 2, 15))
    for status in ("planned", "acting", "verifying", "complete"):
        registry.requests.set_status("DONE", status)

    assert [r.request_ref for r in registry.requests.due_within(today, 7)] == ["OVERDUE", "SOON"]
    assert [r.request_ref for r in registry.requests.due_within(today, 40)] == [
        "OVERDUE",
        "SOON",
        "LATER",
        "EXTENDED",
    ]
    assert [r.request_ref for r in registry.requests.due_within(today, 0)] == ["OVERDUE"]
    assert [r.request_ref for r in registry.requests.list(RequestStatus.COMPLETE)] == ["DONE"]
    assert [r.request_ref for r in registry.requests.list()] == [
        "OVERDUE",
        "DONE",
        "EXTENDED",
        "SOON",
        "LATER",
    ]
    with pytest.raises(RequestError, match="0 or more"):
        registry.requests.due_within(today, -1)


def test_unknown_refs(registry: Books) -> None:
    assert registry.requests.get("NOPE") is None
    for call in (registry.secrets.unpark, registry.secrets.destroy):
        with pytest.raises(RequestError, match="no erasure request 'NOPE' is registered"):
            call("NOPE")


@pytest.mark.parametrize(
    ("day", "months", "expected"),
    [
        (date(2026, 1, 31), 1, date(2026, 2, 28)),
        (date(2028, 1, 31), 1, date(2028, 2, 29)),
        (date(2026, 11, 30), 2, date(2027, 1, 30)),
        (date(2026, 12, 15), 1, date(2027, 1, 15)),
    ],
)
def test_add_months_clamps_to_the_end_of_the_month(day: date, months: int, expected: date) -> None:
    assert add_months(day, months) == expected


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/erasure.db"
    return str(request.getfixturevalue("postgres_schema_url"))


def test_of_calls_racing_to_one_status_one_moves_it(store_url: str, catalog: Catalog) -> None:
    # Two tasks of one run failing at once each record the failure: one signs the record.
    with open_store(store_url) as store:
        registry = books_for(store, MemoryKeyStore(), Peppers())
        register(registry, request(), catalog=catalog, run_id="r")
        registry.requests.set_status("REQ-1", "planned")
        start = threading.Barrier(4)

        def fail() -> bool:
            start.wait()
            return registry.requests.move("REQ-1", RequestStatus.FAILED)

        with ThreadPoolExecutor(4) as pool:
            for _ in range(10):  # a failed request resumes: each round fails it again
                registry.requests.set_status("REQ-1", "acting")
                moved = list(pool.map(lambda _: fail(), range(4)))
                assert sorted(moved) == [False, False, False, True]
                assert registry.requests.require("REQ-1").status is RequestStatus.FAILED
