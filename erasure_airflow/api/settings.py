"""The HTTP API's own settings: the credential machines use instead of an Airflow login.

It is read from the environment of the Airflow API server (pydantic-settings), alongside
`erasure.config.Settings` (store and Vault). Unset means that way in is closed.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from erasure.errors import ConfigError, invalid_fields

MIN_SECRET_LENGTH = 16


class ApiSettings(BaseSettings):
    """ERASURE_LINEAGE_API_KEY."""

    model_config = SettingsConfigDict(env_prefix="ERASURE_", extra="ignore")

    # Bearer key Airflow's OpenLineage HTTP transport sends (`auth: {type: api_key, ...}`).
    lineage_api_key: SecretStr | None = None

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            names = ", ".join(
                f"ERASURE_{str(p.loc[0]).upper()}" for p in invalid_fields(exc) if p.loc
            )
            # from None, and no input in the message: these values are secrets.
            raise ConfigError(
                f"{names}: must be at least {MIN_SECRET_LENGTH} characters, or unset"
            ) from None

    @field_validator("lineage_api_key")
    @classmethod
    def _strong_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        if len(value.get_secret_value()) < MIN_SECRET_LENGTH:
            raise ValueError("too short")
        return value
