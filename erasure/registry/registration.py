"""Registering a request: its row and its parked secret at once, idempotent on the ref.

The request is keyed by `request_ref`; its subject is kept as a keyed hash, its identifier
sealed under a new request-scoped key. A ref seen before returns the registration it has
(and whose run owns it), or RequestError if it names another subject.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from erasure.catalog import Catalog
from erasure.errors import RequestError
from erasure.model import Identity
from erasure.pseudonym import subject_hash
from erasure.registry.requests import (
    RegisteredRequest,
    Registration,
    RequestBook,
    RequestStatus,
    now,
)
from erasure.registry.secrets import REQUEST_KEY_TYPE, ParkedSecret, ParkedSecrets
from erasure.store import Store, store_errors
from erasure.store.dialect import conflict_insert
from erasure.store.schema import requests
from erasure.submission import ErasureRequest

log = logging.getLogger(__name__)


class Registrar:
    """Records new requests: the `requests` row and its sealed secret in one transaction."""

    def __init__(self, store: Store, requests_book: RequestBook, secrets: ParkedSecrets) -> None:
        self._store = store
        self._requests = requests_book
        self._secrets = secrets

    def register(
        self, req: ErasureRequest, identity: Identity, *, catalog: Catalog, run_id: str
    ) -> Registration:
        """Record the request, park its secret, start its clock; idempotent on request_ref."""
        _check_run_id(run_id)
        if REQUEST_KEY_TYPE in catalog.identifiers:
            raise RequestError(
                f"the catalog declares an identifier type named {REQUEST_KEY_TYPE!r}, which is "
                "reserved for request-scoped keys (their names would collide): rename it"
            )
        existing = self._requests.get(req.request_ref)
        if existing is not None:
            return self._already(existing, identity)

        pepper = self._secrets.current_pepper()
        hashed = subject_hash(pepper, identity.type, identity.value)
        key_hash = self._secrets.key_hash(req.request_ref, pepper.version)
        self._secrets.create_key(key_hash)
        parked = ParkedSecret(identifier=req.identifier, notes=req.notes, identities=[identity])
        stamp = now()
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
            "created_at": stamp,
            "updated_at": stamp,
            "submission_destroyed_at": None,
            "secrets_destroyed_at": None,
        }
        insert = (
            conflict_insert(requests, self._store.dialect)
            .values(**row)
            .on_conflict_do_nothing(index_elements=["request_ref"])
            .returning(requests.c.request_ref)  # no row back when another run got there first
        )
        with store_errors(self._store, "register the request"), self._store.engine.begin() as conn:
            created = conn.execute(insert).first() is not None
            if created:
                self._secrets.park(conn, req.request_ref, key_hash, parked)
        if not created:
            # A concurrent registration won: its key is the one in use.
            winner = self._requests.require(req.request_ref)
            if winner.pepper_version != pepper.version:
                self._secrets.shred_key(key_hash)  # ours, under another pepper: nobody uses it
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
        pepper = self._secrets.pepper(existing.pepper_version)
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


def _check_run_id(run_id: str) -> None:
    if not run_id or not run_id.strip() or len(run_id) > 250:
        raise RequestError("run_id must be the owning Airflow run's id (1-250 characters)")
