"""What each restore replay erased: the `restore_replays` table, one row per replay.

A replay (`erasure.replay`) logs its evidence here before its delete commits (`erasing`),
marks it committed (`erased`), and closes it with the seq of its signed `replayed` record
(`recorded`). A replay of the same dataset that finds an open entry resumes it, so a crash
between the commit and the record still ends with the record. Counts, keyed hashes and
request references only: no value of a row is ever written here.

One replay of a dataset runs at a time (`ReplayLog.hold`): a second one, started while the
first still runs, would resume the first's entry and sign a second record of it. The hold is
a lock the database or the system releases when its holder dies (a Postgres session advisory
lock; beside a SQLite store's file, an flock), so a crashed replay is resumed, not waited on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from erasure.model import DatasetRef
from erasure.registry.requests import now
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.holds import hold
from erasure.store.schema import restore_replays


class ReplayStatus(StrEnum):
    ERASING = "erasing"  # evidence logged, the delete about to commit (or it died first)
    ERASED = "erased"  # the delete committed; the record is not on the chain yet
    RECORDED = "recorded"  # the signed `replayed` record is on the chain


OPEN = (ReplayStatus.ERASING, ReplayStatus.ERASED)


class ReplayEntry(BaseModel):
    """One replay as the log holds it."""

    model_config = ConfigDict(frozen=True)

    replay_ref: str
    dataset: DatasetRef
    status: ReplayStatus
    evidence: dict[str, Any]
    started_at: datetime
    updated_at: datetime
    record_seq: int | None = None


class ReplayLog:
    """The `restore_replays` table."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    @property
    def store(self) -> Store:
        return self._store

    def hold(self, dataset: DatasetRef) -> AbstractContextManager[bool]:
        """Hold the replay lock of `dataset` for the block: True, or False at once if another
        replay holds it. Released when the block ends, or its holder's process dies."""
        return hold(self._store, f"restore-replay\0{dataset.namespace}\0{dataset.name}")

    def note(
        self,
        replay_ref: str,
        dataset: DatasetRef,
        status: ReplayStatus,
        evidence: BaseModel | Mapping[str, Any],
    ) -> None:
        """Write the replay's status and evidence (the row is created on first note)."""
        document = (
            evidence.model_dump(mode="json")
            if isinstance(evidence, BaseModel)
            else to_jsonable_python(dict(evidence))
        )
        text = json.dumps(document, sort_keys=True, separators=(",", ":"))
        stamp = now()
        insert = conflict_insert(restore_replays, self._store.dialect).values(
            replay_ref=replay_ref,
            dataset_namespace=dataset.namespace,
            dataset_name=dataset.name,
            status=ReplayStatus(status).value,
            evidence_json=text,
            started_at=stamp,
            updated_at=stamp,
        )
        upsert = insert.on_conflict_do_update(
            index_elements=["replay_ref"],
            set_={"status": ReplayStatus(status).value, "evidence_json": text, "updated_at": stamp},
        )
        with store_errors(self._store, "log the restore replay"), self._engine.begin() as conn:
            conn.execute(upsert)

    def recorded(self, replay_ref: str, seq: int) -> None:
        """Close the replay: its `replayed` record is seq `seq` of the chain."""
        update = (
            restore_replays.update()
            .where(restore_replays.c.replay_ref == replay_ref)
            .values(status=ReplayStatus.RECORDED.value, record_seq=seq, updated_at=now())
        )
        with store_errors(self._store, "close the restore replay"), self._engine.begin() as conn:
            conn.execute(update)

    def open_for(self, dataset: DatasetRef) -> ReplayEntry | None:
        """The newest replay of `dataset` that has no record yet (None: none is open)."""
        c = restore_replays.c
        query = (
            sa.select(restore_replays)
            .where(
                c.dataset_namespace == dataset.namespace,
                c.dataset_name == dataset.name,
                c.status.in_([s.value for s in OPEN]),
            )
            .order_by(c.started_at.desc(), c.replay_ref.desc())
            .limit(1)
        )
        with store_errors(self._store, "read the restore replays"), self._engine.connect() as conn:
            row = conn.execute(query).one_or_none()
        return None if row is None else _entry(row)

    def get(self, replay_ref: str) -> ReplayEntry | None:
        query = sa.select(restore_replays).where(restore_replays.c.replay_ref == replay_ref)
        with store_errors(self._store, "read the restore replays"), self._engine.connect() as conn:
            row = conn.execute(query).one_or_none()
        return None if row is None else _entry(row)


def _entry(row: sa.Row[Any]) -> ReplayEntry:
    values = dict(row._mapping)
    return ReplayEntry(
        replay_ref=values["replay_ref"],
        dataset=DatasetRef(values["dataset_namespace"], values["dataset_name"]),
        status=ReplayStatus(values["status"]),
        evidence=json.loads(values["evidence_json"]),
        started_at=values["started_at"],
        updated_at=values["updated_at"],
        record_seq=values["record_seq"],
    )
