"""The action log (`erasure.registry.action_log`): what each action of a request did, so a retry
knows what is done; unknown requests and malformed names refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from erasure.catalog import Catalog
from erasure.errors import RequestError
from erasure.model import Action, DatasetRef
from erasure.registry.action_log import ActionStatus
from tests.unit.registry.support import request
from tests.unit.registry_support import Books, register


class Evidence(BaseModel):
    rows_deleted: int
    executed_at: datetime


def test_the_action_log_tells_a_retry_what_is_done(registry: Books, catalog: Catalog) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    orders = DatasetRef("warehouse", "crm.orders")
    assert registry.action_log.status("REQ-1", orders, Action.ERASE_ROWS) is None

    registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, ActionStatus.PENDING)
    failed = registry.action_log.record(
        "REQ-1", orders, Action.ERASE_ROWS, "failed", {"error": "lock timeout"}
    )
    assert (failed.status, failed.attempts) == (ActionStatus.FAILED, 1)
    registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "pending")
    when = datetime(2026, 1, 12, 9, 0, tzinfo=UTC)
    done = registry.action_log.record(
        "REQ-1", orders, Action.ERASE_ROWS, "done", Evidence(rows_deleted=3, executed_at=when)
    )

    assert (done.status, done.attempts, done.dataset.qualified) == (
        ActionStatus.DONE,
        2,
        "warehouse/crm.orders",
    )
    assert done.evidence == {"rows_deleted": 3, "executed_at": "2026-01-12T09:00:00Z"}
    assert registry.action_log.status("REQ-1", orders, "erase_rows") is ActionStatus.DONE
    # A later status without evidence keeps what was recorded.
    kept = registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "done")
    assert kept.evidence["rows_deleted"] == 3
    tombstones = DatasetRef("erasure", "suppression_list")
    registry.action_log.record("REQ-1", tombstones, Action.INSERT_TOMBSTONE, "done")
    assert [(a.dataset.qualified, a.action) for a in registry.action_log.list("REQ-1")] == [
        ("erasure/suppression_list", "insert_tombstone"),
        ("warehouse/crm.orders", "erase_rows"),
    ]


def test_the_action_log_refuses_unknown_requests_and_malformed_names(
    registry: Books, catalog: Catalog
) -> None:
    orders = DatasetRef("warehouse", "crm.orders")
    with pytest.raises(RequestError, match="no erasure request"):
        registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "done")
    register(registry, request(), catalog=catalog, run_id="r")
    with pytest.raises(RequestError, match="namespace/name"):
        registry.action_log.record("REQ-1", "crm.orders", Action.ERASE_ROWS, "done")  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="pending, done, failed"):
        registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "finished")
    with pytest.raises(RequestError, match="lower-case name"):
        registry.action_log.record("REQ-1", orders, "Erase Rows!", "done")
