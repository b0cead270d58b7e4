"""The erasure objects behind the routes, built on first use (erasure.services.LazyServices).

Nothing connects at import: the plugin loads even when the store or Vault is down, and a
route that needs what is down answers 503 with a message naming what to check on the API
server. A failed build is not cached, so the next request tries again.
"""

from __future__ import annotations

import hvac

from erasure.catalog import Catalog
from erasure.config import Settings
from erasure.errors import ConfigError, ErasureError, StoreError, VaultError
from erasure.services import LazyServices
from erasure.store.database import Store


class Unavailable(ErasureError):
    """Something the route needs (settings, store, Vault) is not there; answered with 503."""


class ErasureBackend(LazyServices):
    """Settings, store, ledger, registry and lineage store of one API process, built lazily;
    what cannot be built is `Unavailable`, saying what to fix on the Airflow API server.

    Pass `settings` to pin them (tests); otherwise the environment is read on first use.
    """

    def settings(self) -> Settings:
        try:
            return super().settings()
        except ConfigError as exc:
            raise Unavailable(
                f"{exc}; fix the ERASURE_* environment of the Airflow API server"
            ) from None

    def store(self) -> Store:
        try:
            return super().store()
        except StoreError as exc:
            raise Unavailable(str(exc)) from None

    def vault(self) -> hvac.Client:
        """The API server's Vault client (policy erasure-api: seal, read public keys)."""
        try:
            return super().vault()  # unset settings raise Unavailable, passed on as it is
        except (ConfigError, VaultError) as exc:
            raise Unavailable(
                f"cannot reach Vault: {exc} (ERASURE_VAULT_ADDR, ERASURE_VAULT_TOKEN)"
            ) from None

    def catalog(self) -> Catalog:
        """The catalog the workers use (ERASURE_CATALOG_PATH), for the desk's form."""
        if self.settings().catalog_path is None:
            raise Unavailable("ERASURE_CATALOG_PATH is not set on the Airflow API server")
        return super().catalog()
