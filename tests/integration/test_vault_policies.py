"""The Vault policies shipped in helm/vault/policies, applied to a real OpenBao: every call a
component makes is allowed to it, and every other identity is refused (403).

One fresh dev server for the module: root applies the policies and creates one token per
policy; the operator's token bootstraps the mounts, keys and pepper with `erasure keys init`
exactly as the runbook says; then each (identity, call) pair runs through the project's own
code where it has one (key stores, pepper, signer) and hvac where it does not.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
from pydantic import SecretStr

from erasure import cli
from erasure.audit.signing import DEFAULT_KEY_NAME, TransitSigner
from erasure.config import Settings
from erasure.errors import VaultError
from erasure.intake import SUBMISSIONS_KEY
from erasure.keys.keystore import (
    KvKeyStore,
    KvKeyStoreConfig,
    TransitKeyStore,
    TransitKeyStoreConfig,
)
from erasure.keys.pepper import PepperMissing, PepperStore
from erasure.keys.vault import EmbeddedOpenBao, connect, ensure_kv_v2

pytestmark = [pytest.mark.integration, pytest.mark.vault]

POLICIES = Path(__file__).resolve().parents[2] / "helm" / "vault" / "policies"
IDENTITIES = ("erasure-worker", "erasure-crm-ingest", "erasure-api", "erasure-operator")
KV, TRANSIT = "erasure-kv", "erasure-transit"


@dataclass
class Server:
    bao: EmbeddedOpenBao
    root: hvac.Client
    clients: dict[str, hvac.Client]
    init_output: str
    second_init_output: str
    worker_pepper_error: str


def settings_for(bao: EmbeddedOpenBao, token: str) -> Settings:
    return Settings.model_construct(
        vault_addr=bao.address,
        vault_token=SecretStr(token),
        vault_auth_method="token",
        vault_timeout_seconds=10.0,
    )


def erasure_cli(bao: EmbeddedOpenBao, token: str, *argv: str) -> tuple[int, str]:
    """Run the `erasure` command with a Vault token in its environment; (exit code, stdout)."""
    saved = dict(os.environ)
    os.environ.update({"ERASURE_VAULT_ADDR": bao.address, "ERASURE_VAULT_TOKEN": token})
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = cli.main(list(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with EmbeddedOpenBao() as bao:
        root = bao.client()
        tokens: dict[str, str] = {}
        for name in IDENTITIES:
            root.sys.create_or_update_policy(
                name=name, policy=(POLICIES / f"{name}.hcl").read_text()
            )
            created = root.auth.token.create(policies=[name], ttl="1h")
            tokens[name] = created["auth"]["client_token"]
        clients = {name: connect(settings_for(bao, token)) for name, token in tokens.items()}
        # Before the operator's init: the KV mount exists, the pepper does not.
        ensure_kv_v2(root, KV)
        with pytest.raises(PepperMissing):  # reading fails closed, it never creates one
            PepperStore(clients["erasure-worker"], KV).current()
        with pytest.raises(VaultError) as refused:
            PepperStore(clients["erasure-worker"], KV).initialise()
        code, first = erasure_cli(bao, tokens["erasure-operator"], "keys", "init")
        assert code == 0
        code, second = erasure_cli(bao, tokens["erasure-operator"], "keys", "init")
        assert code == 0
        yield Server(bao, root, clients, first, second, str(refused.value))


def new_hash() -> str:
    return secrets.token_hex(32)


# -- the calls ---------------------------------------------------------------------------------
# Each takes (identity's client, root client) and raises if Vault refuses. Objects the call
# needs (a key to read or destroy) are created by root first.

Call = Callable[[hvac.Client, hvac.Client], None]


def kv_create_subject_key(c: hvac.Client, root: hvac.Client) -> None:
    assert KvKeyStore(KvKeyStoreConfig(), c).create(new_hash()).created


def kv_read_subject_key(c: hvac.Client, root: hvac.Client) -> None:
    subject = new_hash()
    KvKeyStore(KvKeyStoreConfig(), root).create(subject)
    assert len(KvKeyStore(KvKeyStoreConfig(), c).get(subject).material) == 32


def kv_destroy_subject_key(c: hvac.Client, root: hvac.Client) -> None:
    subject = new_hash()
    KvKeyStore(KvKeyStoreConfig(), root).create(subject)
    result = KvKeyStore(KvKeyStoreConfig(), c).shred(subject)
    assert not result.already_absent and not KvKeyStore(KvKeyStoreConfig(), root).exists(subject)


def kv_list_subject_keys(c: hvac.Client, root: hvac.Client) -> None:
    KvKeyStore(KvKeyStoreConfig(), c).list_key_names()


def transit_create_subject_key(c: hvac.Client, root: hvac.Client) -> None:
    store = TransitKeyStore(TransitKeyStoreConfig(), c)
    subject = new_hash()
    assert store.create(subject).created
    assert len(store.get(subject).material) == 32  # a data key wrapped under it


def transit_destroy_subject_key(c: hvac.Client, root: hvac.Client) -> None:
    subject = new_hash()
    TransitKeyStore(TransitKeyStoreConfig(), root).create(subject)
    TransitKeyStore(TransitKeyStoreConfig(), c).shred(subject)
    assert not TransitKeyStore(TransitKeyStoreConfig(), root).exists(subject)


def read_pepper(c: hvac.Client, root: hvac.Client) -> None:
    assert PepperStore(c, KV).all_versions()


def rotate_pepper(c: hvac.Client, root: hvac.Client) -> None:
    before = PepperStore(root, KV).current().version
    assert PepperStore(c, KV).rotate().version == before + 1


def destroy_pepper_version(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.destroy_secret_versions(path="pepper", versions=[1], mount_point=KV)


def delete_pepper(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.delete_metadata_and_all_versions(path="pepper", mount_point=KV)


def sign_record(c: hvac.Client, root: hvac.Client) -> None:
    payload = base64.b64encode(b"record hash").decode()
    response = c.secrets.transit.sign_data(
        name=DEFAULT_KEY_NAME, hash_input=payload, mount_point=TRANSIT
    )
    assert response["data"]["signature"].startswith("vault:v")


def read_public_keys(c: hvac.Client, root: hvac.Client) -> None:
    assert TransitSigner(c, TRANSIT).public_keys()


def encrypt_submission(c: hvac.Client, root: hvac.Client) -> None:
    sealed = c.secrets.transit.encrypt_data(
        name=SUBMISSIONS_KEY, plaintext=base64.b64encode(b"submission").decode(),
        mount_point=TRANSIT,
    )  # fmt: skip
    assert sealed["data"]["ciphertext"].startswith("vault:v")


def decrypt_submission(c: hvac.Client, root: hvac.Client) -> None:
    sealed = root.secrets.transit.encrypt_data(
        name=SUBMISSIONS_KEY, plaintext=base64.b64encode(b"submission").decode(),
        mount_point=TRANSIT,
    )["data"]["ciphertext"]  # fmt: skip
    opened = c.secrets.transit.decrypt_data(
        name=SUBMISSIONS_KEY, ciphertext=sealed, mount_point=TRANSIT
    )
    assert base64.b64decode(opened["data"]["plaintext"]) == b"submission"


def list_mounts(c: hvac.Client, root: hvac.Client) -> None:
    assert f"{KV}/" in c.sys.list_mounted_secrets_engines()["data"]


def tune_mount(c: hvac.Client, root: hvac.Client) -> None:
    c.sys.tune_mount_configuration(path=TRANSIT, description="erasure transit")


def rotate_signing_key(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.transit.rotate_key(name=DEFAULT_KEY_NAME, mount_point=TRANSIT)


def create_other_transit_key(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.transit.create_key(name=f"other-{secrets.token_hex(4)}", mount_point=TRANSIT)


WORKER, CRM, API, OPERATOR = IDENTITIES
# call -> the identities allowed to make it; everyone else must be refused.
MATRIX: dict[Call, frozenset[str]] = {
    kv_create_subject_key: frozenset({WORKER}),
    kv_read_subject_key: frozenset({WORKER}),
    kv_destroy_subject_key: frozenset({WORKER}),
    kv_list_subject_keys: frozenset({WORKER, OPERATOR}),  # names only, for keys init
    transit_create_subject_key: frozenset({WORKER}),
    transit_destroy_subject_key: frozenset({WORKER}),
    read_pepper: frozenset({WORKER, CRM, OPERATOR}),
    rotate_pepper: frozenset({OPERATOR}),
    destroy_pepper_version: frozenset(),
    delete_pepper: frozenset(),
    sign_record: frozenset({WORKER}),
    read_public_keys: frozenset({WORKER, API, OPERATOR}),
    encrypt_submission: frozenset({API}),
    decrypt_submission: frozenset({WORKER}),
    list_mounts: frozenset({WORKER, OPERATOR}),
    tune_mount: frozenset({OPERATOR}),
    rotate_signing_key: frozenset({OPERATOR}),
    create_other_transit_key: frozenset(),
}


def was_refused(exc: BaseException) -> bool:
    """True if Vault answered 403 somewhere in the exception's chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, hvac.exceptions.Forbidden):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@pytest.mark.parametrize("identity", IDENTITIES)
@pytest.mark.parametrize("call", list(MATRIX), ids=lambda call: call.__name__)
def test_policy_allows_exactly_what_the_component_needs(
    server: Server, call: Call, identity: str
) -> None:
    client = server.clients[identity]
    if identity in MATRIX[call]:
        call(client, server.root)
        return
    with pytest.raises((hvac.exceptions.VaultError, VaultError)) as raised:
        call(client, server.root)
    assert was_refused(raised.value), f"{identity} {call.__name__}: {raised.value}"


def test_only_the_operator_creates_the_pepper(server: Server) -> None:
    assert "may not create it: an operator creates version 1 with `erasure keys init`" in (
        server.worker_pepper_error
    )
    assert "created pepper erasure-kv/pepper version 1" in server.init_output
    assert "created mount erasure-transit (transit)" in server.init_output
    assert f"created key transit:{TRANSIT}/keys/{SUBMISSIONS_KEY}" in server.init_output
    assert "nothing to create" in server.second_init_output


def test_the_operator_rotates_the_pepper_from_the_cli(server: Server) -> None:
    before = PepperStore(server.root, KV).current().version
    token = server.clients[OPERATOR].token
    code, out = erasure_cli(server.bao, token, "keys", "rotate-pepper", "--json")
    assert code == 0
    assert out.strip() == f'{{"pepper_version": {before + 1}}}'
    assert [p.version for p in PepperStore(server.clients[WORKER], KV).all_versions()][-1] == (
        before + 1
    )


def test_the_airflow_connections_policy_reads_only_erasure_connections(server: Server) -> None:
    root = server.root
    ensure_kv_v2(root, "airflow")
    for conn_id in ("erasure_warehouse", "payroll"):
        root.secrets.kv.v2.create_or_update_secret(
            path=f"connections/{conn_id}",
            secret={"conn_uri": "postgresql://u:p@db:5432/x"},
            mount_point="airflow",
        )
    policy = (POLICIES / "erasure-airflow-connections.hcl").read_text()
    root.sys.create_or_update_policy(name="erasure-airflow-connections", policy=policy)
    token = root.auth.token.create(policies=["erasure-airflow-connections"], ttl="1h")
    client = connect(settings_for(server.bao, token["auth"]["client_token"]))
    kv = client.secrets.kv.v2
    read = kv.read_secret_version(path="connections/erasure_warehouse", mount_point="airflow")
    assert read["data"]["data"]["conn_uri"].startswith("postgresql://")
    with pytest.raises(hvac.exceptions.Forbidden):
        kv.read_secret_version(path="connections/payroll", mount_point="airflow")
    with pytest.raises(VaultError) as raised:
        PepperStore(client, KV).all_versions()
    assert was_refused(raised.value)
