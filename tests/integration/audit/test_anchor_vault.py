"""The chain head published in a real OpenBao KV v2 secret: every version kept, compared by
`verify` and `erasure audit verify`, and whatever removes a version or rewinds the head is
found. (Which identities may write or delete there: tests/integration/test_vault_policies.py.)
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import hvac
import pytest

from erasure.audit.anchor import ANCHOR_MAX_VERSIONS, ANCHOR_PATH, VaultAnchorBoard, anchor_of
from erasure.audit.records import RecordLedger
from erasure.audit.signing import TransitSigner
from erasure.keys.vault import EmbeddedOpenBao
from erasure.store import open_store
from tests.unit.audit.cli import runner
from tests.unit.audit.support import record_request
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


def test_each_append_is_a_kept_version(
    ledger: RecordLedger, vault: hvac.Client, kv_mount: str
) -> None:
    meta = vault.secrets.kv.v2.read_secret_metadata(path=ANCHOR_PATH, mount_point=kv_mount)
    assert meta["data"]["max_versions"] == ANCHOR_MAX_VERSIONS
    assert meta["data"]["current_version"] == 8
    report = ledger.verify()
    assert report.ok, report.summary()
    assert report.summary().endswith(
        f"matches the 8 head(s) published at {kv_mount}/{ANCHOR_PATH} (newest seq 8)"
    )


def test_a_cut_and_re_anchored_chain_is_caught(
    ledger: RecordLedger, db_path: Path, vault: hvac.Client, kv_mount: str
) -> None:
    tamper = sqlite3.connect(db_path, isolation_level=None)
    try:
        cut_to(tamper, 4)
    finally:
        tamper.close()
    fourth = ledger.list()[-1]
    # An identity that may write the anchor re-publishes seq 4; the history keeps seq 8.
    rewound = anchor_of(4, fourth.record_hash, fourth.signature, fourth.signing_key_version)
    vault.secrets.kv.v2.create_or_update_secret(
        path=ANCHOR_PATH, mount_point=kv_mount, secret=rewound.model_dump(mode="json")
    )
    report = ledger.verify()
    assert not report.ok
    details = " | ".join(p.detail for p in report.problems)
    assert "rewinds the head from seq 8 to 4" in details
    assert "no longer in the store" in details


@pytest.mark.parametrize("how", ["delete", "destroy", "prune"])
def test_a_removed_version_is_caught(
    ledger: RecordLedger, vault: hvac.Client, kv_mount: str, how: str
) -> None:
    kv = vault.secrets.kv.v2
    if how == "delete":
        kv.delete_secret_versions(path=ANCHOR_PATH, versions=[8], mount_point=kv_mount)
        expected = "anchor version 8 was deleted"
    elif how == "destroy":
        kv.destroy_secret_versions(path=ANCHOR_PATH, versions=[3], mount_point=kv_mount)
        expected = "anchor version 3 was destroyed"
    else:
        history = ledger.anchor_history()
        assert history is not None and history.newest is not None
        kv.update_metadata(path=ANCHOR_PATH, max_versions=2, mount_point=kv_mount)
        kv.create_or_update_secret(  # the next write prunes down to two versions
            path=ANCHOR_PATH, mount_point=kv_mount, secret=history.newest.model_dump(mode="json")
        )
        expected = "anchor version 1 was pruned"
    report = ledger.verify()
    assert not report.ok
    assert expected in report.summary()


def test_concurrent_publishers_never_move_the_head_back(
    transit_signer: TransitSigner, vault: hvac.Client, kv_mount: str
) -> None:
    board = VaultAnchorBoard(vault, kv_mount)
    record = transit_signer.sign(b"0" * 64)[0]
    anchors = [anchor_of(seq, f"{seq:064x}", record, 1) for seq in range(1, 21)]
    threads = [threading.Thread(target=board.publish, args=(a,)) for a in anchors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seqs = [a.seq for a in board.history().anchors]
    assert seqs == sorted(seqs) and seqs[-1] == 20


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
        f"{ANCHOR_PATH} (version 8, "
    )
    assert "no longer in the store" in out and "(1 more anchor(s) like it)" in out
