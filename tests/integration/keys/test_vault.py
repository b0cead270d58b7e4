"""The embedded OpenBao, logging in, mounts, and what happens when Vault goes away."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import hvac
import pytest
from pydantic import SecretStr

from erasure.config import Settings
from erasure.errors import ConfigError, VaultError
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import KvKeyStore, KvKeyStoreConfig
from erasure.keys.vault import EmbeddedOpenBao, connect, ensure_kv_v2, ensure_transit

pytestmark = [pytest.mark.integration, pytest.mark.vault]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_embedded_server_starts_and_stops_by_its_pid() -> None:
    with EmbeddedOpenBao() as server:
        pid = server.pid
        assert pid is not None and _alive(pid)
        assert server.address.startswith("http://127.0.0.1:")
        assert server.token.startswith("dev-")
        assert connect(server.settings()).is_authenticated()
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            assert server.token.encode() not in cmdline.read()  # not visible in `ps`
    assert not server.running
    assert not _alive(pid)


def test_connect_with_a_bad_token_names_the_address(openbao: EmbeddedOpenBao) -> None:
    settings = openbao.settings().model_copy(update={"vault_token": SecretStr("wrong")})
    with pytest.raises(VaultError, match=openbao.address):
        connect(settings)


def test_mounts_are_enabled_once(vault: hvac.Client) -> None:
    kv, transit = f"kv-{uuid.uuid4().hex[:8]}", f"tr-{uuid.uuid4().hex[:8]}"
    assert ensure_kv_v2(vault, kv) is True
    assert ensure_kv_v2(vault, kv) is False
    assert ensure_transit(vault, transit) is True
    assert ensure_transit(vault, transit) is False
    with pytest.raises(ConfigError, match="not kv v2"):
        ensure_kv_v2(vault, transit)
    vault.sys.enable_secrets_engine("kv", path=f"{kv}-v1", options={"version": "1"})
    with pytest.raises(ConfigError, match="choose another mount"):
        ensure_kv_v2(vault, f"{kv}-v1")


def test_approle_login_and_a_least_privilege_policy(
    openbao: EmbeddedOpenBao, vault: hvac.Client, new_subject: Callable[[], str]
) -> None:
    auth_mount = f"approle-{uuid.uuid4().hex[:8]}"
    kv_mount = f"kv-{uuid.uuid4().hex[:8]}"
    ensure_kv_v2(vault, kv_mount)
    vault.sys.enable_auth_method("approle", path=auth_mount)
    # What the erasure worker needs on the KV backend, and nothing else.
    vault.sys.create_or_update_policy(
        name="erasure-kv-worker",
        policy=f"""
            path "{kv_mount}/data/subjects/*" {{ capabilities = ["create", "read", "update"] }}
            path "{kv_mount}/metadata/subjects/*" {{ capabilities = ["read", "delete"] }}
            path "{kv_mount}/metadata/subjects" {{ capabilities = ["list"] }}
        """,
    )
    vault.auth.approle.create_or_update_approle(
        "erasure", token_policies=["erasure-kv-worker"], mount_point=auth_mount
    )
    role_id = vault.auth.approle.read_role_id("erasure", mount_point=auth_mount)["data"]["role_id"]
    secret_id = vault.auth.approle.generate_secret_id("erasure", mount_point=auth_mount)["data"][
        "secret_id"
    ]

    settings = Settings(
        vault_addr=openbao.address,
        vault_auth_method="approle",
        vault_auth_mount=auth_mount,
        vault_role_id=role_id,
        vault_secret_id=secret_id,
    )
    client = connect(settings)
    assert client.is_authenticated() and client.token != openbao.token

    store = KvKeyStore(KvKeyStoreConfig(mount=kv_mount), client)
    subject = new_subject()
    store.create(subject)
    record = EnvelopeCipher(store).encrypt(subject, "lake.events", b"row")
    assert store.shred(subject).proof.decrypt == "failed"
    assert record
    with pytest.raises(VaultError, match="refused"):
        store.ensure_mount()  # no sys/mounts rights: a clear refusal, not a stack trace

    bad = settings.model_copy(update={"vault_secret_id": SecretStr("not-the-secret")})
    with pytest.raises(VaultError, match=openbao.address):
        connect(bad)


def test_kubernetes_login_goes_to_vault_and_fails_clearly(
    openbao: EmbeddedOpenBao, vault: hvac.Client, tmp_path: Path
) -> None:
    mount = f"k8s-{uuid.uuid4().hex[:8]}"
    vault.sys.enable_auth_method("kubernetes", path=mount)
    jwt = tmp_path / "token"
    jwt.write_text("not.a.jwt")
    settings = Settings(
        vault_addr=openbao.address,
        vault_auth_method="kubernetes",
        vault_auth_mount=mount,
        vault_k8s_role="erasure",
        vault_k8s_jwt_path=jwt,
    )
    with pytest.raises(VaultError, match=rf"{openbao.address}.*kubernetes auth"):
        connect(settings)


def test_unreachable_vault_names_the_address_and_what_to_check() -> None:
    with EmbeddedOpenBao() as server:
        settings = server.settings()
    with pytest.raises(VaultError) as caught:
        connect(settings)
    message = str(caught.value)
    assert server.address in message and "unreachable" in message
    assert "ERASURE_VAULT_ADDR" in message


def test_vault_stopping_mid_run_fails_clearly_and_a_retry_completes(
    tmp_path: Path, new_subject: Callable[[], str]
) -> None:
    """Persistent server: keys written before the outage survive the restart; the creates
    that failed during it succeed on retry; nothing is left half-written."""
    subjects = [new_subject() for _ in range(300)]
    server = EmbeddedOpenBao(data_dir=tmp_path / "bao").start()
    address = server.address
    try:
        client = server.client()
        store = KvKeyStore(KvKeyStoreConfig(mount="erasure-kv"), client)
        store.ensure_mount()
        store.create(subjects[0])
        cipher = EnvelopeCipher(store, cache_size=0)
        record = cipher.encrypt(subjects[0], "lake.events", b"written before the outage")

        failures: list[str] = []
        errors: list[VaultError] = []
        halfway = threading.Event()

        def create_all() -> None:
            for i, subject in enumerate(subjects):
                if i == 50:
                    halfway.set()
                try:
                    store.create(subject)
                except VaultError as exc:
                    failures.append(subject)
                    errors.append(exc)

        worker = threading.Thread(target=create_all)
        worker.start()
        halfway.wait(timeout=30)
        server.stop()  # the outage, while creates are in flight
        worker.join(timeout=120)

        assert failures, "the outage should have failed some creates"
        assert all(address in str(e) for e in errors)
        assert "unreachable" in str(errors[-1])
        with pytest.raises(VaultError, match=address):
            store.shred(subjects[0])

        server.start()  # same data directory, same port
        assert server.address == address
        for subject in failures:  # the retry
            store.create(subject)
        for subject in subjects:  # every key whole and usable: nothing half-written
            assert len(store.get(subject).material) == 32
        assert cipher.decrypt(subjects[0], "lake.events", record) == b"written before the outage"
        assert not store.create(subjects[0]).created
        assert store.shred(subjects[0]).proof.read == "404"
    finally:
        server.stop()
