"""`erasure audit` end to end: records signed in OpenBao, verified and exported by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from erasure.audit.anchor import VaultAnchorBoard
from erasure.audit.export import verify_pack
from erasure.audit.records import RecordLedger
from erasure.audit.signing import TransitSigner
from erasure.keys.vault import EmbeddedOpenBao
from erasure.store import open_store
from tests.unit.audit.cli import Run, runner
from tests.unit.audit.support import CANARY, record_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]


@pytest.fixture
def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    openbao: EmbeddedOpenBao,
    transit_signer: TransitSigner,
    transit_mount: str,
    anchor_board: VaultAnchorBoard,
    kv_mount: str,
) -> Run:
    url = f"sqlite:///{tmp_path}/erasure.db"
    with open_store(url) as store:
        ledger = RecordLedger(store, transit_signer, anchor_board)
        record_request(ledger, "REQ-2026-0042", with_tape=True)
        record_request(ledger, "REQ-2026-0043")
    monkeypatch.setenv("ERASURE_STORE_URL", url)
    monkeypatch.setenv("ERASURE_VAULT_ADDR", openbao.address)
    monkeypatch.setenv("ERASURE_VAULT_TOKEN", openbao.token)
    monkeypatch.setenv("ERASURE_VAULT_TRANSIT_MOUNT", transit_mount)
    monkeypatch.setenv("ERASURE_VAULT_KV_MOUNT", kv_mount)
    return runner(capsys)


def test_verify_reads_the_public_keys_from_vault(run: Run) -> None:
    code, out, err = run("audit", "verify")
    assert (code, err) == (0, "")
    assert out.startswith("chain OK: 8 record(s), head seq 8 sha256:")


def test_export_json_and_html_to_files(
    run: Run, tmp_path: Path, transit_signer: TransitSigner
) -> None:
    code, out, _ = run(
        "audit", "export", "REQ-2026-0042", "--format", "json", "--output", str(tmp_path / "p.json")
    )
    assert code == 0 and out.strip().endswith("(4 record(s); the pack verifies)")
    pack = json.loads((tmp_path / "p.json").read_text())
    assert verify_pack(pack, public_keys=transit_signer.public_keys()).ok

    code, _, _ = run(
        "audit", "export", "REQ-2026-0042", "--format", "html", "--output", str(tmp_path / "p.html")
    )
    assert code == 0
    page = (tmp_path / "p.html").read_text()
    assert "<svg" in page and "complete_with_exemptions" in page

    for text in ((tmp_path / "p.json").read_text(), page):
        assert CANARY.casefold() not in text.casefold()


def test_export_to_stdout(run: Run) -> None:
    code, out, _ = run("audit", "export", "REQ-2026-0043")
    assert code == 0
    assert json.loads(out)["verify"]["ok"] is True


def test_export_of_an_unknown_request_is_an_error(run: Run) -> None:
    code, out, err = run("audit", "export", "REQ-NONE", "--format", "html")
    assert code == 2 and out == ""
    assert "no completion records for a request with that reference" in err
    assert "REQ-NONE" not in err  # what was typed is not repeated
