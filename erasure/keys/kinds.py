"""The key-store family: what every key store's config has, and the registry that picks one.

Here rather than in keystore.py because the settings check `ERASURE_KEYSTORE_KIND` against
it, and keystore.py reads the settings. The built-in kinds (`kv`, `transit`) register from
erasure.keys.keystore; another package adds one under the entry point group
`erasure.keystores` (see docs/architecture.md, "Adding a backend").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from pydantic import Field

from erasure.kinds import KindConfig, KindRegistry

if TYPE_CHECKING:
    import hvac

    from erasure.config import Settings
    from erasure.keys.keystore import SubjectKeyStore


class KeyStoreConfig(KindConfig):
    """Config every key store has: how long Vault snapshots keep a shredded key."""

    snapshot_retention_days: int = Field(default=30, ge=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """This kind's config as the `ERASURE_*` settings give it (override to read more)."""
        return cls.model_validate(
            {"snapshot_retention_days": settings.vault_snapshot_retention_days}
        )


# Factories take the logged-in Vault client (erasure.keys.vault.connect) and the config.
KEYSTORES: KindRegistry[KeyStoreConfig, hvac.Client, SubjectKeyStore] = KindRegistry(
    KeyStoreConfig,
    family="key store",
    group="erasure.keystores",
    builtins=("erasure.keys.keystore",),
)
