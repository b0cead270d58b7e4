"""The `interventions` table: erasure runs and tasks a person forced to a state by hand.

Marking a task success, skipping it, failing a run or forcing it to success never completes
a request or changes a ruling (a prompt marked success is no answer; `complete` verifies
itself). What was done, by whom and when is still worth knowing at once: the desk shows it,
the reconciler records a forced run end without waiting, and the completion record lists
every intervention of the request's run.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from erasure.store import Store, store_errors
from erasure.store.schema import interventions

RUN = "run"  # the target of an intervention on the whole run


class Intervention(BaseModel):
    """One state set by hand: on the run, or on one task (`target` "<task_id>[<map_index>]")."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    run_id: str
    target: str
    state: str
    by: str
    at: datetime

    def describe(self) -> str:
        what = "the run" if self.target == RUN else f"task {self.target}"
        return f"{what} set to {self.state} by {self.by} at {self.at:%Y-%m-%d %H:%M:%S} UTC"


class InterventionBook:
    """The `interventions` table."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def note(self, intervention: Intervention) -> None:
        with store_errors(self._store, "record an intervention"), self._store.engine.begin() as c:
            c.execute(sa.insert(interventions).values(**intervention.model_dump()))

    def list(self) -> builtins.list[Intervention]:
        """Every intervention, oldest first (the desk groups them by run)."""
        query = sa.select(interventions).order_by(interventions.c.at, interventions.c.id)
        with store_errors(self._store, "read the interventions"), self._store.engine.connect() as c:
            return [_intervention(row) for row in c.execute(query).mappings()]

    def for_request(self, request_ref: str) -> builtins.list[Intervention]:
        """The request's interventions, oldest first."""
        query = (
            sa.select(interventions)
            .where(interventions.c.request_ref == request_ref)
            .order_by(interventions.c.at, interventions.c.id)
        )
        with store_errors(self._store, "read the interventions"), self._store.engine.connect() as c:
            return [_intervention(row) for row in c.execute(query).mappings()]


def _intervention(row: Any) -> Intervention:
    return Intervention.model_validate({k: v for k, v in row.items() if k != "id"})
