"""The `rematerialisation_runs` table: the rebuild DAG runs rebuilds triggered, numbered per DAG.

A new run is claimed before it is triggered: two rebuilds that decide on a new run at the same
moment claim the same number, so they name (and trigger) the same run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict

from erasure.registry.requests import now
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import UtcDateTime
from erasure.store.schema import rematerialisation_runs as runs

RUN_ID_PREFIX = "erasure-rebuild-"  # then "<dag_id>-<generation>": the Airflow run id


class RematerialisationRun(BaseModel):
    """One run of a rematerialisation DAG that a rebuild triggered."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    dag_id: str
    generation: int
    triggered_for: str  # the request whose rebuild claimed it
    triggered_at: datetime


class RunBook:
    """The `rematerialisation_runs` table."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    def recent(self, dag_id: str, limit: int) -> list[RematerialisationRun]:
        """The DAG's newest runs first."""
        query = _newest(dag_id).limit(limit)
        with self._db("list the rematerialisation runs"), self._engine.connect() as conn:
            return [_run(row) for row in conn.execute(query).mappings()]

    def get(self, run_id: str) -> RematerialisationRun | None:
        with self._db("read a rematerialisation run"), self._engine.connect() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).mappings().first()
        return None if row is None else _run(row)

    def claim(self, dag_id: str, request_ref: str) -> RematerialisationRun:
        """Claim the DAG's next run for `request_ref` and return the DAG's newest claim: this
        one, or one another rebuild claimed at the same moment (it names a run not yet
        triggered either). One statement numbers and inserts, so SQLite takes its write lock
        at once and two claims on Postgres meet on the unique number."""
        generation = (
            sa.select(sa.func.coalesce(sa.func.max(runs.c.generation), 0) + 1)
            .where(runs.c.dag_id == dag_id)
            .scalar_subquery()
        )
        claimed = sa.select(
            sa.literal(RUN_ID_PREFIX + dag_id + "-") + sa.cast(generation, sa.String),
            sa.literal(dag_id),
            generation,
            sa.literal(request_ref),
            sa.literal(now(), UtcDateTime),
        )
        columns = ["run_id", "dag_id", "generation", "triggered_for", "triggered_at"]
        with self._db("claim a rematerialisation run"), self._engine.begin() as conn:
            conn.execute(
                conflict_insert(runs, self._store.dialect)
                .from_select(columns, claimed)
                .on_conflict_do_nothing()
            )
            row = conn.execute(_newest(dag_id).limit(1)).mappings().one()
        return _run(row)

    def _db(self, verb: str) -> Any:
        return store_errors(self._store, verb)


def _newest(dag_id: str) -> sa.Select[Any]:
    return sa.select(runs).where(runs.c.dag_id == dag_id).order_by(runs.c.generation.desc())


def _run(row: Any) -> RematerialisationRun:
    return RematerialisationRun.model_validate(dict(row))
