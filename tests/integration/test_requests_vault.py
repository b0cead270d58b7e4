"""The request registry against a real OpenBao (and, once, a real PostgreSQL store):
park, unpark and destroy the raw identifier; nothing of it survives in Vault names or the store.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
import sqlalchemy as sa

from erasure.catalog import Catalog
from erasure.errors import DecryptionError, RequestError
from erasure.keys.keystore import (
    KvKeyStore,
    KvKeyStoreConfig,
    SubjectKeyStore,
    TransitKeyStore,
    TransitKeyStoreConfig,
)
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, ensure_kv_v2
from erasure.locate import locate, parked_location, relocate
from erasure.model import Action, DatasetRef
from erasure.registry.requests import RequestStatus
from erasure.registry.secrets import request_key_hash
from erasure.rulings import Ruling, RulingBook, RulingOption
from erasure.store import Store, open_store
from erasure.submission import ErasureRequest
from tests.unit.estate import make_estate
from tests.unit.registry_support import Books, books_for, register


def W(name: str) -> DatasetRef:
    """A dataset of the test estate (namespace w) by name."""
    return DatasetRef("w", name)


pytestmark = [pytest.mark.integration, pytest.mark.vault]

CANARY = "  Vera.Canary+Parked@Example.COM "
CANARY_NORMALISED = "vera.canary+parked@example.com"
REF = "DSR-2026-0042"

CATALOG = """
version: 1
sla_days: 30
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: w, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: email, customer_id: id},
     references: [{column: address_id, dataset: crm.addresses, key: id}]}
  - {namespace: w, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
  - {namespace: w, name: crm.addresses, connection: warehouse, kind: table}
"""

ROWS = [
    "CREATE TABLE crm.addresses (id INTEGER PRIMARY KEY, street TEXT)",
    "INSERT INTO crm.addresses VALUES (1, 'own'), (2, 'shared')",
    "CREATE TABLE crm.customers (id TEXT PRIMARY KEY, email TEXT, address_id INTEGER)",
    "INSERT INTO crm.customers VALUES ('C-900', 'vera.canary+parked@example.com', 1),"
    " ('C-901', 'other@example.com', 2)",
    "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT)",
    "INSERT INTO crm.orders VALUES (1, 'C-900'), (2, 'C-900'), (3, 'C-901')",
]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def vault(openbao: EmbeddedOpenBao) -> hvac.Client:
    return openbao.client()


@pytest.fixture
def peppers(vault: hvac.Client) -> PepperStore:
    mount = unique("req-pepper")
    ensure_kv_v2(vault, mount)
    store = PepperStore(vault, mount=mount)
    store.initialise()  # as a new deployment does once (Services.open, erasure keys init-pepper)
    return store


@pytest.fixture(params=["kv", "transit"])
def keystore(request: pytest.FixtureRequest, vault: hvac.Client) -> KvKeyStore | TransitKeyStore:
    store: KvKeyStore | TransitKeyStore
    if request.param == "kv":
        store = KvKeyStore(KvKeyStoreConfig(mount=unique("req-kv")), vault)
    else:
        store = TransitKeyStore(TransitKeyStoreConfig(mount=unique("req-transit")), vault)
    store.ensure_mount()
    return store


@pytest.fixture
def kv(vault: hvac.Client) -> KvKeyStore:
    store = KvKeyStore(KvKeyStoreConfig(mount=unique("req-kv")), vault)
    store.ensure_mount()
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as opened:
        yield opened


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog, _ = make_estate(tmp_path, CATALOG, ROWS)
    return catalog


def registry_for(store: Store, keystore: SubjectKeyStore, peppers: PepperStore) -> Books:
    """A registry as a fresh task process builds it: no cache shared with other instances."""
    return books_for(store, keystore, peppers)


def submit(ref: str = REF, identifier: str = CANARY, **fields: object) -> ErasureRequest:
    return ErasureRequest.parse(
        {
            "request_ref": ref,
            "identifier_type": "email",
            "identifier": identifier,
            "received_on": date(2026, 1, 5),
            "legal_ground": "art17_1_a",
            "notes": f"Customer wrote from {CANARY.strip()} twice",
            **fields,
        }
    )


def vault_paths(client: hvac.Client, *mounts: str) -> list[str]:
    """Every path below the given mounts (KV metadata and transit keys), depth first."""

    def tree(path: str) -> list[str]:
        try:
            listed = client.list(path)
        except hvac.exceptions.InvalidPath:
            return []
        found = []
        for key in (listed or {}).get("data", {}).get("keys", []):
            found.append(path + key)
            if key.endswith("/"):
                found.extend(tree(path + key))
        return found

    out = []
    for mount in mounts:
        out += tree(f"{mount}/metadata/") + tree(f"{mount}/keys/")
    return out


def dump_store(store: Store) -> str:
    """Every value in every table of the store, as text."""
    out = []
    with store.engine.connect() as conn:
        for name in sa.inspect(store.engine).get_table_names():
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}"')):
                out += [v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in row]
    return "\n".join(out)


def assert_no_canary(text: str) -> None:
    for needle in (CANARY.strip(), CANARY_NORMALISED, "Customer wrote"):
        assert needle.lower() not in text.lower()


def test_park_unpark_destroy_in_vault(
    vault: hvac.Client,
    keystore: KvKeyStore | TransitKeyStore,
    peppers: PepperStore,
    store: Store,
    catalog: Catalog,
) -> None:
    registry = registry_for(store, keystore, peppers)
    done = register(registry, submit(), catalog=catalog, run_id=f"erasure-{REF}")
    key_hash = request_key_hash(peppers.current(), REF)
    assert done.created and keystore.exists(key_hash)

    parked = registry_for(store, keystore, peppers).secrets.unpark(REF)
    assert parked.identifier.get_secret_value() == CANARY
    assert parked.notes is not None and CANARY.strip() in parked.notes.get_secret_value()

    names = keystore.list_key_names()
    paths = vault_paths(vault, keystore.mount, peppers.location.split("/")[0])
    assert any(key_hash in name for name in names)
    for text in [*names, *paths]:
        assert REF.lower() not in text.lower()
        assert_no_canary(text)

    shred = registry.secrets.destroy(REF)
    assert not shred.already_absent and shred.key_id == keystore.key_id(key_hash)
    assert not keystore.exists(key_hash)
    assert all(key_hash not in name for name in keystore.list_key_names())
    with pytest.raises(RequestError, match="no longer holds the identifier"):
        registry_for(store, keystore, peppers).secrets.unpark(REF)
    assert registry.secrets.destroy(REF).already_absent  # idempotent
    assert_no_canary(dump_store(store))


def test_unpark_fails_to_decrypt_when_the_key_is_gone_from_vault(
    kv: KvKeyStore, peppers: PepperStore, store: Store, catalog: Catalog
) -> None:
    registry = registry_for(store, kv, peppers)
    register(registry, submit(), catalog=catalog, run_id=f"erasure-{REF}")
    kv.shred(request_key_hash(peppers.current(), REF))  # as if destroy crashed mid-way
    with pytest.raises(DecryptionError, match="shredded or never created"):
        registry.secrets.unpark(REF)
    # The retried destroy finishes the job and records it.
    assert registry.secrets.destroy(REF).already_absent
    record = registry.requests.get(REF)
    assert record is not None and record.secrets_destroyed_at is not None


def test_register_is_idempotent_and_survives_a_pepper_rotation(
    kv: KvKeyStore, peppers: PepperStore, store: Store, catalog: Catalog
) -> None:
    first = register(registry_for(store, kv, peppers), submit(), catalog=catalog, run_id="run-a")
    old_key = request_key_hash(peppers.current(), REF)
    peppers.rotate()

    again = register(registry_for(store, kv, peppers), submit(), catalog=catalog, run_id="run-b")
    assert (again.created, again.owner_run_id, again.status) == (
        False,
        "run-a",
        RequestStatus.REGISTERED,
    )
    assert again.subject_hash == first.subject_hash
    assert kv.list_key_names() == [f"subjects/{old_key}"]  # no second key was made
    later = registry_for(store, kv, peppers)
    assert later.secrets.unpark(REF).identifier.get_secret_value() == CANARY
    assert not later.secrets.destroy(REF).already_absent
    assert kv.list_key_names() == []


def test_relocate_from_the_parked_secret_after_the_customer_row_is_deleted(
    kv: KvKeyStore, peppers: PepperStore, store: Store, tmp_path: Path
) -> None:
    (tmp_path / "estate").mkdir()
    catalog, warehouse = make_estate(tmp_path / "estate", CATALOG, ROWS)
    plan_task = registry_for(store, kv, peppers)
    register(plan_task, submit(), catalog=catalog, run_id=f"erasure-{REF}")
    parked = plan_task.secrets.unpark(REF)
    identities, reference_keys = parked_location(locate(catalog, warehouse, submit().subject))
    plan_task.secrets.update(
        REF, parked.model_copy(update={"identities": identities, "reference_keys": reference_keys})
    )
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("DELETE FROM crm.customers WHERE id = 'C-900'"))

    # A retried act task, in a new process: only the parked secret knows the customer id.
    retried = registry_for(store, kv, peppers).secrets.unpark(REF)
    found = relocate(catalog, warehouse, retried.identities, retried.reference_keys)
    assert {ref.name: hit.rows for ref, hit in found.located.items()} == {
        "crm.orders": 2,
        "crm.addresses": 1,
    }
    assert found.located[W("crm.addresses")].shared_referrers == 0


@pytest.mark.postgres
def test_the_registry_on_postgres(
    vault: hvac.Client, kv: KvKeyStore, peppers: PepperStore, postgres_url: str, catalog: Catalog
) -> None:
    schema = unique("requests").replace("-", "_")
    admin = sa.create_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    admin.dispose()
    with open_store(f"{postgres_url}?options=-csearch_path%3D{schema}") as store:
        registry = registry_for(store, kv, peppers)
        assert register(registry, submit(), catalog=catalog, run_id="run-a").created
        assert not register(registry, submit(), catalog=catalog, run_id="run-b").created
        register(
            registry,
            submit("DSR-2026-0043", identifier="someone@example.org"),
            catalog=catalog,
            run_id="run-c",
        )
        registry.requests.extend(REF, 2, "restoring three backups", today=date(2026, 1, 20))
        assert [r.request_ref for r in registry.requests.due_within(date(2026, 2, 1), 5)] == [
            "DSR-2026-0043"
        ]
        assert registry.requests.get(REF).extended_until == date(2026, 4, 4)  # type: ignore[union-attr]

        orders = DatasetRef("w", "crm.orders")
        registry.action_log.record(REF, orders, Action.ERASE_ROWS, "pending")
        registry.action_log.record(REF, orders, Action.ERASE_ROWS, "done", {"rows_deleted": 2})
        assert registry.action_log.list(REF)[0].evidence == {"rows_deleted": 2}
        for status in ("planned", "acting", "awaiting_dpo"):
            registry.requests.set_status(REF, status)

        book = RulingBook(store)
        standing = book.record(
            Ruling(
                dataset=DatasetRef("w", "ml.churn"),
                request_ref=REF,
                option=RulingOption.RETAIN_EXEMPTION,
                exemption="d",
                author_id="dpo-1",
                author_name="Dana",
                justification="statistical model, aggregated weights",
                standing_until=date(2099, 12, 31),
            )
        )
        assert book.standing_for(DatasetRef("w", "ml.churn"), date(2030, 1, 1)) == standing

        registry.secrets.destroy(REF)
        with pytest.raises(RequestError, match="destroyed"):
            registry.secrets.unpark(REF)
        dumped = dump_store(store)
    assert REF in dumped  # the dump does see the store's rows
    assert_no_canary(dumped)
    assert all("canary" not in p.lower() for p in vault_paths(vault, kv.mount))
