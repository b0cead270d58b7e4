"""What each action of a request did: the `action_log` table, one row per (dataset, action).

A retried or cleared task reads here whether its action is done (and returns the evidence
then recorded), waiting, started or failed; `erasure.progress` is the protocol over it.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from erasure.errors import RequestError
from erasure.model import Action, DatasetRef
from erasure.registry.requests import now, require, touch
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import action_log

_ACTION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class ActionStatus(StrEnum):
    WAITING = "waiting"  # for an earlier action of the same request (lineage or key order)
    PENDING = "pending"  # started
    DONE = "done"
    FAILED = "failed"


class ActionRecord(BaseModel):
    """One (dataset, action) of a request in the action log."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    dataset: DatasetRef
    action: str
    status: ActionStatus
    evidence: dict[str, Any]
    attempts: int
    updated_at: datetime


class ActionLog:
    """The `action_log` table."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    def record(
        self,
        request_ref: str,
        dataset: DatasetRef,
        action: Action | str,
        status: ActionStatus | str,
        evidence: BaseModel | Mapping[str, Any] | None = None,
        *,
        new_attempt: bool = True,
    ) -> ActionRecord:
        """Record the state of one action; `pending` counts an attempt (unless it only logs
        progress inside one, `new_attempt=False`), None keeps the evidence."""
        if not isinstance(dataset, DatasetRef):
            raise RequestError(
                "the action log names a dataset by its identity (namespace/name): give a DatasetRef"
            )
        label = dataset.qualified
        name = _check_action(action)
        try:
            state = ActionStatus(status)
        except ValueError:
            raise RequestError(
                "action status must be one of " + ", ".join(s.value for s in ActionStatus)
            ) from None
        evidence_json = None if evidence is None else _evidence_json(evidence)
        stamp = now()
        insert = conflict_insert(action_log, self._store.dialect).values(
            request_ref=request_ref,
            dataset=label,
            dataset_namespace=dataset.namespace,
            dataset_name=dataset.name,
            action=name,
            status=state.value,
            evidence_json=evidence_json or "{}",
            attempts=1,
            updated_at=stamp,
        )
        changes: dict[str, Any] = {"status": state.value, "updated_at": stamp}
        if evidence_json is not None:
            changes["evidence_json"] = evidence_json
        if state is ActionStatus.PENDING and new_attempt:
            changes["attempts"] = action_log.c.attempts + 1
        upsert = insert.on_conflict_do_update(
            index_elements=["request_ref", "dataset", "action"], set_=changes
        )
        with self._db("record the action"), self._engine.begin() as conn:
            require(conn, request_ref)
            conn.execute(upsert)
            touch(conn, request_ref)
            row = conn.execute(
                sa.select(action_log).where(*_action_key(request_ref, label, name))
            ).one()
        return _action_record(row)

    def get(
        self, request_ref: str, dataset: DatasetRef, action: Action | str
    ) -> ActionRecord | None:
        """The action's entry, if it was ever logged."""
        query = sa.select(action_log).where(
            *_action_key(request_ref, dataset.qualified, _check_action(action))
        )
        with self._db("read the action log"), self._engine.connect() as conn:
            row = conn.execute(query).one_or_none()
        return None if row is None else _action_record(row)

    def status(
        self, request_ref: str, dataset: DatasetRef, action: Action | str
    ) -> ActionStatus | None:
        """The action's last recorded status; None if it never started."""
        found = self.get(request_ref, dataset, action)
        return None if found is None else found.status

    def list(self, request_ref: str) -> builtins.list[ActionRecord]:
        """Every logged action of the request, by dataset and action."""
        query = (
            sa.select(action_log)
            .where(action_log.c.request_ref == request_ref)
            .order_by(action_log.c.dataset, action_log.c.action)
        )
        with self._db("read the action log"), self._engine.connect() as conn:
            return [_action_record(row) for row in conn.execute(query)]

    def done_elsewhere(
        self, action: Action | str, mentioning: str, request_ref: str
    ) -> builtins.list[ActionRecord]:
        """Done actions of other requests than `request_ref` whose evidence mentions
        `mentioning` (a key id, a hash: never an identifier), oldest first."""
        query = (
            sa.select(action_log)
            .where(
                action_log.c.action == _check_action(action),
                action_log.c.status == ActionStatus.DONE.value,
                action_log.c.request_ref != request_ref,
                action_log.c.evidence_json.contains(mentioning, autoescape=True),
            )
            .order_by(action_log.c.updated_at)
        )
        with self._db("read the action log"), self._engine.connect() as conn:
            return [_action_record(row) for row in conn.execute(query)]

    def _db(self, verb: str) -> Any:
        return store_errors(self._store, verb)


def _action_record(row: sa.Row[Any]) -> ActionRecord:
    values = dict(row._mapping)
    values["evidence"] = json.loads(values.pop("evidence_json"))
    label = str(values.pop("dataset"))
    namespace, name = values.pop("dataset_namespace"), values.pop("dataset_name")
    if namespace is None or name is None:  # a row written before both were kept
        namespace, _, name = label.rpartition("/")
    return ActionRecord.model_validate({**values, "dataset": DatasetRef(namespace, name)})


def _action_key(request_ref: str, dataset: str, action: str) -> Sequence[sa.ColumnElement[bool]]:
    return (
        action_log.c.request_ref == request_ref,
        action_log.c.dataset == dataset,
        action_log.c.action == action,
    )


def _check_action(action: Action | str) -> str:
    name = str(action.value if isinstance(action, Action) else action)
    if not _ACTION_NAME.match(name):
        raise RequestError(
            "an action is a lower-case name such as "
            + ", ".join(a.value for a in Action)
            + " (letters, digits, '_')"
        )
    return name


def _evidence_json(evidence: BaseModel | Mapping[str, Any]) -> str:
    document = (
        evidence.model_dump(mode="json")
        if isinstance(evidence, BaseModel)
        else to_jsonable_python(dict(evidence))
    )
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
