"""The chain head published in a real OpenBao KV v2 secret: every version kept, compared by
`verify` and `erasure audit verify`, and whatever removes a version or rewinds the head is
found. (Which identities may write or delete there: tests/integration/test_vault_policies.py.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import hvac
import pytest

from erasure.audit.anchor import ANCHOR_PATH, AnchorError, VaultAnchorBoard
from erasure.audit.records import RecordLedger
from erasure.audit.signing import TransitSigner
from erasure.keys.vault import EmbeddedOpenBao
from erasure.store import open_store
from tests.unit.audit.cli import runner
from tests.unit.audit.support import OTHER_SUBJECT, received_body, record_request
from tests.unit.audit.test_anchor import cut_to

pytestmark = [pytest.mark.integration, pytest.mark.vault]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "erasure.db"


@pytest.fixture
def ledger(
    db_path: Path, transit_signer: TransitSigner, anchor_board: VaultAnchorBoard
) -> Iterator[RecordLedger]:
    with open_store(f"sqlite:///{db_path}") as store:
        ledger = RecordLedger(store, transit_signer, anchor_board)
        record_request(ledger, "REQ-2026-0042")
        record_request(ledger, "REQ-2026-0043")
        yield ledger


def key(seq: int) -> str:
    return f"{ANCHOR_PATH}/{seq:012d}"


def test_each_append_publishes_one_secret_written_once(
    ledger: RecordLedger, vault: hvac.Client, kv_mount: str
) -> None:
    listed = vault.secrets.kv.v2.list_secrets(path=ANCHOR_PATH, mount_point=kv_mount)
    assert listed["data"]["keys"] == [f"{seq:012d}" for seq in range(1, 9)]
    meta = vault.secrets.kv.v2.read_secret_metadata(path=key(8), mount_point=kv_mount)
    assert meta["data"]["current_version"] == 1
    report = ledger.verify()
    assert report.ok, report.summary()
    assert report.summary().endswith(
        f"matches the 8 head(s) published at {kv_mount}/{ANCHOR_PATH} (newest seq 8)"
    )


def test_a_cut_and_re_signed_chain_is_caught(
    ledger: RecordLedger,
    db_path: Path,
    transit_signer: TransitSigner,
    anchor_board: VaultAnchorBoard,
) -> None:
    tamper = sqlite3.connect(db_path, isolation_level=None)
    try:
        cut_to(tamper, 4)
    finally:
        tamper.close()
    with open_store(f"sqlite:///{db_path}") as store:
        forger = RecordLedger(store, transit_signer, anchor_board)
        with pytest.raises(AnchorError, match=r"seq 5 was published at .* as another record"):
            forger.append("REQ-2026-000F", OTHER_SUBJECT, "received", received_body())
    report = ledger.verify()
    assert not report.ok
    details = " | ".join(p.detail for p in report.problems)
    assert "the record there now differs" in details and "no longer in the store" in details


@pytest.mark.parametrize("how", ["delete", "destroy", "rewrite", "prune"])
def test_a_removed_or_rewritten_head_is_caught(
    ledger: RecordLedger, vault: hvac.Client, kv_mount: str, how: str
) -> None:
    kv = vault.secrets.kv.v2
    head = ledger.anchor_history().anchors[-1].model_dump(mode="json")  # type: ignore[union-attr]
    if how == "delete":
        kv.delete_secret_versions(path=key(8), versions=[1], mount_point=kv_mount)
        expected = "the head published for seq 8 was deleted"
    elif how == "destroy":
        kv.destroy_secret_versions(path=key(3), versions=[1], mount_point=kv_mount)
        expected = "the head published for seq 3 was deleted or destroyed"
    elif how == "rewrite":
        kv.create_or_update_secret(path=key(8), secret=head, mount_point=kv_mount)
        expected = "the head published for seq 8 was written 2 times"
    else:
        kv.update_metadata(path=key(8), max_versions=1, mount_point=kv_mount)
        kv.create_or_update_secret(path=key(8), secret=head, mount_point=kv_mount)
        expected = "the head published for seq 8 was written 2 times"
    report = ledger.verify()
    assert not report.ok
    assert expected in report.summary()


def test_publishing_a_head_again_is_a_no_op(
    ledger: RecordLedger, anchor_board: VaultAnchorBoard, vault: hvac.Client, kv_mount: str
) -> None:
    assert ledger.anchor_head() is False  # seq 8, the same record: left as it is
    meta = vault.secrets.kv.v2.read_secret_metadata(path=key(8), mount_point=kv_mount)
    assert meta["data"]["current_version"] == 1


def test_the_cli_verifies_against_the_published_heads(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ledger: RecordLedger,
    db_path: Path,
    openbao: EmbeddedOpenBao,
    transit_mount: str,
    kv_mount: str,
) -> None:
    monkeypatch.setenv("ERASURE_STORE_URL", f"sqlite:///{db_path}")
    monkeypatch.setenv("ERASURE_VAULT_ADDR", openbao.address)
    monkeypatch.setenv("ERASURE_VAULT_TOKEN", openbao.token)
    monkeypatch.setenv("ERASURE_VAULT_TRANSIT_MOUNT", transit_mount)
    monkeypatch.setenv("ERASURE_VAULT_KV_MOUNT", kv_mount)
    run = runner(capsys)
    code, out, _ = run("audit", "anchor")
    assert code == 0 and out.startswith("already published: head seq 8 sha256:")
    tamper = sqlite3.connect(db_path, isolation_level=None)
    try:
        cut_to(tamper, 6)
    finally:
        tamper.close()
    code, out, _ = run("audit", "verify")
    assert code == 1
    assert out.startswith(
        f"chain BROKEN at seq 8: seq 8 was published as the chain head at {kv_mount}/"
        f"{ANCHOR_PATH} ("
    )
    assert "no longer in the store" in out and "(1 more anchor(s) like it)" in out
