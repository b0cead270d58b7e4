"""The front door: a submission sealed on arrival, opened once by the register step.

The DPO submits on the erasure desk (the plugin, in Airflow's API server). The desk validates
the request, seals all of it (identifier, notes and the rest) with the Vault transit key
`submissions` (the API server may encrypt with it, never decrypt), keeps the ciphertext in
the erasure store under a random handle, and starts the `gdpr_erasure` run with a conf that
holds only the request reference and that handle: nothing the DPO typed reaches Airflow's
metadata database. The register step, on a worker (which may decrypt), opens the submission,
registers it (the identifier is parked under a request-scoped key, `erasure.registry.secrets`)
and destroys the sealed copy; a submission refused at register is destroyed too. Only a
failure that a retry can mend (Vault or the store away) leaves the sealed copy for the retry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

import hvac
import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from sqlalchemy.engine import Connection

from erasure.errors import RequestError, VaultError
from erasure.keys.vault import address_of, read_transit_key, vault_errors
from erasure.model import REQUEST_REF
from erasure.store.database import Store, store_errors
from erasure.store.schema import sealed_notes, submissions
from erasure.submission import ErasureRequest

DESK = (
    "the erasure desk (Browse > New erasure request in Airflow, or POST /erasure/api/v1/requests)"
)
_HANDLE = re.compile(r"^sub-[0-9a-f]{32}$")
# What a DPO prompt's answer holds in place of the justification she typed (sealed_notes).
NOTE_HANDLE = re.compile(r"^note-[0-9a-f]{32}$")

# The transit key the API server seals submissions with (encrypt only) and workers open;
# `erasure keys init` creates it (erasure.provision).
SUBMISSIONS_KEY = "submissions"
SUBMISSIONS_KEY_TYPE = "aes256-gcm96"


class Ticket(BaseModel):
    """What a `gdpr_erasure` run's conf holds: the reference and the sealed submission's handle."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    request_ref: str
    submission: str

    @field_validator("request_ref")
    @classmethod
    def _ref(cls, value: str) -> str:
        if not REQUEST_REF.match(value):
            raise ValueError("must be a request reference (letters, digits, '.', '_', '-')")
        return value

    @field_validator("submission")
    @classmethod
    def _handle(cls, value: str) -> str:
        if not _HANDLE.match(value):
            raise ValueError("must be the handle the erasure desk gave the run (sub-<32 hex>)")
        return value

    @classmethod
    def parse(cls, conf: Any) -> Ticket:
        """The run's ticket; a run triggered any other way is told to use the desk."""
        try:
            return cls.model_validate(dict(conf) if isinstance(conf, dict) else conf)
        except ValidationError:
            # Not even the keys are named: a conf typed by hand may hold anything.
            raise RequestError(
                "this run was not started by the erasure desk: its conf must be exactly "
                "{request_ref, submission} as the desk sets it, and a raw identifier is never "
                f"accepted in a run's conf; submit the request on {DESK}"
            ) from None

    def conf(self) -> dict[str, str]:
        return {"request_ref": self.request_ref, "submission": self.submission}


class SubmissionKey(Protocol):
    """Seals bytes so that only a worker can open them again (Vault's policies decide who)."""

    def seal(self, plaintext: bytes) -> str: ...

    def open(self, sealed: str) -> bytes: ...


class TransitSubmissionKey:
    """The `submissions` key in Vault transit: the API server seals, workers open."""

    def __init__(self, client: hvac.Client, mount: str) -> None:
        self._client = client
        self._mount = mount

    @property
    def key_id(self) -> str:
        return f"transit:{self._mount}/keys/{SUBMISSIONS_KEY}"

    def seal(self, plaintext: bytes) -> str:
        with vault_errors(address_of(self._client), f"seal a submission with {self.key_id}"):
            response = self._client.secrets.transit.encrypt_data(
                name=SUBMISSIONS_KEY,
                plaintext=base64.b64encode(plaintext).decode("ascii"),
                mount_point=self._mount,
            )
        return str(response["data"]["ciphertext"])

    def open(self, sealed: str) -> bytes:
        with vault_errors(address_of(self._client), f"open a submission with {self.key_id}"):
            response = self._client.secrets.transit.decrypt_data(
                name=SUBMISSIONS_KEY, ciphertext=sealed, mount_point=self._mount
            )
        return base64.b64decode(response["data"]["plaintext"])


def note_binding(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """What a sealed note is bound to: the one prompt (task instance) it answers, hashed."""
    prompt = "\x1f".join((dag_id, run_id, task_id, str(map_index)))
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


class SubmissionBox:
    """Sealed submissions in the erasure store, by handle, and the notes (a DPO's
    justification) sealed the same way for the one prompt they answer."""

    def __init__(self, store: Store, key: SubmissionKey) -> None:
        self._store = store
        self._key = key

    def seal(self, request: ErasureRequest) -> Ticket:
        """Seal `request` whole and keep it; the ticket for the run's conf."""
        handle = f"sub-{secrets.token_hex(16)}"
        sealed = self._key.seal(_plaintext(request))
        with _transaction(self._store, "keep the sealed submission") as c:
            c.execute(
                submissions.insert().values(
                    handle=handle,
                    request_ref=request.request_ref,
                    sealed=sealed,
                    sealed_at=datetime.now(UTC),
                )
            )
        return Ticket(request_ref=request.request_ref, submission=handle)

    def open(self, ticket: Ticket) -> ErasureRequest:
        """The request behind `ticket` (a worker's key can open it); RequestError if gone."""
        query = sa.select(submissions.c.request_ref, submissions.c.sealed).where(
            submissions.c.handle == ticket.submission
        )
        with _transaction(self._store, "read the sealed submission") as c:
            row = c.execute(query).first()
        if row is None or row.request_ref != ticket.request_ref:
            raise RequestError(
                f"request {ticket.request_ref}: its sealed submission {ticket.submission} is not "
                "in the erasure store (it was registered or refused already, or never sealed): "
                f"submit the request again on {DESK}"
            )
        data = json.loads(self._key.open(str(row.sealed)))
        return ErasureRequest.parse(data)

    def destroy(self, ticket: Ticket) -> bool:
        """Delete the ticket's sealed copy (idempotent; only its own request's); True if there
        was one."""
        with _transaction(self._store, "destroy the sealed submission") as c:
            deleted = c.execute(
                submissions.delete().where(
                    submissions.c.handle == ticket.submission,
                    submissions.c.request_ref == ticket.request_ref,
                )
            ).rowcount
        return bool(deleted)

    def seal_text(self, text: str) -> str:
        """Free text sealed for a run's conf (a reason the API server cannot check for the
        subject's identifiers: only a worker opens it, and checks it, before it is kept)."""
        return self._key.seal(text.encode("utf-8"))

    def open_text(self, sealed: str) -> str:
        return self._key.open(sealed).decode("utf-8")

    def seal_note(self, text: str, bound_to: str) -> str:
        """Seal a justification typed into one prompt (`bound_to`, see note_binding) and keep
        it; the handle the prompt's answer holds instead."""
        handle = f"note-{secrets.token_hex(16)}"
        sealed = self._key.seal(text.encode("utf-8"))
        with _transaction(self._store, "keep the sealed justification") as c:
            c.execute(
                sealed_notes.insert().values(
                    handle=handle, bound_to=bound_to, sealed=sealed, sealed_at=datetime.now(UTC)
                )
            )
        return handle

    def open_note(self, handle: str, bound_to: str) -> str:
        """The justification behind `handle`, which must have been sealed for the prompt
        `bound_to`; RequestError if it is not there or answers another prompt."""
        again = "clear this dpo_decides prompt (with the tasks after it) and answer it again"
        query = sa.select(sealed_notes.c.bound_to, sealed_notes.c.sealed).where(
            sealed_notes.c.handle == handle
        )
        with _transaction(self._store, "read the sealed justification") as c:
            row = c.execute(query).first() if NOTE_HANDLE.match(handle) else None
        if row is None:
            raise RequestError(
                "the answer's justification was not sealed by the erasure plugin (it seals what "
                "the DPO types before Airflow stores the answer), or was opened already: check "
                f"that the plugin is loaded on every Airflow API server, then {again}"
            )
        if row.bound_to != bound_to:
            raise RequestError(
                f"the answer's justification was sealed for another prompt: no ruling; {again}"
            )
        return self._key.open(str(row.sealed)).decode("utf-8")

    def destroy_note(self, handle: str, bound_to: str) -> bool:
        """Delete a sealed note of the prompt `bound_to` (idempotent; never another prompt's);
        True if there was one."""
        with _transaction(self._store, "destroy the sealed justification") as c:
            deleted = c.execute(
                sealed_notes.delete().where(
                    sealed_notes.c.handle == handle, sealed_notes.c.bound_to == bound_to
                )
            )
        return bool(deleted.rowcount)

    def destroy_notes_of(self, bound_to: str) -> int:
        """Delete every note of the prompt `bound_to`, once it has ruled: an earlier answer's
        note whose task never resumed (its run failed, the prompt was cleared and answered
        again) serves nothing now. How many."""
        with _transaction(self._store, "destroy the prompt's sealed justifications") as c:
            deleted = c.execute(sealed_notes.delete().where(sealed_notes.c.bound_to == bound_to))
        return int(deleted.rowcount)

    def purge_notes(self, sealed_before: datetime) -> int:
        """Delete the notes sealed before `sealed_before` (a prompt cleared or failed before its
        task opened its note); how many."""
        with _transaction(self._store, "purge old sealed justifications") as c:
            deleted = c.execute(
                sealed_notes.delete().where(sealed_notes.c.sealed_at < sealed_before)
            )
        return int(deleted.rowcount)

    def held(self, request_ref: str) -> int:
        """How many sealed submissions of `request_ref` are still kept."""
        query = (
            sa.select(sa.func.count())
            .select_from(submissions)
            .where(submissions.c.request_ref == request_ref)
        )
        with _transaction(self._store, "count sealed submissions") as c:
            return int(c.execute(query).scalar_one())


def sealed_refs(store: Store) -> frozenset[str]:
    """The references with a sealed submission still kept: submitted, not yet registered or
    refused (the desk's own read: no key needed to count them)."""
    query = sa.select(submissions.c.request_ref).distinct()
    with _transaction(store, "list sealed submissions") as c:
        return frozenset(c.scalars(query))


@contextmanager
def _transaction(store: Store, verb: str) -> Iterator[Connection]:
    with store_errors(store, verb), store.engine.begin() as conn:
        yield conn


def _plaintext(request: ErasureRequest) -> bytes:
    data: dict[str, Any] = request.model_dump(mode="json")
    data["identifier"] = request.identifier.get_secret_value()
    data["notes"] = request.notes.get_secret_value() if request.notes is not None else None
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


def ensure_submissions_key(client: hvac.Client, mount: str) -> bool:
    """Create the submissions key unless present; True if created. Refuses a leaky one."""
    address = address_of(client)
    key_id = f"transit:{mount}/keys/{SUBMISSIONS_KEY}"
    info = read_transit_key(client, mount, SUBMISSIONS_KEY)
    if info is None:
        with vault_errors(address, f"create {key_id}"):
            client.secrets.transit.create_key(
                name=SUBMISSIONS_KEY,
                key_type=SUBMISSIONS_KEY_TYPE,
                exportable=False,
                allow_plaintext_backup=False,
                mount_point=mount,
            )
        return True
    if info.get("exportable") or info.get("allow_plaintext_backup"):
        raise VaultError(
            f"{key_id} at {address} is exportable or allows plaintext backup: a copy of it "
            "could open every sealed submission; create a new non-exportable key"
        )
    return False
