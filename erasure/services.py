"""The long-lived collaborators an erasure needs, built once from Settings.

The CLI, the DAG tasks and the plugin each build one `Services` and hand it to the workflow
steps; nothing here decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

import hvac
import sqlalchemy as sa

from erasure.audit.records import RecordLedger
from erasure.audit.signing import TransitSigner
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
        except BaseException:
            store.close()
            raise
        requests_book = RequestBook(store)
        secrets = ParkedSecrets(store, cipher, peppers)
        return cls(
            settings=settings,
            catalog=catalog,
            warehouse=Warehouse(catalog, resolve),
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
            ledger=RecordLedger(store, TransitSigner(vault, settings.vault_transit_mount)),
            submissions=SubmissionBox(
                store, TransitSubmissionKey(vault, settings.vault_transit_mount)
            ),
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
