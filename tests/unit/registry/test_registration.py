"""The request registry on SQLite, with an in-memory key store standing in for Vault
(tests/integration/test_requests_vault.py runs the same paths against a real OpenBao)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from pydantic import BaseModel, SecretStr

from erasure.catalog import Catalog
from erasure.errors import DecryptionError, KeyNotFoundError, RequestError, SubjectError
from erasure.keys.keystore import DataKey, KeyInfo, ShredProof, ShredResult
from erasure.model import Action, DatasetRef, Identity, Plan, SubjectSummary
from erasure.pseudonym import Pepper, normalise, subject_hash
from erasure.registry.action_log import ActionStatus
from erasure.registry.requests import RequestStatus
from erasure.registry.secrets import ParkedSecret, request_key_hash
from erasure.store import Store, metadata, open_store
from erasure.store.schema import request_secrets, requests
from erasure.submission import ErasureRequest, LegalGround
from tests.unit.registry_support import Books, books_for, register

CANARY = "  Zed.Canary+Registry@Example.COM "
CANARY_NORMALISED = "zed.canary+registry@example.com"
CATALOG: dict[str, Any] = {
    "version": 1,
    "sla_days": 30,
    "identifiers": {"email": {"normalise": "email"}, "customer_id": {"normalise": "strip"}},
    "datasets": [],
}


class MemoryKeyStore:
    """A SubjectKeyStore in a dict: the registry's logic without a Vault server."""

    kind: ClassVar[str] = "memory"

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    @property
    def address(self) -> str:
        return "memory://"

    def ensure_mount(self) -> None:
        return None

    def create(self, subject_hash: str, dataset: str | None = None) -> KeyInfo:
        created = subject_hash not in self.keys
        self.keys.setdefault(subject_hash, secrets.token_bytes(32))
        return KeyInfo(key_id=self.key_id(subject_hash), kind=self.kind, created=created)

    def get(self, subject_hash: str) -> DataKey:
        if subject_hash not in self.keys:
            raise KeyNotFoundError(f"no key {self.key_id(subject_hash)}")
        return DataKey(material=self.keys[subject_hash], wrapped=b"")

    def unwrap(self, subject_hash: str, wrapped: bytes) -> bytes:
        return self.get(subject_hash).material

    def shred(self, subject_hash: str) -> ShredResult:
        absent = self.keys.pop(subject_hash, None) is None
        return ShredResult(
            key_id=self.key_id(subject_hash),
            kind=self.kind,
            shredded_at=datetime.now(UTC),
            already_absent=absent,
            proof=ShredProof(),
            snapshot_expiry_date=date.today(),
        )

    def prove_shredded(self, subject_hash: str, probe: bytes | None = None) -> ShredProof:
        return ShredProof()

    def exists(self, subject_hash: str) -> bool:
        return subject_hash in self.keys

    def key_id(self, subject_hash: str) -> str:
        return f"memory:subjects/{subject_hash}"

    def list_key_names(self) -> list[str]:
        return sorted(f"subjects/{h}" for h in self.keys)


class Peppers:
    """A pepper source that can rotate."""

    def __init__(self) -> None:
        self.versions = [Pepper(version=1, secret=b"\x11" * 32)]

    def current(self) -> Pepper:
        return self.versions[-1]

    def all_versions(self) -> list[Pepper]:
        return list(self.versions)

    def rotate(self) -> Pepper:
        self.versions.append(Pepper(len(self.versions) + 1, secrets.token_bytes(32)))
        return self.versions[-1]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as opened:
        yield opened


@pytest.fixture
def keys() -> MemoryKeyStore:
    return MemoryKeyStore()


@pytest.fixture
def peppers() -> Peppers:
    return Peppers()


@pytest.fixture
def registry(store: Store, keys: MemoryKeyStore, peppers: Peppers) -> Books:
    return books_for(store, keys, peppers)


@pytest.fixture
def catalog() -> Catalog:
    return Catalog.model_validate(CATALOG)


def request(ref: str = "REQ-1", identifier: str = CANARY, **fields: Any) -> ErasureRequest:
    values: dict[str, Any] = {
        "request_ref": ref,
        "identifier_type": "email",
        "identifier": identifier,
        "received_on": date(2026, 1, 10),
        "legal_ground": "art17_1_b",
        **fields,
    }
    return ErasureRequest.parse(values)


def plan_for(subject: str | None, snapshot: str = "snap-1") -> Plan:
    return Plan(
        subject=SubjectSummary(type="email", hash=subject, pepper_version=1),
        roots=[],
        items=[],
        coverage=1.0,
        gaps=[],
        cycles=[],
        lineage_snapshot=snapshot,
        created_at=datetime.now(UTC),
    )


def dump_store(store: Store) -> str:
    """Every value of every table of the store, as one text (blobs decoded byte for byte)."""
    out = []
    with store.engine.connect() as conn:
        for name in sa.inspect(store.engine).get_table_names():
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}"')):
                for value in row:
                    out.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Registration


def test_register_records_the_hash_parks_the_secret_and_starts_the_clock(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore, store: Store
) -> None:
    done = register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")

    pepper = Pepper(version=1, secret=b"\x11" * 32)
    assert done.created and done.status is RequestStatus.REGISTERED
    assert done.owner_run_id == "erasure-REQ-1"
    assert done.subject_hash == subject_hash(pepper, "email", CANARY_NORMALISED)
    record = registry.requests.get("REQ-1")
    assert record is not None
    assert (record.received_on, record.due_on) == (date(2026, 1, 10), date(2026, 2, 9))
    assert record.effective_due_on == date(2026, 2, 9)
    assert record.legal_ground is LegalGround.ART17_1_B and record.pepper_version == 1
    # The request key is named by an HMAC of the ref: neither ref nor identifier in its name.
    assert list(keys.keys) == [request_key_hash(pepper, "REQ-1")]
    assert "REQ-1" not in keys.list_key_names()[0]
    assert CANARY_NORMALISED not in dump_store(store)


def test_register_is_idempotent_on_request_ref(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore, store: Store
) -> None:
    first = register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")
    registry.requests.set_status("REQ-1", RequestStatus.PLANNED)
    again = register(registry, request(), catalog=catalog, run_id="manual__2026-01-11")

    assert not again.created
    assert again.owner_run_id == "erasure-REQ-1"  # "already handled by run erasure-REQ-1"
    assert again.status is RequestStatus.PLANNED
    assert again.subject_hash == first.subject_hash
    assert len(keys.keys) == 1
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(requests)).scalar() == 1


def test_a_ref_reused_for_another_subject_is_refused(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")
    with pytest.raises(RequestError, match="already registered for another subject") as err:
        register(registry,
            request(identifier="other.person@example.org"), catalog=catalog, run_id="r2"
        )
    assert "other.person" not in str(err.value)
    with pytest.raises(RequestError, match="another subject"):
        register(registry,
            request(identifier_type="customer_id", identifier="C1"), catalog=catalog, run_id="r3"
        )


def test_a_concurrent_registration_that_won_is_reported_not_duplicated(
    registry: Books, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry, request(), catalog=catalog, run_id="erasure-REQ-1")
    # The other run inserted between our look-up and our insert: the insert must not win.
    monkeypatch.setattr(registry.requests, "get", lambda ref: None)
    again = register(registry, request(), catalog=catalog, run_id="erasure-REQ-1-retry")
    assert (again.created, again.owner_run_id) == (False, "erasure-REQ-1")


def test_unknown_type_and_malformed_identifier_are_refused_without_echo(
    registry: Books, catalog: Catalog
) -> None:
    # Refused where the identifier is normalised, before anything is registered.
    with pytest.raises(SubjectError, match="allowed: customer_id, email") as err:
        register(registry, request(identifier_type="passport"), catalog=catalog, run_id="r")
    assert "anary" not in str(err.value)
    with pytest.raises(SubjectError) as malformed:
        register(registry, request(identifier="no-at-sign-SECRET"), catalog=catalog, run_id="r")
    assert "SECRET" not in str(malformed.value)
    assert registry.requests.list() == []


def test_a_catalog_identifier_type_named_request_is_refused(registry: Books) -> None:
    clash = Catalog.model_validate(
        {**CATALOG, "identifiers": {**CATALOG["identifiers"], "request": {"normalise": "strip"}}}
    )
    with pytest.raises(RequestError, match="reserved for request-scoped keys"):
        register(registry, request(), catalog=clash, run_id="r")


# ---------------------------------------------------------------------------------------------
# The parked secret


def test_unpark_returns_identifier_notes_and_the_normalised_identity(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(notes="her husband asked too"), catalog=catalog, run_id="r")
    parked = registry.secrets.unpark("REQ-1")
    assert parked.identifier.get_secret_value() == CANARY
    assert parked.notes is not None and parked.notes.get_secret_value() == "her husband asked too"
    assert parked.identities == [Identity("email", CANARY_NORMALISED)]
    assert CANARY_NORMALISED not in repr(parked) and "husband" not in str(parked)


def test_update_parked_keeps_the_expanded_identities_and_reference_keys(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    parked = registry.secrets.unpark("REQ-1")
    expanded = parked.model_copy(
        update={
            "identities": [*parked.identities, Identity("customer_id", "C7")],
            "reference_keys": {"crm.addresses": ["12", "3"]},
        }
    )
    registry.secrets.update("REQ-1", expanded)

    again = registry.secrets.unpark("REQ-1")
    assert set(again.identities) == {
        Identity("email", CANARY_NORMALISED),
        Identity("customer_id", "C7"),
    }
    assert again.reference_keys == {"crm.addresses": ["12", "3"]}
    assert again.identifier.get_secret_value() == CANARY


def test_destroy_secrets_shreds_the_key_and_drops_the_blob_once(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore, store: Store
) -> None:
    register(registry, request(notes=f"also known as {CANARY}"), catalog=catalog, run_id="r")
    first = registry.secrets.destroy("REQ-1")

    assert not first.already_absent and keys.keys == {}
    record = registry.requests.get("REQ-1")
    assert record is not None and record.secrets_destroyed_at == first.shredded_at
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(request_secrets)).scalar() == 0
    with pytest.raises(RequestError, match="no longer holds the identifier"):
        registry.secrets.unpark("REQ-1")
    with pytest.raises(RequestError, match="destroyed"):
        registry.secrets.update("REQ-1", ParkedSecret(identifier=SecretStr("x")))

    second = registry.secrets.destroy("REQ-1")  # idempotent
    assert second.already_absent
    again = registry.requests.get("REQ-1")
    assert again is not None and again.secrets_destroyed_at == first.shredded_at


def test_a_key_lost_behind_the_registry_makes_unpark_fail_to_decrypt(
    registry: Books, catalog: Catalog, keys: MemoryKeyStore
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    keys.keys.clear()  # e.g. a shred that crashed before the store recorded it
    with pytest.raises(DecryptionError, match="cannot be decrypted"):
        registry.secrets.unpark("REQ-1")


def test_the_request_key_survives_a_pepper_rotation(
    registry: Books, catalog: Catalog, peppers: Peppers, keys: MemoryKeyStore
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    peppers.rotate()
    fresh = books_for(registry.store, keys, peppers)

    assert fresh.secrets.unpark("REQ-1").identifier.get_secret_value() == CANARY
    assert not register(fresh, request(), catalog=catalog, run_id="r2").created
    assert not fresh.secrets.destroy("REQ-1").already_absent
    assert keys.keys == {}


def test_canary_is_nowhere_in_the_store_after_register_and_destroy(
    registry: Books, catalog: Catalog, store: Store
) -> None:
    register(registry, request(notes=f"mail {CANARY} back"), catalog=catalog, run_id="r")
    parked = registry.secrets.unpark("REQ-1")
    registry.secrets.update(
        "REQ-1", parked.model_copy(update={"identities": [Identity("customer_id", "C-CANARY")]})
    )
    registry.plans.save("REQ-1", plan_for(registry.requests.get("REQ-1").subject_hash), 1)  # type: ignore[union-attr]
    registry.action_log.record("REQ-1", DatasetRef("w", "crm.customers"), Action.ERASE_ROWS, "done")
    sealed = dump_store(store)
    registry.secrets.destroy("REQ-1")
    dumped = dump_store(store)

    for text in (sealed, dumped):
        for needle in (CANARY, CANARY.strip(), CANARY_NORMALISED, "C-CANARY", "mail "):
            assert needle not in text
            assert needle.lower() not in text.lower()


def test_the_database_refuses_an_identifier_as_ref_or_hash(store: Store) -> None:
    row = {
        "request_ref": "REQ-9",
        "subject_hash": "a" * 64,
        "identifier_type": "email",
        "pepper_version": 1,
        "legal_ground": "art17_1_a",
        "received_on": date(2026, 1, 1),
        "due_on": date(2026, 1, 31),
        "status": "registered",
        "run_id": "r",
        "dry_run": False,
        "created_at": datetime.now(UTC),
        "updated_at": datetime.now(UTC),
    }
    for bad in ({"request_ref": "jane@example.com"}, {"subject_hash": "jane@example.com"}):
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
            conn.execute(requests.insert().values(**{**row, **bad}))


# ---------------------------------------------------------------------------------------------
# Plans and the action log


def test_plans_are_immutable_and_versioned(registry: Books, catalog: Catalog) -> None:
    hashed = register(registry, request(), catalog=catalog, run_id="r").subject_hash
    first = registry.plans.save("REQ-1", plan_for(hashed, "snap-1"), 1)
    retried = registry.plans.save("REQ-1", plan_for(hashed, "snap-other"), 1)

    assert retried == first and registry.plans.get("REQ-1").lineage_snapshot == "snap-1"
    with pytest.raises(RequestError, match="no plan version 2"):
        registry.plans.save("REQ-1", plan_for(hashed), 3)
    registry.plans.save("REQ-1", plan_for(hashed, "snap-2"), 2)
    assert registry.plans.get("REQ-1", 2).lineage_snapshot == "snap-2"
    assert registry.plans.versions("REQ-1") == [1, 2]
    with pytest.raises(RequestError, match="no plan version 5"):
        registry.plans.get("REQ-1", 5)
    with pytest.raises(RequestError, match="another subject"):
        registry.plans.save("REQ-1", plan_for("b" * 64), 3)
    with pytest.raises(RequestError, match="no erasure request 'NOPE'"):
        registry.plans.get("NOPE")


class Evidence(BaseModel):
    rows_deleted: int
    executed_at: datetime


def test_the_action_log_tells_a_retry_what_is_done(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    orders = DatasetRef("warehouse", "crm.orders")
    assert registry.action_log.status("REQ-1", orders, Action.ERASE_ROWS) is None

    registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, ActionStatus.PENDING)
    failed = registry.action_log.record(
        "REQ-1", orders, Action.ERASE_ROWS, "failed", {"error": "lock timeout"}
    )
    assert (failed.status, failed.attempts) == (ActionStatus.FAILED, 1)
    registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "pending")
    when = datetime(2026, 1, 12, 9, 0, tzinfo=UTC)
    done = registry.action_log.record(
        "REQ-1", orders, Action.ERASE_ROWS, "done", Evidence(rows_deleted=3, executed_at=when)
    )

    assert (done.status, done.attempts, done.dataset.qualified) == (
        ActionStatus.DONE,
        2,
        "warehouse/crm.orders",
    )
    assert done.evidence == {"rows_deleted": 3, "executed_at": "2026-01-12T09:00:00Z"}
    assert registry.action_log.status("REQ-1", orders, "erase_rows") is ActionStatus.DONE
    # A later status without evidence keeps what was recorded.
    kept = registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "done")
    assert kept.evidence["rows_deleted"] == 3
    tombstones = DatasetRef("erasure", "suppression_list")
    registry.action_log.record("REQ-1", tombstones, Action.INSERT_TOMBSTONE, "done")
    assert [(a.dataset.qualified, a.action) for a in registry.action_log.list("REQ-1")] == [
        ("erasure/suppression_list", "insert_tombstone"),
        ("warehouse/crm.orders", "erase_rows"),
    ]


def test_the_action_log_refuses_unknown_requests_and_malformed_names(
    registry: Books, catalog: Catalog
) -> None:
    orders = DatasetRef("warehouse", "crm.orders")
    with pytest.raises(RequestError, match="no erasure request"):
        registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "done")
    register(registry, request(), catalog=catalog, run_id="r")
    with pytest.raises(RequestError, match="namespace/name"):
        registry.action_log.record("REQ-1", "crm.orders", Action.ERASE_ROWS, "done")  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="pending, done, failed"):
        registry.action_log.record("REQ-1", orders, Action.ERASE_ROWS, "finished")
    with pytest.raises(RequestError, match="lower-case name"):
        registry.action_log.record("REQ-1", orders, "Erase Rows!", "done")


# ---------------------------------------------------------------------------------------------
# Status, extension, deadlines


def test_status_moves_forward_and_completes_only_after_verifying(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    with pytest.raises(RequestError, match="cannot go from registered to complete"):
        registry.requests.set_status("REQ-1", RequestStatus.COMPLETE)
    for status in ("planned", "acting", "failed", "acting", "verifying"):
        assert registry.requests.set_status("REQ-1", status).status == status
    again = registry.requests.set_status("REQ-1", "verifying")  # the same status: a no-op
    assert again.status is RequestStatus.VERIFYING
    registry.requests.set_status("REQ-1", RequestStatus.COMPLETE_WITH_EXEMPTIONS)
    with pytest.raises(RequestError, match="allowed next: nothing"):
        registry.requests.set_status("REQ-1", RequestStatus.ACTING)
    with pytest.raises(RequestError, match="status must be one of"):
        registry.requests.set_status("REQ-1", "done")


def test_a_failed_request_resumes_but_cannot_jump_to_complete(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    registry.requests.set_status("REQ-1", "failed")
    with pytest.raises(RequestError, match="failed to complete"):
        registry.requests.set_status("REQ-1", "complete")
    assert registry.requests.set_status("REQ-1", "planned").status is RequestStatus.PLANNED


def test_mark_scrubbed_keeps_the_first_time(registry: Books, catalog: Catalog) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    first = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
    registry.requests.mark_scrubbed("REQ-1", first)
    assert registry.requests.mark_scrubbed("REQ-1", first + timedelta(hours=1)).scrubbed_at == first
    with pytest.raises(RequestError, match="naive"):
        registry.requests.mark_scrubbed("REQ-1", datetime(2026, 1, 10))


def test_extension_is_once_at_most_two_months_with_a_reason_within_the_first_month(
    registry: Books, catalog: Catalog
) -> None:
    register(registry, request(), catalog=catalog, run_id="r")  # due 2026-02-09
    today = date(2026, 2, 1)
    with pytest.raises(RequestError, match="1 or 2 months"):
        registry.requests.extend("REQ-1", 3, "complex", today=today)  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="needs a reason"):
        registry.requests.extend("REQ-1", 2, "   ", today=today)
    with pytest.raises(RequestError, match="within the first month"):
        registry.requests.extend("REQ-1", 1, "complex", today=date(2026, 2, 10))

    extended = registry.requests.extend("REQ-1", 2, "14 backups to restore and search", today=today)
    assert extended.extended_until == date(2026, 4, 9)
    assert extended.effective_due_on == date(2026, 4, 9)
    assert extended.extension_reason == "14 backups to restore and search"
    with pytest.raises(RequestError, match="already extended until 2026-04-09"):
        registry.requests.extend("REQ-1", 1, "more", today=today)


def test_a_closed_request_is_not_extended(registry: Books, catalog: Catalog) -> None:
    register(registry, request(), catalog=catalog, run_id="r")
    for status in ("planned", "acting", "verifying", "complete"):
        registry.requests.set_status("REQ-1", status)
    with pytest.raises(RequestError, match="is complete: nothing to extend"):
        registry.requests.extend("REQ-1", 1, "late", today=date(2026, 1, 20))


def test_due_within_lists_open_requests_by_effective_deadline(
    registry: Books, catalog: Catalog
) -> None:
    def submit(ref: str, received: date) -> None:
        register(registry,
            request(ref, identifier=f"{ref.lower()}@example.org", received_on=received),
            catalog=catalog,
            run_id=f"erasure-{ref}",
        )

    today = date(2026, 3, 1)
    submit("OVERDUE", date(2026, 1, 1))  # due 01-31
    submit("SOON", date(2026, 2, 3))  # due 03-05
    submit("LATER", date(2026, 2, 20))  # due 03-22
    submit("EXTENDED", date(2026, 2, 1))  # due 03-03, extended to 04-03
    submit("DONE", date(2026, 1, 2))  # due 02-01, but complete
    registry.requests.extend("EXTENDED", 1, "large estate", today=date(2026, 2, 15))
    for status in ("planned", "acting", "verifying", "complete"):
        registry.requests.set_status("DONE", status)

    assert [r.request_ref for r in registry.requests.due_within(today, 7)] == ["OVERDUE", "SOON"]
    assert [r.request_ref for r in registry.requests.due_within(today, 40)] == [
        "OVERDUE",
        "SOON",
        "LATER",
        "EXTENDED",
    ]
    assert [r.request_ref for r in registry.requests.due_within(today, 0)] == ["OVERDUE"]
    assert [r.request_ref for r in registry.requests.list(RequestStatus.COMPLETE)] == ["DONE"]
    assert [r.request_ref for r in registry.requests.list()] == [
        "OVERDUE",
        "DONE",
        "EXTENDED",
        "SOON",
        "LATER",
    ]
    with pytest.raises(RequestError, match="0 or more"):
        registry.requests.due_within(today, -1)


def test_unknown_refs(registry: Books) -> None:
    assert registry.requests.get("NOPE") is None
    for call in (registry.secrets.unpark, registry.secrets.destroy):
        with pytest.raises(RequestError, match="no erasure request 'NOPE' is registered"):
            call("NOPE")


def test_every_store_table_is_known_to_the_schema(store: Store) -> None:
    names = set(sa.inspect(store.engine).get_table_names()) - {"alembic_version"}
    assert {"requests", "request_secrets", "plans", "action_log", "rulings"} <= names
    assert names <= set(metadata.tables)


def test_email_normalisation_matches_the_pseudonym_module() -> None:
    assert normalise("email", CANARY) == CANARY_NORMALISED
