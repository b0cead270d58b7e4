"""The erasure request registry: the workflow's persistent, resumable state.

One row per request (`requests`), keyed by `request_ref`, holding the subject as a keyed hash
only. The raw identifier and the DPO's free-text notes are *parked*: sealed under a
request-scoped key in Vault (`request_secrets`), so that a retried step can unpark them,
and destroyed at completion so that the system itself no longer holds them. Plans, the
action log and each status move live here too; a retried task reads what is already done.

What it stores (the request, its records, the status machine, the request key's name) is
defined in `erasure.requests`.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, Protocol

import sqlalchemy as sa
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from sqlalchemy.engine import Connection

from erasure.catalog import Catalog
from erasure.errors import StoreError
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import ShredResult, SubjectKeyStore
from erasure.locate import Identity, normalise_subject
from erasure.model import Action, DatasetRef, Plan
from erasure.pseudonym import Pepper, subject_hash
from erasure.requests import (
    CLOSED_STATUSES,
    NEXT_STATUSES,
    REQUEST_KEY_TYPE,
    ActionRecord,
    ActionStatus,
    ErasureRequest,
    ParkedSecret,
    RegisteredRequest,
    Registration,
    RequestError,
    RequestStatus,
    add_months,
    dataset_label,
    request_key_hash,
)
from erasure.store import Store
from erasure.store.dialect import conflict_insert
from erasure.store.schema import action_log, plans, request_secrets, requests

log = logging.getLogger(__name__)

_ACTION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_MAX_REASON = 2000


class PepperSource(Protocol):
    """Where peppers come from (erasure.keys.pepper.PepperStore fits)."""

    def current(self) -> Pepper: ...

    def all_versions(self) -> builtins.list[Pepper]: ...


def _now() -> datetime:
    return datetime.now(UTC)


def _secret_dataset(request_ref: str) -> str:
    """The AAD label: a parked blob opens only as the secret of its own request."""
    return f"erasure:request-secret:{request_ref}"


class RequestRegistry:
    """Erasure requests in the store, their parked secrets in Vault; every step idempotent."""

    def __init__(
        self,
        store: Store,
        keystore: SubjectKeyStore,
        cipher: EnvelopeCipher,
        pepper_provider: PepperSource,
    ) -> None:
        if cipher.keystore is not keystore:
            raise RequestError(
                "the cipher must use the registry's keystore: build it as EnvelopeCipher(keystore)"
            )
        self._store = store
        self._engine = store.engine
        self._keystore = keystore
        self._cipher = cipher
        self._peppers = pepper_provider
        self._pepper_cache: dict[int, Pepper] = {}

    # -- register ----------------------------------------------------------------------------

    def register(self, req: ErasureRequest, *, catalog: Catalog, run_id: str) -> Registration:
        """Record the request, park its secret, start its clock; idempotent on request_ref."""
        _check_run_id(run_id)
        if REQUEST_KEY_TYPE in catalog.identifiers:
            raise RequestError(
                f"the catalog declares an identifier type named {REQUEST_KEY_TYPE!r}, which is "
                "reserved for request-scoped keys (their names would collide): rename it"
            )
        if req.identifier_type not in catalog.identifiers:
            # Not echoed: a mis-filled form may carry the identifier in the type field.
            raise RequestError(
                "identifier_type is not an identifier type of the catalog; allowed: "
                + ", ".join(sorted(catalog.identifiers))
            )
        identity = normalise_subject(catalog, req.subject)
        existing = self.get(req.request_ref)
        if existing is not None:
            return self._already(existing, identity)

        pepper = self._peppers.current()
        self._pepper_cache[pepper.version] = pepper
        hashed = subject_hash(pepper, identity.type, identity.value)
        key_hash = request_key_hash(pepper, req.request_ref)
        self._keystore.create(key_hash)
        parked = ParkedSecret(identifier=req.identifier, notes=req.notes, identities=[identity])
        blob = self._seal(key_hash, req.request_ref, parked)
        now = _now()
        row = {
            "request_ref": req.request_ref,
            "subject_hash": hashed,
            "identifier_type": req.identifier_type,
            "pepper_version": pepper.version,
            "legal_ground": req.legal_ground.value,
            "received_on": req.received_on,
            "due_on": req.received_on + timedelta(days=catalog.sla_days),
            "extended_until": None,
            "extension_reason": None,
            "status": RequestStatus.REGISTERED.value,
            "run_id": run_id,
            "dry_run": req.dry_run,
            "created_at": now,
            "updated_at": now,
            "scrubbed_at": None,
            "secrets_destroyed_at": None,
        }
        insert = (
            conflict_insert(requests, self._store.dialect)
            .values(**row)
            .on_conflict_do_nothing(index_elements=["request_ref"])
            .returning(requests.c.request_ref)  # no row back when another run got there first
        )
        with self._db("register the request"), self._engine.begin() as conn:
            created = conn.execute(insert).first() is not None
            if created:
                conn.execute(
                    request_secrets.insert().values(request_ref=req.request_ref, blob=blob)
                )
        if not created:
            # A concurrent registration won: its key is the one in use.
            winner = self._require(req.request_ref)
            if winner.pepper_version != pepper.version:
                self._cipher.shred(key_hash)  # ours, under another pepper: nobody uses it
            return self._already(winner, identity)
        log.info(
            "registered erasure request %s (type=%s hash=%s pepper_version=%d run=%s)",
            req.request_ref,
            req.identifier_type,
            hashed,
            pepper.version,
            run_id,
        )
        return Registration(
            request_ref=req.request_ref,
            subject_hash=hashed,
            created=True,
            owner_run_id=run_id,
            status=RequestStatus.REGISTERED,
        )

    def _already(self, existing: RegisteredRequest, identity: Identity) -> Registration:
        """The registration of a ref seen before; RequestError if it names another subject."""
        pepper = self._pepper(existing.pepper_version)
        if (
            existing.identifier_type != identity.type
            or subject_hash(pepper, identity.type, identity.value) != existing.subject_hash
        ):
            raise RequestError(
                f"request_ref {existing.request_ref!r} is already registered for another subject "
                f"(run {existing.run_id}): give this request its own request_ref"
            )
        return Registration(
            request_ref=existing.request_ref,
            subject_hash=existing.subject_hash,
            created=False,
            owner_run_id=existing.run_id,
            status=existing.status,
        )

    # -- the parked secret -------------------------------------------------------------------

    def unpark(self, request_ref: str) -> ParkedSecret:
        """The parked identifier, notes and expansion; RequestError once destroyed."""
        record = self._require(request_ref)
        self._check_not_destroyed(record, "unpark its secret")
        with self._db("read the parked secret"), self._engine.connect() as conn:
            blob = conn.execute(
                sa.select(request_secrets.c.blob).where(
                    request_secrets.c.request_ref == request_ref
                )
            ).scalar_one_or_none()
        if blob is None:
            raise RequestError(
                f"request {request_ref!r} has no parked secret although it was never destroyed: "
                "the store was altered; re-submit the request under a new request_ref"
            )
        key_hash = self._key_hash(record)
        try:
            plaintext = self._cipher.decrypt(key_hash, _secret_dataset(request_ref), bytes(blob))
        finally:
            self._cipher.evict(key_hash)
        return ParkedSecret.from_bytes(plaintext)

    def update_parked(self, request_ref: str, parked: ParkedSecret) -> None:
        """Re-seal the parked secret (e.g. with the identities found at plan time)."""
        record = self._require(request_ref)
        self._check_not_destroyed(record, "update its parked secret")
        blob = self._seal(self._key_hash(record), request_ref, parked)
        with self._db("update the parked secret"), self._engine.begin() as conn:
            updated = conn.execute(
                request_secrets.update()
                .where(request_secrets.c.request_ref == request_ref)
                .values(blob=blob)
            ).rowcount
            if updated != 1:
                raise RequestError(
                    f"request {request_ref!r} has no parked secret to update (destroyed meanwhile?)"
                )
            self._touch(conn, request_ref)

    def destroy_secrets(self, request_ref: str) -> ShredResult:
        """Shred the request key and drop the sealed blob: the raw identifier is gone for good.

        Idempotent: a second call proves the key is still gone and changes nothing else.
        """
        record = self._require(request_ref)
        result = self._cipher.shred(self._key_hash(record))
        with self._db("record the destroyed secret"), self._engine.begin() as conn:
            conn.execute(
                request_secrets.delete().where(request_secrets.c.request_ref == request_ref)
            )
            conn.execute(
                requests.update()
                .where(
                    requests.c.request_ref == request_ref,
                    requests.c.secrets_destroyed_at.is_(None),
                )
                .values(secrets_destroyed_at=result.shredded_at, updated_at=_now())
            )
        log.info(
            "destroyed the parked secret of request %s (key %s, already absent: %s)",
            request_ref,
            result.key_id,
            result.already_absent,
        )
        return result

    # -- plans -------------------------------------------------------------------------------

    def save_plan(self, request_ref: str, plan: Plan, version: int) -> Plan:
        """Store the plan as `version` and return what is stored under it.

        Plans are immutable: if the version exists (a retried plan step), the stored plan is
        returned unchanged and the caller acts on that one.
        """
        record = self._require(request_ref)
        if version < 1:
            raise RequestError("plan versions start at 1 (the plan acted on); 2+ are re-plans")
        if plan.subject.hash is not None and plan.subject.hash != record.subject_hash:
            raise RequestError(
                f"the plan is for another subject than request {request_ref!r}: re-plan it "
                "from the request's own parked identifier"
            )
        with self._db("save the plan"), self._engine.begin() as conn:
            stored = self._plan_row(conn, request_ref, version)
            if stored is not None:
                return stored
            if version > 1 and self._plan_row(conn, request_ref, version - 1) is None:
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
                    created_at=_now(),
                )
                .on_conflict_do_nothing(index_elements=["request_ref", "version"])
            )
            self._touch(conn, request_ref)
            saved = self._plan_row(conn, request_ref, version)
        assert saved is not None
        return saved

    def plan(self, request_ref: str, version: int = 1) -> Plan:
        """The stored plan `version` of the request; RequestError if there is none."""
        with self._db("read the plan"), self._engine.connect() as conn:
            stored = self._plan_row(conn, request_ref, version)
        if stored is None:
            self._require(request_ref)
            raise RequestError(
                f"request {request_ref!r} has no plan version {version}: run the plan step first"
            )
        return stored

    def plan_versions(self, request_ref: str) -> builtins.list[int]:
        """The plan versions stored for the request, ascending."""
        query = (
            sa.select(plans.c.version)
            .where(plans.c.request_ref == request_ref)
            .order_by(plans.c.version)
        )
        with self._db("list the plans"), self._engine.connect() as conn:
            return [int(v) for v in conn.execute(query).scalars()]

    # -- the action log ----------------------------------------------------------------------

    def record_action(
        self,
        request_ref: str,
        dataset: DatasetRef | str,
        action: Action | str,
        status: ActionStatus | str,
        evidence: BaseModel | Mapping[str, Any] | None = None,
        *,
        new_attempt: bool = True,
    ) -> ActionRecord:
        """Record the state of one action; `pending` counts an attempt (unless it only logs
        progress inside one, `new_attempt=False`), None keeps the evidence."""
        label = _check_dataset(dataset)
        name = _check_action(action)
        try:
            state = ActionStatus(status)
        except ValueError:
            raise RequestError(
                "action status must be one of " + ", ".join(s.value for s in ActionStatus)
            ) from None
        evidence_json = None if evidence is None else _evidence_json(evidence)
        now = _now()
        insert = conflict_insert(action_log, self._store.dialect).values(
            request_ref=request_ref,
            dataset=label,
            action=name,
            status=state.value,
            evidence_json=evidence_json or "{}",
            attempts=1,
            updated_at=now,
        )
        changes: dict[str, Any] = {"status": state.value, "updated_at": now}
        if evidence_json is not None:
            changes["evidence_json"] = evidence_json
        if state is ActionStatus.PENDING and new_attempt:
            changes["attempts"] = action_log.c.attempts + 1
        upsert = insert.on_conflict_do_update(
            index_elements=["request_ref", "dataset", "action"], set_=changes
        )
        with self._db("record the action"), self._engine.begin() as conn:
            self._require_in(conn, request_ref)
            conn.execute(upsert)
            self._touch(conn, request_ref)
            row = conn.execute(
                sa.select(action_log).where(*_action_key(request_ref, label, name))
            ).one()
        return _action_record(row)

    def action_status(
        self, request_ref: str, dataset: DatasetRef | str, action: Action | str
    ) -> ActionStatus | None:
        """The action's last recorded status; None if it never started."""
        query = sa.select(action_log.c.status).where(
            *_action_key(request_ref, dataset_label(dataset), str(action))
        )
        with self._db("read the action log"), self._engine.connect() as conn:
            status = conn.execute(query).scalar_one_or_none()
        return None if status is None else ActionStatus(status)

    def actions(self, request_ref: str) -> builtins.list[ActionRecord]:
        """Every logged action of the request, by dataset and action."""
        query = (
            sa.select(action_log)
            .where(action_log.c.request_ref == request_ref)
            .order_by(action_log.c.dataset, action_log.c.action)
        )
        with self._db("read the action log"), self._engine.connect() as conn:
            return [_action_record(row) for row in conn.execute(query)]

    # -- status, deadlines -------------------------------------------------------------------

    def set_status(self, request_ref: str, status: RequestStatus | str) -> RegisteredRequest:
        """Move the request to `status` (the same status again is a no-op)."""
        try:
            target = RequestStatus(status)
        except ValueError:
            raise RequestError(
                "status must be one of " + ", ".join(s.value for s in RequestStatus)
            ) from None
        with self._db("update the status"), self._engine.begin() as conn:
            current = self._require_in(conn, request_ref)
            if current.status is target:
                return current
            allowed = NEXT_STATUSES[current.status]
            if target not in allowed:
                raise RequestError(
                    f"request {request_ref!r} cannot go from {current.status.value} to "
                    f"{target.value}; allowed next: "
                    + (", ".join(sorted(s.value for s in allowed)) or "nothing (it is closed)")
                )
            conn.execute(
                requests.update()
                .where(
                    requests.c.request_ref == request_ref,
                    requests.c.status == current.status.value,
                )
                .values(status=target.value, updated_at=_now())
            )
            updated = self._require_in(conn, request_ref)
        log.info("request %s: %s -> %s", request_ref, current.status.value, target.value)
        return updated

    def mark_scrubbed(self, request_ref: str, at: datetime) -> RegisteredRequest:
        """Record when the identifier was scrubbed from Airflow's metadata (first time kept)."""
        if at.tzinfo is None:
            raise RequestError("give mark_scrubbed an aware UTC timestamp, not a naive one")
        with self._db("mark the request scrubbed"), self._engine.begin() as conn:
            self._require_in(conn, request_ref)
            conn.execute(
                requests.update()
                .where(requests.c.request_ref == request_ref, requests.c.scrubbed_at.is_(None))
                .values(scrubbed_at=at, updated_at=_now())
            )
            return self._require_in(conn, request_ref)

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
        today = today or _now().date()
        with self._db("extend the deadline"), self._engine.begin() as conn:
            record = self._require_in(conn, request_ref)
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
            conn.execute(
                requests.update()
                .where(
                    requests.c.request_ref == request_ref,
                    requests.c.extended_until.is_(None),
                )
                .values(extended_until=until, extension_reason=reason, updated_at=_now())
            )
            updated = self._require_in(conn, request_ref)
        log.info("request %s: deadline extended to %s", request_ref, until.isoformat())
        return updated

    # -- queries -----------------------------------------------------------------------------

    def get(self, request_ref: str) -> RegisteredRequest | None:
        """The request, or None if the ref was never registered."""
        with self._db("read the request"), self._engine.connect() as conn:
            return _find(conn, request_ref)

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

    # -- internals ---------------------------------------------------------------------------

    def _require(self, request_ref: str) -> RegisteredRequest:
        with self._db("read the request"), self._engine.connect() as conn:
            return self._require_in(conn, request_ref)

    @staticmethod
    def _require_in(conn: Connection, request_ref: str) -> RegisteredRequest:
        found = _find(conn, request_ref)
        if found is None:
            raise RequestError(
                f"no erasure request {request_ref!r} is registered: check the ref, or register it"
            )
        return found

    @staticmethod
    def _touch(conn: Connection, request_ref: str) -> None:
        conn.execute(
            requests.update().where(requests.c.request_ref == request_ref).values(updated_at=_now())
        )

    @staticmethod
    def _check_not_destroyed(record: RegisteredRequest, verb: str) -> None:
        if record.secrets_destroyed_at is not None:
            raise RequestError(
                f"request {record.request_ref!r}: cannot {verb}, its secret was destroyed at "
                f"{record.secrets_destroyed_at.isoformat()} and the system no longer holds the "
                "identifier (by design, after completion)"
            )

    def _seal(self, key_hash: str, request_ref: str, parked: ParkedSecret) -> bytes:
        # Request keys are used a handful of times: never left in the cipher's cache, so a
        # key shredded by another process is gone here at once.
        try:
            return self._cipher.encrypt(key_hash, _secret_dataset(request_ref), parked.to_bytes())
        finally:
            self._cipher.evict(key_hash)

    def _key_hash(self, record: RegisteredRequest) -> str:
        return request_key_hash(self._pepper(record.pepper_version), record.request_ref)

    def _pepper(self, version: int) -> Pepper:
        """The pepper `version`, fetched once per registry."""
        if version not in self._pepper_cache:
            current = self._peppers.current()
            self._pepper_cache[current.version] = current
            if version not in self._pepper_cache:
                for pepper in self._peppers.all_versions():
                    self._pepper_cache[pepper.version] = pepper
        try:
            return self._pepper_cache[version]
        except KeyError:
            raise RequestError(
                f"pepper version {version} is not available from Vault: restore it (a pepper "
                "is never deleted; tombstones and request keys depend on it)"
            ) from None

    def _plan_row(self, conn: Connection, request_ref: str, version: int) -> Plan | None:
        text = conn.execute(
            sa.select(plans.c.plan_json).where(
                plans.c.request_ref == request_ref, plans.c.version == version
            )
        ).scalar_one_or_none()
        return None if text is None else Plan.model_validate_json(text)

    @contextmanager
    def _db(self, verb: str) -> Iterator[None]:
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            # Parameters here are refs, hashes and dates; still, name the error, not the SQL.
            orig = getattr(exc, "orig", None) or exc
            reason = str(orig).strip().splitlines()[0][:200] if str(orig).strip() else ""
            raise StoreError(
                f"could not {verb} in the erasure store at {self._store.url} "
                f"({type(orig).__name__}: {reason}); check the store is reachable and migrated "
                "(open_store migrates it)"
            ) from None


def _find(conn: Connection, request_ref: str) -> RegisteredRequest | None:
    row = conn.execute(
        sa.select(requests).where(requests.c.request_ref == request_ref)
    ).one_or_none()
    return None if row is None else _request(row)


def _request(row: sa.Row[Any]) -> RegisteredRequest:
    return RegisteredRequest.model_validate(dict(row._mapping))


def _action_record(row: sa.Row[Any]) -> ActionRecord:
    values = dict(row._mapping)
    values["evidence"] = json.loads(values.pop("evidence_json"))
    return ActionRecord.model_validate(values)


def _action_key(request_ref: str, dataset: str, action: str) -> Sequence[sa.ColumnElement[bool]]:
    return (
        action_log.c.request_ref == request_ref,
        action_log.c.dataset == dataset,
        action_log.c.action == action,
    )


def _check_dataset(dataset: DatasetRef | str) -> str:
    label = dataset_label(dataset)
    if not label or len(label) > 512 or "/" not in label:
        raise RequestError(
            "the action log names a dataset as 'namespace/name' (a DatasetRef or that text)"
        )
    return label


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


def _check_run_id(run_id: str) -> None:
    if not run_id or not run_id.strip() or len(run_id) > 250:
        raise RequestError("run_id must be the owning Airflow run's id (1-250 characters)")
