"""The erasure objects behind the routes, built on first use.

Nothing connects at import: the plugin loads even when the store or Vault is down, and a
route that needs what is down answers 503 with a message naming what to check. A failed
build is not cached, so the next request tries again.
"""

from __future__ import annotations

import threading

import hvac

from erasure.audit.records import RecordLedger
from erasure.audit.signing import DEFAULT_KEY_NAME, RecordSigner, TransitSigner
from erasure.catalog import Catalog, load_catalog
from erasure.config import Settings
from erasure.errors import ConfigError, ErasureError, StoreError, VaultError
from erasure.intake import SubmissionBox, TransitSubmissionKey
from erasure.lineage import LineageStore
from erasure.registry.action_log import ActionLog
from erasure.registry.plans import PlanBook
from erasure.registry.requests import RequestBook
from erasure.store.database import Store, open_store
from erasure_api.settings import ApiSettings


class Unavailable(ErasureError):
    """Something the route needs (settings, store, Vault) is not there; answered with 503."""


class ErasureBackend:
    """Settings, store, ledger, registry and lineage store of one API process, built lazily.

    Pass `settings`/`api_settings` to pin them (tests); otherwise the environment is read on
    first use.
    """

    def __init__(
        self, settings: Settings | None = None, api_settings: ApiSettings | None = None
    ) -> None:
        self._lock = threading.RLock()
        self._settings = settings
        self._api_settings = api_settings
        self._store: Store | None = None
        self._vault: hvac.Client | None = None
        self._signer: RecordSigner | None = None
        self._catalog: Catalog | None = None
        self._lineage: LineageStore | None = None

    def settings(self) -> Settings:
        with self._lock:
            if self._settings is None:
                try:
                    self._settings = Settings()
                except ConfigError as exc:
                    raise Unavailable(
                        f"{exc}; fix the ERASURE_* environment of the Airflow API server"
                    ) from None
            return self._settings

    def api_settings(self) -> ApiSettings:
        with self._lock:
            if self._api_settings is None:
                try:
                    self._api_settings = ApiSettings()
                except ConfigError as exc:
                    raise Unavailable(
                        f"{exc}; fix the environment of the Airflow API server"
                    ) from None
            return self._api_settings

    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                try:
                    self._store = open_store(self.settings().store_url)
                except StoreError as exc:
                    raise Unavailable(str(exc)) from None
            return self._store

    def vault(self) -> hvac.Client:
        """The API server's Vault client (policy erasure-api: seal, read public keys)."""
        with self._lock:
            if self._vault is None:
                from erasure.keys.vault import connect  # hvac and requests: only when needed

                try:
                    self._vault = connect(self.settings())
                except (ConfigError, VaultError) as exc:
                    raise Unavailable(
                        f"cannot reach Vault: {exc} (ERASURE_VAULT_ADDR, ERASURE_VAULT_TOKEN)"
                    ) from None
            return self._vault

    def signer(self) -> RecordSigner:
        """The Vault transit signer: its public keys check the records' signatures."""
        with self._lock:
            if self._signer is None:
                mount = self.settings().vault_transit_mount
                self._signer = TransitSigner(self.vault(), mount, DEFAULT_KEY_NAME)
            return self._signer

    def submissions(self) -> SubmissionBox:
        """Where the desk seals submissions (it may encrypt with the key, never decrypt)."""
        key = TransitSubmissionKey(self.vault(), self.settings().vault_transit_mount)
        return SubmissionBox(self.store(), key)

    def catalog(self) -> Catalog:
        """The catalog the workers use (ERASURE_CATALOG_PATH), for the desk's form."""
        with self._lock:
            if self._catalog is None:
                path = self.settings().catalog_path
                if path is None:
                    raise Unavailable("ERASURE_CATALOG_PATH is not set on the Airflow API server")
                self._catalog = load_catalog(path)
            return self._catalog

    def ledger(self, *, signed: bool = False) -> RecordLedger:
        """The completion records; `signed` adds the signer (verify, export)."""
        return RecordLedger(self.store(), self.signer() if signed else None)

    def requests(self) -> RequestBook:
        """The registered requests, read only: no key access behind them."""
        return RequestBook(self.store())

    def plans(self) -> PlanBook:
        return PlanBook(self.store())

    def action_log(self) -> ActionLog:
        return ActionLog(self.store())

    def lineage(self) -> LineageStore:
        """The lineage store, one per API server process: its dataset ids stay cached between
        requests, and it serialises its own writers (the database serialises processes)."""
        with self._lock:
            if self._lineage is None:
                self._lineage = LineageStore(self.store())
            return self._lineage

    def forget_vault(self) -> None:
        """Drop the Vault client after a Vault failure: the next request logs in afresh."""
        with self._lock:
            self._vault = None
            self._signer = None

    def close(self) -> None:
        """Dispose of the store's connections (at API server shutdown)."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            self._lineage = None
