"""The long-lived collaborators an erasure needs, built once from Settings.

The CLI and the DAG tasks each build one `Services` and hand it to the workflow steps; the
API server, which reads, seals and verifies for as long as it runs, keeps `LazyServices`.
Nothing here decides anything.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import hvac
import sqlalchemy as sa

from erasure.audit.anchor import VaultAnchorBoard
from erasure.audit.records import RecordLedger
from erasure.audit.signing import DEFAULT_KEY_NAME, RecordSigner, TransitSigner
from erasure.catalog import Catalog, load_catalog
from erasure.config import Settings, env_name
from erasure.errors import ConfigError
from erasure.intake import SubmissionBox, TransitSubmissionKey
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import SubjectKeyStore, keystore_from_settings
from erasure.keys.pepper import PepperStore, would_orphan
from erasure.keys.vault import connect, ensure_transit
from erasure.pseudonym import Pepper
from erasure.registry.action_log import ActionLog
from erasure.registry.interventions import InterventionBook
from erasure.registry.plans import PlanBook
from erasure.registry.registration import Registrar
from erasure.registry.rematerialisations import RunBook
from erasure.registry.requests import RequestBook
from erasure.registry.secrets import ParkedSecrets
from erasure.rulings import RulingBook
from erasure.store.database import Store, open_store
from erasure.store.schema import requests
from erasure.suppression import SuppressionList
from erasure.warehouse import ConnectionResolver, Warehouse

if TYPE_CHECKING:
    from erasure.lineage import LineageStore

log = logging.getLogger(__name__)


def signer_client(vault: hvac.Client, settings: Settings) -> hvac.Client:
    """The Vault client of the signer identity (ERASURE_VAULT_SIGNER_*): what signs the
    records and publishes the chain head. Without one configured, `vault` itself, with a
    warning: the identity that reads subject keys then also holds the signing right."""
    identity = settings.signer_identity()
    if identity is not None:
        return connect(identity)
    log.warning(
        "no separate signer identity is configured (%s, %s or %s): completion records "
        "are signed with this process's own Vault identity, which therefore also holds "
        "the signing right; give the signer its own identity (policy erasure-signer)",
        env_name("vault_signer_token"),
        env_name("vault_signer_token_path"),
        env_name("vault_signer_role"),
    )
    return vault


def record_verifier(vault: hvac.Client, settings: Settings) -> RecordSigner:
    """The records' signing key as a reader sees it: its public keys verify the chain."""
    return TransitSigner(vault, settings.vault_transit_mount, DEFAULT_KEY_NAME)


def anchor_board(vault: hvac.Client, settings: Settings) -> VaultAnchorBoard:
    """Where the chain head is published after each append, outside the store."""
    return VaultAnchorBoard(vault, settings.vault_kv_mount, settings.vault_anchor_path)


def submission_box(store: Store, vault: hvac.Client, settings: Settings) -> SubmissionBox:
    """Where the desk seals submissions and the register step opens them."""
    return SubmissionBox(store, TransitSubmissionKey(vault, settings.vault_transit_mount))


def ensure_pepper(peppers: PepperStore, store: Store, keystore: SubjectKeyStore) -> Pepper:
    """The current pepper; on a deployment that never had one, its version 1.

    Fails closed (PepperMissing) when the pepper is gone while anything hashed under it
    exists: a fresh pepper would orphan every tombstone, request and per-subject key.
    """
    if peppers.exists():
        return peppers.current()
    held = []
    tombstones = SuppressionList(store).count()
    if tombstones:
        held.append(f"{tombstones} tombstone(s)")
    count = sa.select(sa.func.count()).select_from(requests)
    with store.engine.connect() as conn:
        registered = int(conn.execute(count).scalar_one())
    if registered:
        held.append(f"{registered} request(s)")
    keys = len(keystore.list_key_names())
    if keys:
        held.append(f"{keys} per-subject key(s)")
    if held:
        raise would_orphan(peppers.location, held)
    return peppers.initialise()


@dataclass
class Services:
    settings: Settings
    catalog: Catalog
    warehouse: Warehouse
    store: Store
    vault: hvac.Client
    keystore: SubjectKeyStore
    cipher: EnvelopeCipher
    peppers: PepperStore
    requests: RequestBook
    secrets: ParkedSecrets
    plans: PlanBook
    action_log: ActionLog
    registrar: Registrar
    rulings: RulingBook
    suppression: SuppressionList
    ledger: RecordLedger
    submissions: SubmissionBox
    rematerialisations: RunBook
    interventions: InterventionBook

    @classmethod
    def open(
        cls, settings: Settings | None = None, *, resolve: ConnectionResolver | None = None
    ) -> Services:
        """Connect to the store, Vault and the warehouse the settings name.

        `resolve` opens catalog connections given as `airflow_conn_id` (the DAG adapters pass
        the Postgres provider's hook); without it only `url` connections can be used.
        """
        settings = settings or Settings()
        if settings.catalog_path is None:
            raise ConfigError(f"{env_name('catalog_path')} is not set: point it at the catalog")
        if settings.vault_addr is None:
            raise ConfigError(
                f"{env_name('vault_addr')} is not set: point it at Vault/OpenBao "
                "(`erasure demo` starts an embedded one)"
            )
        catalog = load_catalog(settings.catalog_path)
        vault = connect(settings)
        keystore = keystore_from_settings(settings, vault)
        keystore.ensure_mount()
        peppers = PepperStore(vault, settings.vault_kv_mount)
        peppers.ensure_mount()
        ensure_transit(vault, settings.vault_transit_mount)
        cipher = EnvelopeCipher(keystore)
        store = open_store(settings.store_url)
        try:
            ensure_pepper(peppers, store, keystore)
            signer_vault = signer_client(vault, settings)
        except BaseException:
            store.close()
            raise
        requests_book = RequestBook(store)
        secrets = ParkedSecrets(store, cipher, peppers)
        return cls(
            settings=settings,
            catalog=catalog,
            warehouse=Warehouse(
                catalog, resolve, store=store, hold_wait=settings.lakehouse_hold_wait_seconds
            ),
            store=store,
            vault=vault,
            keystore=keystore,
            cipher=cipher,
            peppers=peppers,
            requests=requests_book,
            secrets=secrets,
            plans=PlanBook(store),
            action_log=ActionLog(store),
            registrar=Registrar(store, requests_book, secrets),
            rulings=RulingBook(store),
            suppression=SuppressionList(store),
            ledger=RecordLedger(
                store,
                TransitSigner(signer_vault, settings.vault_transit_mount, DEFAULT_KEY_NAME),
                anchor_board(signer_vault, settings),
            ),
            submissions=submission_box(store, vault, settings),
            rematerialisations=RunBook(store),
            interventions=InterventionBook(store),
        )

    def close(self) -> None:
        self.warehouse.dispose()
        self.store.close()

    def __enter__(self) -> Services:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LazyServices:
    """The collaborators a long-lived reader needs (the API server), each built on first use
    and kept: nothing connects before it is asked for, and a build that failed is not kept,
    so the next call tries again. Errors are the domain's (ConfigError, StoreError,
    VaultError); pass `settings` to pin them, else the environment is read on first use."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._lock = threading.RLock()
        self._settings = settings
        self._store: Store | None = None
        self._vault: hvac.Client | None = None
        self._signer: RecordSigner | None = None
        self._catalog: Catalog | None = None
        self._lineage: LineageStore | None = None

    def settings(self) -> Settings:
        with self._lock:
            if self._settings is None:
                self._settings = Settings()
            return self._settings

    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.settings().store_url)
            return self._store

    def vault(self) -> hvac.Client:
        """A logged-in Vault client, under the policy of this process's token."""
        with self._lock:
            if self._vault is None:
                self._vault = connect(self.settings())
            return self._vault

    def signer(self) -> RecordSigner:
        """The records' signing key: its public keys check the signatures (never signs here)."""
        with self._lock:
            if self._signer is None:
                self._signer = record_verifier(self.vault(), self.settings())
            return self._signer

    def submissions(self) -> SubmissionBox:
        """Where the desk seals submissions (it may encrypt with the key, never decrypt)."""
        return submission_box(self.store(), self.vault(), self.settings())

    def catalog(self) -> Catalog:
        """The catalog at ERASURE_CATALOG_PATH."""
        with self._lock:
            if self._catalog is None:
                path = self.settings().catalog_path
                if path is None:
                    raise ConfigError(f"{env_name('catalog_path')} is not set")
                self._catalog = load_catalog(path)
            return self._catalog

    def ledger(self, *, signed: bool = False) -> RecordLedger:
        """The completion records; `signed` adds the signer and the published heads (verify,
        export)."""
        if not signed:
            return RecordLedger(self.store())
        board = anchor_board(self.vault(), self.settings())
        return RecordLedger(self.store(), self.signer(), board)

    def requests(self) -> RequestBook:
        """The registered requests, read only: no key access behind them."""
        return RequestBook(self.store())

    def plans(self) -> PlanBook:
        return PlanBook(self.store())

    def action_log(self) -> ActionLog:
        return ActionLog(self.store())

    def lineage(self) -> LineageStore:
        """The lineage store, one per process: its dataset ids stay cached between calls, and
        it serialises its own writers (the database serialises processes)."""
        from erasure.lineage import LineageStore

        with self._lock:
            if self._lineage is None:
                self._lineage = LineageStore(self.store())
            return self._lineage

    def forget_vault(self) -> None:
        """Drop the Vault client after a Vault failure: the next call logs in afresh."""
        with self._lock:
            self._vault = None
            self._signer = None

    def close(self) -> None:
        """Dispose of the store's connections."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            self._lineage = None
