"""The plans of each request: version 1 is the plan the run acts on, 2+ are re-plans.

Plans are immutable: saving a version that exists (a retried plan step) returns the stored
plan unchanged, and the caller acts on that one.
"""

from __future__ import annotations

import builtins
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from erasure.errors import RequestError
from erasure.model import Plan
from erasure.registry.requests import now, require, touch
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import plans


class PlanBook:
    """The `plans` table."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    def save(self, request_ref: str, plan: Plan, version: int) -> Plan:
        """Store the plan as `version` and return what is stored under it."""
        if version < 1:
            raise RequestError("plan versions start at 1 (the plan acted on); 2+ are re-plans")
        with self._db("save the plan"), self._engine.begin() as conn:
            record = require(conn, request_ref)
            if plan.subject.hash is not None and plan.subject.hash != record.subject_hash:
                raise RequestError(
                    f"the plan is for another subject than request {request_ref!r}: re-plan it "
                    "from the request's own parked identifier"
                )
            stored = _plan_row(conn, request_ref, version)
            if stored is not None:
                return stored
            if version > 1 and _plan_row(conn, request_ref, version - 1) is None:
                raise RequestError(
                    f"request {request_ref!r} has no plan version {version - 1}: save plans "
                    "in order, starting at 1"
                )
            conn.execute(
                conflict_insert(plans, self._store.dialect)
                .values(
                    request_ref=request_ref,
                    version=version,
                    plan_json=plan.model_dump_json(),
                    lineage_snapshot=plan.lineage_snapshot,
                    created_at=now(),
                )
                .on_conflict_do_nothing(index_elements=["request_ref", "version"])
            )
            touch(conn, request_ref)
            saved = _plan_row(conn, request_ref, version)
        assert saved is not None
        return saved

    def get(self, request_ref: str, version: int = 1) -> Plan:
        """The stored plan `version` of the request; RequestError if there is none."""
        with self._db("read the plan"), self._engine.connect() as conn:
            stored = _plan_row(conn, request_ref, version)
            if stored is None:
                require(conn, request_ref)
                raise RequestError(
                    f"request {request_ref!r} has no plan version {version}: run the plan step "
                    "first"
                )
        return stored

    def versions(self, request_ref: str) -> builtins.list[int]:
        """The plan versions stored for the request, ascending."""
        query = (
            sa.select(plans.c.version)
            .where(plans.c.request_ref == request_ref)
            .order_by(plans.c.version)
        )
        with self._db("list the plans"), self._engine.connect() as conn:
            return [int(v) for v in conn.execute(query).scalars()]

    def _db(self, verb: str) -> Any:
        return store_errors(self._store, verb)


def _plan_row(conn: Connection, request_ref: str, version: int) -> Plan | None:
    text = conn.execute(
        sa.select(plans.c.plan_json).where(
            plans.c.request_ref == request_ref, plans.c.version == version
        )
    ).scalar_one_or_none()
    return None if text is None else Plan.model_validate_json(text)
