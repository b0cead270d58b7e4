"""Registered requests and their status machine, in the `requests` table.

A request is keyed by `request_ref` and names its subject by a keyed hash only. Each status
move is checked against `NEXT_STATUSES`: nothing reaches `complete` but from `verifying`.
The Art. 12(3) deadline (one month, one extension of up to two more) is kept here too.
"""

from __future__ import annotations

import builtins
import calendar
import logging
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.engine import Connection

from erasure.errors import RequestError
from erasure.store import Store, store_errors
from erasure.store.schema import requests
from erasure.submission import LegalGround

log = logging.getLogger(__name__)

_MAX_REASON = 2000


class RequestStatus(StrEnum):
    REGISTERED = "registered"
    PLANNED = "planned"
    ACTING = "acting"
    AWAITING_DPO = "awaiting_dpo"
    VERIFYING = "verifying"
    COMPLETE = "complete"
    COMPLETE_WITH_EXEMPTIONS = "complete_with_exemptions"
    FAILED = "failed"


CLOSED_STATUSES = frozenset({RequestStatus.COMPLETE, RequestStatus.COMPLETE_WITH_EXEMPTIONS})

_S = RequestStatus
# Where each status may go next. Completion only from verifying: nothing is reported complete
# that was not verified. A failed request resumes at any step but completion.
NEXT_STATUSES: dict[RequestStatus, frozenset[RequestStatus]] = {
    _S.REGISTERED: frozenset({_S.PLANNED, _S.FAILED}),
    _S.PLANNED: frozenset({_S.ACTING, _S.AWAITING_DPO, _S.FAILED}),
    _S.ACTING: frozenset({_S.AWAITING_DPO, _S.VERIFYING, _S.FAILED}),
    _S.AWAITING_DPO: frozenset({_S.ACTING, _S.VERIFYING, _S.FAILED}),
    _S.VERIFYING: frozenset(
        {_S.COMPLETE, _S.COMPLETE_WITH_EXEMPTIONS, _S.ACTING, _S.AWAITING_DPO, _S.FAILED}
    ),
    _S.FAILED: frozenset({_S.PLANNED, _S.ACTING, _S.AWAITING_DPO, _S.VERIFYING}),
    _S.COMPLETE: frozenset(),
    _S.COMPLETE_WITH_EXEMPTIONS: frozenset(),
}


class Registration(BaseModel):
    """What `register` did: created the request, or found it already there (and whose it is)."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    subject_hash: str
    created: bool  # False: the ref was registered before; owner_run_id handles it
    owner_run_id: str
    status: RequestStatus


class RegisteredRequest(BaseModel):
    """A request as the registry holds it: keyed hash, dates, status; never the identifier."""

    model_config = ConfigDict(frozen=True)

    request_ref: str
    subject_hash: str
    identifier_type: str
    pepper_version: int
    legal_ground: LegalGround
    received_on: date
    due_on: date
    extended_until: date | None
    extension_reason: str | None
    status: RequestStatus
    run_id: str
    dry_run: bool
    created_at: datetime
    updated_at: datetime
    submission_destroyed_at: datetime | None
    secrets_destroyed_at: datetime | None

    @property
    def effective_due_on(self) -> date:
        """The deadline in force: the extension if granted, else the original due date."""
        return self.extended_until or self.due_on

    @property
    def closed(self) -> bool:
        return self.status in CLOSED_STATUSES

    @property
    def dry_run_done(self) -> bool:
        """A dry run ends with its saved plan (the plan is its answer); no record says so."""
        return self.dry_run and self.status is RequestStatus.PLANNED


def add_months(day: date, months: int) -> date:
    """`day` plus calendar months, clamped to the month's end (31 Jan + 1 = 28/29 Feb)."""
    index = day.month - 1 + months
    year, month = day.year + index // 12, index % 12 + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def now() -> datetime:
    return datetime.now(UTC)


class RequestBook:
    """The registered requests: read them, move their status, extend their deadline."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.engine

    def get(self, request_ref: str) -> RegisteredRequest | None:
        """The request, or None if the ref was never registered."""
        with self._db("read the request"), self._engine.connect() as conn:
            return find(conn, request_ref)

    def require(self, request_ref: str) -> RegisteredRequest:
        """The request; RequestError naming the ref if it was never registered."""
        with self._db("read the request"), self._engine.connect() as conn:
            return require(conn, request_ref)

    def list(self, status: RequestStatus | str | None = None) -> builtins.list[RegisteredRequest]:
        """Every request (or those in `status`), oldest received first."""
        query = sa.select(requests).order_by(requests.c.received_on, requests.c.request_ref)
        if status is not None:
            query = query.where(requests.c.status == RequestStatus(status).value)
        with self._db("list the requests"), self._engine.connect() as conn:
            return [_request(row) for row in conn.execute(query)]

    def due_within(self, today: date, days: int) -> builtins.list[RegisteredRequest]:
        """Open requests whose deadline (extension included) falls within `days` or has passed."""
        if days < 0:
            raise RequestError("days must be 0 or more")
        effective = sa.func.coalesce(requests.c.extended_until, requests.c.due_on)
        query = (
            sa.select(requests)
            .where(
                requests.c.status.not_in([s.value for s in CLOSED_STATUSES]),
                effective <= today + timedelta(days=days),
            )
            .order_by(effective, requests.c.request_ref)
        )
        with self._db("list due requests"), self._engine.connect() as conn:
            return [_request(row) for row in conn.execute(query)]

    def set_status(self, request_ref: str, status: RequestStatus | str) -> RegisteredRequest:
        """Move the request to `status` (the same status again is a no-op)."""
        self.move(request_ref, status)
        return self.require(request_ref)

    def move(self, request_ref: str, status: RequestStatus | str) -> bool:
        """Move the request to `status`; True if this call moved it, False if it was there
        already. Of two calls racing to the same status, one gets True: what is done once
        per move (a record signed) follows it."""
        try:
            target = RequestStatus(status)
        except ValueError:
            raise RequestError(
                "status must be one of " + ", ".join(s.value for s in RequestStatus)
            ) from None
        with self._db("update the status"), self._engine.begin() as conn:
            current = require(conn, request_ref)
            if current.status is target:
                return False
            allowed = NEXT_STATUSES[current.status]
            if target not in allowed:
                raise RequestError(
                    f"request {request_ref!r} cannot go from {current.status.value} to "
                    f"{target.value}; allowed next: "
                    + (", ".join(sorted(s.value for s in allowed)) or "nothing (it is closed)")
                )
            moved = conn.execute(
                requests.update()
                .where(
                    requests.c.request_ref == request_ref,
                    requests.c.status == current.status.value,
                )
                .values(status=target.value, updated_at=now())
            ).rowcount
            if moved != 1:  # another call moved it since it was read
                latest = require(conn, request_ref)
                if latest.status is target:
                    return False
                raise RequestError(
                    f"request {request_ref!r} went from {current.status.value} to "
                    f"{latest.status.value} while this call moved it to {target.value}; "
                    "try again"
                )
        log.info("request %s: %s -> %s", request_ref, current.status.value, target.value)
        return True

    def mark_submission_destroyed(self, request_ref: str, at: datetime) -> RegisteredRequest:
        """Record when the desk's sealed copy of the submission was destroyed (first time kept)."""
        if at.tzinfo is None:
            raise RequestError(
                "give mark_submission_destroyed an aware UTC timestamp, not a naive one"
            )
        column = requests.c.submission_destroyed_at
        with self._db("mark the sealed submission destroyed"), self._engine.begin() as conn:
            require(conn, request_ref)
            conn.execute(
                requests.update()
                .where(requests.c.request_ref == request_ref, column.is_(None))
                .values(submission_destroyed_at=at, updated_at=now())
            )
            return require(conn, request_ref)

    def extend(
        self,
        request_ref: str,
        months: Literal[1, 2],
        reason: str,
        *,
        today: date | None = None,
    ) -> RegisteredRequest:
        """Art. 12(3): extend the deadline by one or two months, once, with a reason, and
        only while the original month runs (the subject must be told within it)."""
        if isinstance(months, bool) or months not in (1, 2):
            raise RequestError(
                "an extension is 1 or 2 months: Art. 12(3) allows at most two further months"
            )
        reason = (reason or "").strip()
        if not reason:
            raise RequestError(
                "an extension needs a reason (Art. 12(3): the subject is told why); give one"
            )
        if len(reason) > _MAX_REASON:
            raise RequestError(f"the extension reason is longer than {_MAX_REASON} characters")
        today = today or now().date()
        with self._db("extend the deadline"), self._engine.begin() as conn:
            record = require(conn, request_ref)
            if record.closed:
                raise RequestError(
                    f"request {request_ref!r} is {record.status.value}: nothing to extend"
                )
            if record.extended_until is not None:
                raise RequestError(
                    f"request {request_ref!r} was already extended until "
                    f"{record.extended_until.isoformat()}: Art. 12(3) allows one extension of at "
                    "most two months in total"
                )
            if today > record.due_on:
                raise RequestError(
                    f"request {request_ref!r} was due on {record.due_on.isoformat()}: an "
                    "extension must be decided and told to the subject within the first month"
                )
            until = add_months(record.due_on, months)
            extended = conn.execute(
                requests.update()
                .where(
                    requests.c.request_ref == request_ref,
                    requests.c.extended_until.is_(None),
                )
                .values(extended_until=until, extension_reason=reason, updated_at=now())
            )
            if extended.rowcount != 1:  # another extension was recorded since it was read
                raise RequestError(
                    f"request {request_ref!r} was extended meanwhile: a deadline is extended "
                    "once, by at most two months in total"
                )
            updated = require(conn, request_ref)
        log.info("request %s: deadline extended to %s", request_ref, until.isoformat())
        return updated

    def _db(self, verb: str) -> Any:
        return store_errors(self._store, verb)


def find(conn: Connection, request_ref: str) -> RegisteredRequest | None:
    row = conn.execute(
        sa.select(requests).where(requests.c.request_ref == request_ref)
    ).one_or_none()
    return None if row is None else _request(row)


def require(conn: Connection, request_ref: str) -> RegisteredRequest:
    found = find(conn, request_ref)
    if found is None:
        raise RequestError(
            f"no erasure request {request_ref!r} is registered: check the ref, or register it"
        )
    return found


def touch(conn: Connection, request_ref: str) -> None:
    """Note on the request that something of it changed (its plans, secret or actions)."""
    conn.execute(
        requests.update().where(requests.c.request_ref == request_ref).values(updated_at=now())
    )


def _request(row: sa.Row[Any]) -> RegisteredRequest:
    return RegisteredRequest.model_validate(dict(row._mapping))
