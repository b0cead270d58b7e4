"""The Vault policies shipped in helm/vault/policies, applied to a real OpenBao: every call a
component makes is allowed to it, and every other identity is refused (403).

One fresh dev server for the module: root applies the policies and creates one token per
identity; the operator's token bootstraps the mounts, keys, pepper and the chain-head
anchor's history with `erasure keys init` exactly as the runbook says; then each (identity,
call) pair runs through the project's own code where it has one (key stores, pepper, signer)
and hvac where it does not. No identity, the operator's included, can delete, destroy or
undelete a version of the chain-head anchor, or shorten its history.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
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
from erasure.audit.anchor import ANCHOR_PATH
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
from erasure.services import signer_client
from tests.integration.published import publish

pytestmark = [pytest.mark.integration, pytest.mark.vault]

POLICIES = Path(__file__).resolve().parents[2] / "helm" / "vault" / "policies"
# identity -> the policies its token holds (erasure-worker-kv: only where the key store is kv)
IDENTITIES = {
    "erasure-worker": ("erasure-worker",),
    "erasure-worker+kv": ("erasure-worker", "erasure-worker-kv"),
    "erasure-signer": ("erasure-signer",),
    "erasure-crm-ingest": ("erasure-crm-ingest",),
    "erasure-api": ("erasure-api",),
    "erasure-operator": ("erasure-operator",),
    "erasure-auditor": ("erasure-auditor",),
}
POLICY_FILES = sorted(p.stem for p in POLICIES.glob("*.hcl"))
KV, TRANSIT = "erasure-kv", "erasure-transit"


@dataclass
class Server:
    bao: EmbeddedOpenBao
    root: hvac.Client
    clients: dict[str, hvac.Client]
    tokens: dict[str, str]
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
        for name in POLICY_FILES:
            root.sys.create_or_update_policy(
                name=name, policy=(POLICIES / f"{name}.hcl").read_text()
            )
        tokens: dict[str, str] = {}
        for name, policies in IDENTITIES.items():
            created = root.auth.token.create(policies=list(policies), ttl="1h")
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
        # A head published first (the ledger's signer publishes one per append).
        root.secrets.kv.v2.create_or_update_secret(
            path=PUBLISHED, secret={"seq": "0", "record_hash": "0" * 64}, mount_point=KV
        )
        yield Server(bao, root, clients, tokens, first, second, str(refused.value))


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
    # The ledger's own signer: it checks its key exists first, needing no sys/mounts right.
    signature, version = TransitSigner(c, TRANSIT).sign(b"record hash")
    assert signature.startswith(f"vault:v{version}:")


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


def export_subject_key(c: hvac.Client, root: hvac.Client) -> None:
    subject = new_hash()
    TransitKeyStore(TransitKeyStoreConfig(), root).create(subject)
    c.secrets.transit.export_key(
        name=f"subject-{subject}", key_type="encryption-key", mount_point=TRANSIT
    )


PUBLISHED = f"{ANCHOR_PATH}/{0:012d}"  # the head root publishes first (the server fixture)


def write_anchor(c: hvac.Client, root: hvac.Client) -> None:
    head = {"seq": "1", "record_hash": secrets.token_hex(32)}
    seq = int(secrets.token_hex(4), 16)  # a head not published yet
    c.secrets.kv.v2.create_or_update_secret(
        path=f"{ANCHOR_PATH}/{seq:012d}", secret=head, mount_point=KV, cas=0
    )


def rewrite_anchor(c: hvac.Client, root: hvac.Client) -> None:
    head = {"seq": "0", "record_hash": secrets.token_hex(32)}
    c.secrets.kv.v2.create_or_update_secret(path=PUBLISHED, secret=head, mount_point=KV)


def read_anchor(c: hvac.Client, root: hvac.Client) -> None:
    read = c.secrets.kv.v2.read_secret_version(
        path=PUBLISHED, mount_point=KV, raise_on_deleted_version=True
    )
    assert len(read["data"]["data"]["record_hash"]) == 64


def list_anchors(c: hvac.Client, root: hvac.Client) -> None:
    listed = c.secrets.kv.v2.list_secrets(path=ANCHOR_PATH, mount_point=KV)["data"]["keys"]
    assert f"{0:012d}" in listed


def read_anchor_metadata(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.read_secret_metadata(path=PUBLISHED, mount_point=KV)


def shorten_anchor_history(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.update_metadata(path=PUBLISHED, max_versions=1, mount_point=KV)


def expire_anchor_versions(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.update_metadata(path=PUBLISHED, delete_version_after="1s", mount_point=KV)


def delete_anchor_version(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.delete_secret_versions(path=PUBLISHED, versions=[1], mount_point=KV)


def destroy_anchor_version(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.destroy_secret_versions(path=PUBLISHED, versions=[1], mount_point=KV)


def undelete_anchor_version(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.undelete_secret_versions(path=PUBLISHED, versions=[1], mount_point=KV)


def delete_anchor_metadata(c: hvac.Client, root: hvac.Client) -> None:
    c.secrets.kv.v2.delete_metadata_and_all_versions(path=PUBLISHED, mount_point=KV)


WORKER, WORKER_KV, SIGNER, CRM, API, OPERATOR, AUDITOR = IDENTITIES
WORKERS = frozenset({WORKER, WORKER_KV})
# call -> the identities allowed to make it; everyone else must be refused.
MATRIX: dict[Call, frozenset[str]] = {
    kv_create_subject_key: frozenset({WORKER_KV}),
    kv_read_subject_key: frozenset({WORKER_KV}),
    kv_destroy_subject_key: frozenset({WORKER_KV}),
    kv_list_subject_keys: frozenset({WORKER_KV, OPERATOR}),  # names only, for keys init
    transit_create_subject_key: WORKERS,
    transit_destroy_subject_key: WORKERS,
    export_subject_key: frozenset(),  # transit keys never leave Vault
    read_pepper: WORKERS | {CRM, OPERATOR},
    rotate_pepper: frozenset({OPERATOR}),
    destroy_pepper_version: frozenset(),
    delete_pepper: frozenset(),
    sign_record: frozenset({SIGNER}),  # the workers read subject keys: they sign nothing
    read_public_keys: WORKERS | {API, OPERATOR, SIGNER, AUDITOR},
    encrypt_submission: frozenset({API}),
    decrypt_submission: WORKERS,
    list_mounts: WORKERS | {OPERATOR},
    tune_mount: frozenset({OPERATOR}),
    rotate_signing_key: frozenset({OPERATOR}),
    create_other_transit_key: frozenset(),
    write_anchor: frozenset({SIGNER}),
    rewrite_anchor: frozenset(),  # a published head is written once, by nobody again
    read_anchor: frozenset({SIGNER, AUDITOR, API}),
    list_anchors: frozenset({SIGNER, AUDITOR, API}),
    read_anchor_metadata: frozenset(),
    shorten_anchor_history: frozenset(),
    expire_anchor_versions: frozenset(),
    delete_anchor_version: frozenset(),
    destroy_anchor_version: frozenset(),
    undelete_anchor_version: frozenset(),
    delete_anchor_metadata: frozenset(),
}


def was_refused(exc: BaseException) -> bool:
    """True if Vault answered 403 somewhere in the exception's chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, hvac.exceptions.Forbidden):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@pytest.mark.parametrize("identity", list(IDENTITIES))
@pytest.mark.parametrize("call", list(MATRIX), ids=lambda call: call.__name__)
def test_policy_allows_exactly_what_the_component_needs(
    server: Server, call: Call, identity: str
) -> None:
    client = server.clients[identity]
    if identity in MATRIX[call]:
        call(client, server.root)
        OBSERVED[(call.__name__, identity)] = True
        return
    with pytest.raises((hvac.exceptions.VaultError, VaultError)) as raised:
        call(client, server.root)
    assert was_refused(raised.value), f"{identity} {call.__name__}: {raised.value}"
    OBSERVED[(call.__name__, identity)] = False


# (call, identity) -> whether it ran: filled by the matrix above, published at the end.
OBSERVED: dict[tuple[str, str], bool] = {}


def test_only_the_operator_creates_the_pepper(server: Server) -> None:
    assert "may not create it: an operator creates version 1 with `erasure keys init`" in (
        server.worker_pepper_error
    )
    assert "created pepper erasure-kv/pepper version 1" in server.init_output
    assert "created mount erasure-transit (transit)" in server.init_output
    assert f"created key transit:{TRANSIT}/keys/{SUBMISSIONS_KEY}" in server.init_output
    assert "nothing to create" in server.second_init_output
    assert f"chain heads are published at {KV}/{ANCHOR_PATH}" in server.second_init_output


ANCHOR_ERASERS = (
    rewrite_anchor,
    delete_anchor_version,
    destroy_anchor_version,
    undelete_anchor_version,
    delete_anchor_metadata,
    shorten_anchor_history,
)


@pytest.mark.parametrize("call", ANCHOR_ERASERS, ids=lambda call: call.__name__)
def test_the_anchor_denies_win_over_a_broad_policy(server: Server, call: Call) -> None:
    """An operator who also holds a policy granting everything on the KV mount (a common
    admin grant) still cannot erase or shorten the anchor's history."""
    root = server.root
    root.sys.create_or_update_policy(
        name="kv-admin",
        policy='path "erasure-kv/*" { capabilities = '
        '["create", "read", "update", "delete", "list", "sudo"] }',
    )
    token = root.auth.token.create(policies=["erasure-operator", "kv-admin"], ttl="1h")
    client = connect(settings_for(server.bao, token["auth"]["client_token"]))
    with pytest.raises(hvac.exceptions.Forbidden):
        call(client, root)
    metadata = root.secrets.kv.v2.read_secret_metadata(path=PUBLISHED, mount_point=KV)["data"]
    assert metadata["current_version"] == 1
    assert all(not v["destroyed"] for v in metadata["versions"].values())


def test_the_ledger_signs_with_the_signer_identity_not_the_workers(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    worker = settings_for(server.bao, server.tokens[WORKER])
    separate = worker.model_copy(update={"vault_signer_token": SecretStr(server.tokens[SIGNER])})
    with caplog.at_level(logging.WARNING, logger="erasure.services"):
        signer = TransitSigner(
            signer_client(connect(separate), separate), TRANSIT, DEFAULT_KEY_NAME
        )
    assert not caplog.records
    signature, _version = signer.sign(b"record hash")
    assert signature.startswith("vault:v")
    # Without a signer identity the worker's own token is used, with a warning, and the
    # worker policy refuses: nothing is signed by an identity that reads subject keys.
    with caplog.at_level(logging.WARNING, logger="erasure.services"):
        fallback = TransitSigner(signer_client(connect(worker), worker), TRANSIT, DEFAULT_KEY_NAME)
    assert "no separate signer identity is configured" in caplog.text
    assert "ERASURE_VAULT_SIGNER_TOKEN" in caplog.text
    with pytest.raises(VaultError) as refused:
        fallback.sign(b"record hash")
    assert was_refused(refused.value)


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


@pytest.mark.parametrize("policy", POLICY_FILES)
def test_every_policy_denies_erasing_the_anchor_history(server: Server, policy: str) -> None:
    """Each shipped policy, alone, refuses every way of erasing the anchor's history."""
    token = server.root.auth.token.create(policies=[policy], ttl="1h")["auth"]["client_token"]
    client = connect(settings_for(server.bao, token))
    for path in (f"{kind}/{PUBLISHED}" for kind in ("delete", "destroy", "undelete")):
        assert client.sys.get_capabilities(paths=[f"{KV}/{path}"])["data"][f"{KV}/{path}"] == [
            "deny"
        ], (policy, path)
    metadata = client.sys.get_capabilities(paths=[f"{KV}/metadata/{PUBLISHED}"])
    assert "delete" not in metadata["data"][f"{KV}/metadata/{PUBLISHED}"], policy
    data = client.sys.get_capabilities(paths=[f"{KV}/data/{PUBLISHED}"])
    assert "update" not in data["data"][f"{KV}/data/{PUBLISHED}"], policy  # never rewritten


# ---------------------------------------------------------------------------------------------
# The matrix as run, published beside the fault matrix (last in the module: it reads what the
# matrix test observed)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"


def test_the_published_privilege_matrix_is_the_one_this_run_produced() -> None:
    expected = {(c.__name__, i) for c in MATRIX for i in IDENTITIES}
    missing = expected - set(OBSERVED)
    assert not missing, f"{len(missing)} cells did not run: run this module whole"
    short = {i: i.removeprefix("erasure-") for i in IDENTITIES}
    rows = [
        "| call | " + " | ".join(short[i] for i in IDENTITIES) + " |",
        "|---|" + "---|" * len(IDENTITIES),
    ]
    for call in MATRIX:
        cells = ("yes" if OBSERVED[(call.__name__, i)] else "403" for i in IDENTITIES)
        rows.append(f"| {call.__name__.replace('_', ' ')} | " + " | ".join(cells) + " |")
    allowed = sum(OBSERVED.values())
    text = PRIVILEGES.format(
        cells=len(OBSERVED),
        calls=len(MATRIX),
        identities=len(IDENTITIES),
        allowed=allowed,
        refused=len(OBSERVED) - allowed,
        table="\n".join(rows),
    )
    if publish(DOC, "privileges", text):
        pytest.fail(f"{DOC.relative_to(REPO)} was out of date: rewritten; review and commit it")


PRIVILEGES = """\
## Least privilege: what each identity may do in Vault

<!-- Generated by tests/integration/test_vault_policies.py; do not edit by hand. -->

The shipped policies (`helm/vault/policies`) were applied to a real OpenBao and each of
{calls} calls a component makes was made by each of {identities} identities ({cells} cells):
every cell is what the policy must allow ("yes", it ran) or refuse ("403", Vault refused
it), and any other outcome fails the test. **{allowed} allowed, {refused} refused, 0
unexpected.** No identity, the operators' included, may delete, destroy, undelete or shorten
the history of the published chain head; the workers that read subject keys cannot sign
records; only the API server seals submissions, only the workers open them.

{table}
"""
