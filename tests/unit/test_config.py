"""The Vault and key-store settings: ERASURE_* variables, errors that name them."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.config import Settings
from erasure.errors import ConfigError


def test_defaults() -> None:
    settings = Settings()
    assert settings.vault_addr is None  # the embedded OpenBao
    assert settings.vault_auth_method == "token"
    assert settings.vault_kv_mount == "erasure-kv"
    assert settings.vault_transit_mount == "erasure-transit"
    # Transit by default: its keys never leave Vault, so destroying one proves something.
    assert settings.keystore_kind == "transit"
    assert settings.signer_identity() is None  # the process's own identity signs
    assert settings.vault_snapshot_retention_days == 30
    assert settings.store_url.startswith("sqlite:///")


def test_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASURE_VAULT_ADDR", "https://vault.internal:8200/")
    monkeypatch.setenv("ERASURE_VAULT_TOKEN", "s.secret")
    monkeypatch.setenv("ERASURE_KEYSTORE_KIND", "kv")
    monkeypatch.setenv("ERASURE_VAULT_SNAPSHOT_RETENTION_DAYS", "45")
    monkeypatch.setenv("ERASURE_LAKEHOUSE_HOLD_WAIT_SECONDS", "120")
    settings = Settings()
    assert settings.vault_addr == "https://vault.internal:8200"
    assert settings.vault_token is not None
    assert settings.vault_token.get_secret_value() == "s.secret"
    assert "s.secret" not in repr(settings)
    assert settings.keystore_kind == "kv"  # still selectable
    assert settings.vault_snapshot_retention_days == 45
    assert settings.lakehouse_hold_wait_seconds == 120


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ERASURE_VAULT_ADDR", "vault.internal:8200"),
        ("ERASURE_KEYSTORE_KIND", "hsm"),
        ("ERASURE_VAULT_SNAPSHOT_RETENTION_DAYS", "-1"),
        ("ERASURE_VAULT_KV_MOUNT", "bad mount/"),
        ("ERASURE_VAULT_AUTH_METHOD", "ldap"),
        ("ERASURE_LAKEHOUSE_HOLD_WAIT_SECONDS", "0"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        Settings()


def test_approle_needs_both_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASURE_VAULT_AUTH_METHOD", "approle")
    monkeypatch.setenv("ERASURE_VAULT_ROLE_ID", "role")
    with pytest.raises(ConfigError, match="ERASURE_VAULT_SECRET_ID") as caught:
        Settings()
    assert "ERASURE_VAULT_ROLE_ID" not in str(caught.value)


def test_kubernetes_needs_a_role() -> None:
    with pytest.raises(ConfigError, match="ERASURE_VAULT_K8S_ROLE"):
        Settings(vault_auth_method="kubernetes")


def test_a_secret_that_fails_validation_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASURE_VAULT_TIMEOUT_SECONDS", "s.very-secret-looking")
    with pytest.raises(ConfigError) as caught:
        Settings()
    assert "very-secret" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_the_lineage_api_key_is_long_enough_or_unset_and_never_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERASURE_LINEAGE_API_KEY", "   ")
    assert Settings().lineage_api_key is None  # blank: that way in stays closed
    monkeypatch.setenv("ERASURE_LINEAGE_API_KEY", "short-key-1")
    with pytest.raises(ConfigError) as caught:
        Settings()
    assert "ERASURE_LINEAGE_API_KEY: must be at least 16 characters, or unset" in str(caught.value)
    assert "short-key-1" not in str(caught.value)
    monkeypatch.setenv("ERASURE_LINEAGE_API_KEY", "ol-" + "k" * 16)
    key = Settings().lineage_api_key
    assert key is not None and key.get_secret_value() == "ol-" + "k" * 16


def test_the_signer_logs_in_with_its_own_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASURE_VAULT_TOKEN", "worker-token")
    monkeypatch.setenv("ERASURE_VAULT_SIGNER_TOKEN", "signer-token")
    settings = Settings()
    signer = settings.signer_identity()
    assert signer is not None and signer.vault_token is not None
    assert signer.vault_token.get_secret_value() == "signer-token"
    assert settings.vault_token is not None
    assert settings.vault_token.get_secret_value() == "worker-token"  # unchanged
    assert "signer-token" not in repr(settings)


def test_the_signer_token_is_read_from_its_file_at_login(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sink = tmp_path / "signer-token"
    sink.write_text("renewed-token\n")
    monkeypatch.setenv("ERASURE_VAULT_SIGNER_TOKEN_PATH", str(sink))
    signer = Settings().signer_identity()
    assert signer is not None and signer.vault_auth_method == "token"
    assert signer.vault_token is not None
    assert signer.vault_token.get_secret_value() == "renewed-token"
    sink.unlink()
    with pytest.raises(ConfigError, match="ERASURE_VAULT_SIGNER_TOKEN_PATH"):
        Settings().signer_identity()


def test_the_signer_role_under_kubernetes_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERASURE_VAULT_AUTH_METHOD", "kubernetes")
    monkeypatch.setenv("ERASURE_VAULT_K8S_ROLE", "erasure-worker")
    monkeypatch.setenv("ERASURE_VAULT_SIGNER_ROLE", "erasure-signer")
    signer = Settings().signer_identity()
    assert signer is not None
    assert (signer.vault_auth_method, signer.vault_k8s_role) == ("kubernetes", "erasure-signer")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ERASURE_VAULT_SIGNER_ROLE": "erasure-signer"}, "ERASURE_VAULT_SIGNER_ROLE"),
        (
            {"ERASURE_VAULT_SIGNER_TOKEN": "a", "ERASURE_VAULT_SIGNER_TOKEN_PATH": "/t"},
            "ERASURE_VAULT_SIGNER_TOKEN_PATH",
        ),
        ({"ERASURE_VAULT_SIGNER_ROLE_ID": "r"}, "ERASURE_VAULT_SIGNER_SECRET_ID"),
    ],
)
def test_a_half_configured_signer_is_refused_naming_what_to_fix(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=named) as refused:
        Settings()
    assert "erasure-signer" not in str(refused.value)  # the value is never echoed
