"""Settings read from the `ERASURE_*` environment (pydantic-settings), and the key-store family
they select from.

One flat class: every knob is one environment variable, `ERASURE_<FIELD>`, and a bad value
raises ConfigError naming that variable (never echoing the value: some are secrets).

The key-store family (`KEYSTORES`: each kind's typed config, its factory by dotted path) is
declared here because `ERASURE_KEYSTORE_KIND` is checked against it when the settings are
read; the backends themselves live in erasure.keys.keystore and are imported only when a key
store is built. Another package adds a kind under the entry point group `erasure.keystores`
(see docs/architecture.md, "Adding a backend").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from erasure.errors import ConfigError, invalid_fields
from erasure.kinds import KindConfig, KindRegistry

if TYPE_CHECKING:
    import hvac

ENV_PREFIX = "ERASURE_"
MIN_SECRET_LENGTH = 16  # of a key machines present instead of a login

# Vault mount paths: path segments, no leading/trailing slash (hvac adds them).
_MOUNT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$")


def env_name(field: str) -> str:
    """The environment variable that sets `field`."""
    return f"{ENV_PREFIX}{field.upper()}"


_AUTH = env_name("vault_auth_method")


class KeyStoreConfig(KindConfig):
    """Config every key store has: how long Vault snapshots keep a shredded key."""

    snapshot_retention_days: int = Field(default=30, ge=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """This kind's config as the `ERASURE_*` settings give it (override to read more)."""
        return cls.model_validate(
            {"snapshot_retention_days": settings.vault_snapshot_retention_days}
        )


class KvKeyStoreConfig(KeyStoreConfig):
    """Config of the KV v2 backend (erasure.keys.keystore.KvKeyStore)."""

    kind: Literal["kv"] = "kv"
    mount: str = "erasure-kv"

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            mount=settings.vault_kv_mount,
            snapshot_retention_days=settings.vault_snapshot_retention_days,
        )


class TransitKeyStoreConfig(KeyStoreConfig):
    """Config of the transit backend (erasure.keys.keystore.TransitKeyStore)."""

    kind: Literal["transit"] = "transit"
    mount: str = "erasure-transit"

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(
            mount=settings.vault_transit_mount,
            snapshot_retention_days=settings.vault_snapshot_retention_days,
        )


# Factories take the logged-in Vault client (erasure.keys.vault.connect) and the config, and
# return a erasure.keys.keystore.SubjectKeyStore (checked where one is built).
KEYSTORES: KindRegistry[KeyStoreConfig, hvac.Client, Any] = KindRegistry(
    KeyStoreConfig, family="key store", group="erasure.keystores"
)
KEYSTORES.register(KvKeyStoreConfig, "erasure.keys.keystore:KvKeyStore")
KEYSTORES.register(TransitKeyStoreConfig, "erasure.keys.keystore:TransitKeyStore")


class Settings(BaseSettings):
    """Every setting of the erasure service; construct it to read the environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_default=True)

    # Vault / OpenBao. No address means: use the embedded OpenBao (erasure.keys.vault).
    vault_addr: str | None = None
    vault_token: SecretStr | None = None
    vault_auth_method: Literal["token", "approle", "kubernetes"] = "token"
    vault_auth_mount: str | None = None  # default: the method's name ("approle", "kubernetes")
    vault_role_id: str | None = None
    vault_secret_id: SecretStr | None = None
    vault_k8s_role: str | None = None
    vault_k8s_jwt_path: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    vault_ca_cert: Path | None = None  # CA bundle for a TLS Vault; None: system store
    vault_timeout_seconds: float = Field(default=10.0, gt=0)
    vault_kv_mount: str = "erasure-kv"
    vault_transit_mount: str = "erasure-transit"
    # Where the completion records' chain head is published, in the KV mount, after every
    # append (erasure.audit.anchor): one path per erasure store, never shared or reused.
    vault_anchor_path: str = "anchors/chain-head"
    # The identity that signs completion records (the ledger's append path only), kept apart
    # from the workers' so that reading subject keys never implies signing. One of: a token
    # (or a file holding one, e.g. a Vault Agent sink), or, under kubernetes auth, another
    # Vault role (optionally with its own service-account token file), or, under approle,
    # another role id and secret id. Unset: the process's own identity signs (a warning).
    vault_signer_token: SecretStr | None = None
    vault_signer_token_path: Path | None = None
    vault_signer_role: str | None = None
    vault_signer_k8s_jwt_path: Path | None = None
    vault_signer_role_id: str | None = None
    vault_signer_secret_id: SecretStr | None = None
    # A registered key-store kind: `transit` (default: non-exportable keys that never leave
    # Vault, so destroying one makes every data key it wrapped unreadable), `kv` (data keys
    # read in the clear by the worker: a shred proves the key gone from Vault, not that no
    # copy exists), or one a plug-in adds (KEYSTORES above).
    keystore_kind: str = "transit"
    # How long Vault snapshots/backups are kept: a shredded key may live on in one until then.
    vault_snapshot_retention_days: int = Field(default=30, ge=0)

    # The Bearer key OpenLineage producers send to the API server's lineage endpoint
    # (`auth: {type: api_key, ...}` of Airflow's HTTP transport); unset: that way in is closed.
    lineage_api_key: SecretStr | None = None

    # The erasure store (SQLAlchemy URL) and the catalog file.
    store_url: str = "sqlite:///./var/erasure.db"
    catalog_path: Path | None = None
    # How long raw OpenLineage events, runs and superseded edges are kept
    # (`erasure lineage purge`); current edges are kept whatever their age.
    lineage_retention_days: int = Field(default=400, ge=1)
    # The nightly CRM export the crm_ingest DAG loads (CSV or JSON lines).
    crm_export: Path | None = None
    # How tasks reach Airflow itself (to run a rematerialisation DAG): its REST API, or
    # in-process under dag.test() (the embedded demo and the tests).
    airflow_access: Literal["rest", "inprocess"] = "rest"
    airflow_api_url: str = "http://127.0.0.1:8080"
    airflow_api_user: str | None = None
    airflow_api_password: SecretStr | None = None
    # Who may rule on an escalation: an author holding one of these roles (FAB roles in
    # production). Off only where no auth manager can tell (dag.test, the embedded demo).
    dpo_roles: list[str] = Field(default_factory=lambda: ["DPO"])
    require_dpo_role: bool = True
    # An action waiting for an earlier one of its request gives up, naming it, when that one
    # failed and was not retried within the grace, or after the timeout whatever happened.
    # A rebuild's rematerialisation run that ends within this is waited for in the task; a
    # longer one in Airflow's triggerer, holding no worker slot (0: always the triggerer).
    rebuild_wait_in_task_seconds: float = Field(default=10, ge=0, le=300)
    upstream_retry_grace_seconds: int = Field(default=120, ge=0)
    upstream_wait_timeout_seconds: int = Field(default=6 * 3600, gt=0)
    # How long a task waits in its worker slot for another's hold on a lakehouse table
    # (erasing, expiring or searching it); then LakehouseBusy, having changed nothing: the
    # task is rescheduled, holding no slot (plan, erase, rebuild, verify).
    lakehouse_hold_wait_seconds: float = Field(default=30, gt=0, le=3600)
    # The VACUUM after an erasure's delete (erasure.actions.reclaim): how long it waits for
    # the table's lock, and runs; past either it is left to the daily pass.
    vacuum_lock_timeout_seconds: float = Field(default=5, gt=0, le=600)
    vacuum_statement_timeout_seconds: float = Field(default=300, gt=0, le=24 * 3600)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            # from None: the chained ValidationError would print input values, some secret.
            raise ConfigError(_describe(exc)) from None

    @field_validator("vault_addr")
    @classmethod
    def _check_addr(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be a URL starting with http:// or https://")
        return value

    @field_validator("vault_kv_mount", "vault_transit_mount", "vault_auth_mount")
    @classmethod
    def _check_mount(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().strip("/")
        if not _MOUNT_RE.match(value):
            raise ValueError(
                "must be a Vault mount path such as 'erasure-kv' (letters, digits, -_.)"
            )
        return value

    @field_validator("vault_anchor_path")
    @classmethod
    def _check_anchor_path(cls, value: str) -> str:
        value = value.strip().strip("/")
        parts = value.split("/")
        if not value or any(not _MOUNT_RE.match(p) or p in (".", "..") for p in parts):
            raise ValueError(
                "must be a KV path such as 'anchors/chain-head' (segments of letters, digits, "
                "-_.; no '..')"
            )
        return value

    @field_validator("lineage_api_key")
    @classmethod
    def _strong_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        if len(value.get_secret_value()) < MIN_SECRET_LENGTH:
            raise ValueError(f"must be at least {MIN_SECRET_LENGTH} characters, or unset")
        return value

    @field_validator("keystore_kind")
    @classmethod
    def _check_keystore_kind(cls, value: str) -> str:
        KEYSTORES.config_class(value)  # KindError (a ValueError) naming the known kinds
        return value

    @model_validator(mode="after")
    def _check_auth(self) -> Settings:
        if self.vault_auth_method == "approle":
            missing = [
                env_name(f)
                for f in ("vault_role_id", "vault_secret_id")
                if getattr(self, f) is None
            ]
            if missing:
                raise ValueError(f"{_AUTH}=approle needs {' and '.join(missing)}")
        if self.vault_auth_method == "kubernetes" and not self.vault_k8s_role:
            raise ValueError(f"{_AUTH}=kubernetes needs {env_name('vault_k8s_role')}")
        self._check_signer()
        return self

    def _check_signer(self) -> None:
        token_fields = ("vault_signer_token", "vault_signer_token_path")
        tokens = [env_name(f) for f in token_fields if getattr(self, f)]
        if len(tokens) > 1:
            raise ValueError(f"set one of {' and '.join(tokens)}, not both")
        if self.vault_signer_role and self.vault_auth_method != "kubernetes":
            raise ValueError(
                f"{env_name('vault_signer_role')} is a Vault role for kubernetes auth: set "
                f"{_AUTH}=kubernetes, or give the signer a token ({env_name('vault_signer_token')})"
            )
        approle_fields = ("vault_signer_role_id", "vault_signer_secret_id")
        approle = [f for f in approle_fields if getattr(self, f)]
        if approle and (len(approle) < 2 or self.vault_auth_method != "approle"):
            raise ValueError(
                f"the signer's AppRole needs {env_name('vault_signer_role_id')} and "
                f"{env_name('vault_signer_secret_id')}, with {_AUTH}=approle"
            )

    def signer_identity(self) -> Settings | None:
        """These settings with the signer's Vault login in place of the process's own; None
        when no separate signer identity is configured (the process's own identity signs)."""
        if self.vault_signer_token is not None:
            return self.model_copy(
                update={"vault_auth_method": "token", "vault_token": self.vault_signer_token}
            )
        if self.vault_signer_token_path is not None:
            path = self.vault_signer_token_path
            try:
                token = path.read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the signer's Vault token at {path} ({exc.strerror}): fix "
                    f"{env_name('vault_signer_token_path')}"
                ) from None
            if not token:
                raise ConfigError(
                    f"the signer's Vault token file {path} is empty: fix "
                    f"{env_name('vault_signer_token_path')}"
                )
            return self.model_copy(
                update={"vault_auth_method": "token", "vault_token": SecretStr(token)}
            )
        if self.vault_signer_role:
            return self.model_copy(
                update={
                    "vault_k8s_role": self.vault_signer_role,
                    "vault_k8s_jwt_path": self.vault_signer_k8s_jwt_path or self.vault_k8s_jwt_path,
                }
            )
        if self.vault_signer_role_id and self.vault_signer_secret_id is not None:
            return self.model_copy(
                update={
                    "vault_role_id": self.vault_signer_role_id,
                    "vault_secret_id": self.vault_signer_secret_id,
                }
            )
        return None


def _describe(exc: ValidationError) -> str:
    """One line per bad variable, naming it and saying what is expected, without its value."""
    # A cross-field check has no location: its message names the variables itself.
    lines = [
        f"{env_name(str(p.loc[0]))}: {p.message}" if p.loc else p.message
        for p in invalid_fields(exc)
    ]
    return "invalid settings: " + "; ".join(lines)
