"""The `pending_vacuums` table: tables whose deleted rows still await a VACUUM, and when one ran.

An erasure that could not VACUUM the table it deleted from (erasure.actions.reclaim) lists it
here, per request, with the date the daily pass will have run it by. The daily pass, or the
next erasure that vacuums the same table, marks the entries it covered. Tables are named, never
a value of theirs; nothing here touches a request (the pass runs long after completion).
"""

from __future__ import annotations

import builtins
from contextlib import AbstractContextManager
from datetime import date, datetime

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from erasure.model import DatasetRef
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import pending_vacuums


class PendingVacuum(BaseModel):
    """One request's deleted rows in one table, and whether a VACUUM has covered them."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    dataset: DatasetRef
    deleted_by: datetime  # the warehouse's clock once the delete had committed
    scheduled_at: datetime
    due_on: date
    reason: str  # why the last attempt did not cover it (erasure.actions.reclaim.REASONS)
    attempts: int
    last_attempt_at: datetime | None
    vacuumed_at: datetime | None
    vacuumed_by: str | None  # daily_pass | erasure | dropped

    @property
    def done(self) -> bool:
        return self.vacuumed_at is not None

    def overdue(self, today: date) -> bool:
        """Still pending after the day it was due by."""
        return not self.done and today > self.due_on


class PendingVacuums:
    """The `pending_vacuums` table."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def schedule(
        self,
        request_ref: str,
        dataset: DatasetRef,
        *,
        deleted_by: datetime,
        reason: str,
        due_on: date,
        at: datetime,
    ) -> None:
        """List `dataset` as awaiting a VACUUM for `request_ref`; a second call (a retried
        task) keeps the first entry."""
        insert = (
            conflict_insert(pending_vacuums, self._store.dialect)
            .values(
                request_ref=request_ref,
                dataset_namespace=dataset.namespace,
                dataset_name=dataset.name,
                deleted_by=deleted_by,
                scheduled_at=at,
                due_on=due_on,
                reason=reason,
                attempts=1,
                last_attempt_at=at,
            )
            .on_conflict_do_nothing(
                index_elements=["request_ref", "dataset_namespace", "dataset_name"]
            )
        )
        with self._db("schedule a vacuum"), self._store.engine.begin() as conn:
            conn.execute(insert)

    def pending(self) -> builtins.list[PendingVacuum]:
        """Every entry no VACUUM has covered yet, oldest first."""
        return self._list(pending_vacuums.c.vacuumed_at.is_(None))

    def list(self, dataset: DatasetRef | None = None) -> builtins.list[PendingVacuum]:
        """Every entry (of `dataset`), done or not, oldest first."""
        if dataset is None:
            return self._list()
        return self._list(*_of(dataset))

    def covered(
        self, dataset: DatasetRef, *, deleted_by: datetime, at: datetime, by: str
    ) -> builtins.list[PendingVacuum]:
        """Mark done every pending entry of `dataset` whose delete had committed by
        `deleted_by` (a VACUUM at `at` removed what it left); the entries marked."""
        due = self._list(*_of(dataset), pending_vacuums.c.vacuumed_at.is_(None))
        marked = [e for e in due if e.deleted_by <= deleted_by]
        if marked:
            with self._db("record a vacuum"), self._store.engine.begin() as conn:
                conn.execute(
                    pending_vacuums.update()
                    .where(*_of(dataset), pending_vacuums.c.vacuumed_at.is_(None))
                    .where(pending_vacuums.c.deleted_by <= deleted_by)
                    .values(vacuumed_at=at, vacuumed_by=by)
                )
        return marked

    def attempted(self, dataset: DatasetRef, *, reason: str, at: datetime) -> None:
        """Count one more attempt on the pending entries of `dataset`, and why it fell short."""
        with self._db("record a vacuum attempt"), self._store.engine.begin() as conn:
            conn.execute(
                pending_vacuums.update()
                .where(*_of(dataset), pending_vacuums.c.vacuumed_at.is_(None))
                .values(attempts=pending_vacuums.c.attempts + 1, reason=reason, last_attempt_at=at)
            )

    def _list(self, *where: sa.ColumnElement[bool]) -> builtins.list[PendingVacuum]:
        query = (
            sa.select(pending_vacuums)
            .where(*where)
            .order_by(pending_vacuums.c.scheduled_at, pending_vacuums.c.id)
        )
        with self._db("read the pending vacuums"), self._store.engine.connect() as conn:
            return [_entry(row) for row in conn.execute(query).mappings()]

    def _db(self, verb: str) -> AbstractContextManager[None]:
        return store_errors(self._store, verb)


def _of(dataset: DatasetRef) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        pending_vacuums.c.dataset_namespace == dataset.namespace,
        pending_vacuums.c.dataset_name == dataset.name,
    )


def _entry(row: sa.RowMapping) -> PendingVacuum:
    values = {k: v for k, v in row.items() if k not in ("id", "dataset_namespace", "dataset_name")}
    dataset = DatasetRef(row["dataset_namespace"], row["dataset_name"])
    return PendingVacuum.model_validate({**values, "dataset": dataset})
