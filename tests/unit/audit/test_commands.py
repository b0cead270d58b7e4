"""`erasure audit list|show|verify` against an SQLite store, keys given as a file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from erasure.audit.records import NO_RECORDS, RecordLedger
from tests.unit.audit.cli import Run, runner
from tests.unit.audit.support import CANARY, SUBJECT, LocalSigner, record_request


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db_path: Path) -> Run:
    for name in ("ERASURE_VAULT_ADDR", "ERASURE_VAULT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ERASURE_STORE_URL", f"sqlite:///{db_path}")
    return runner(capsys)


@pytest.fixture
def keys_file(tmp_path: Path, signer: LocalSigner) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(signer.public_keys()))
    return path


@pytest.fixture
def recorded(ledger: RecordLedger) -> RecordLedger:
    record_request(ledger, "REQ-2026-0042")
    record_request(ledger, "REQ-2026-0043", with_tape=True)
    ledger.append("REQ-2026-0044", SUBJECT, "failed", {"step": "act", "error": "rebuild failed"})
    return ledger


def test_list_prints_the_records_in_chain_order(run: Run, recorded: RecordLedger) -> None:
    code, out, err = run("audit", "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["SEQ", "CREATED", "(UTC)"]
    assert len(lines) == 10
    assert "REQ-2026-0043" in lines[8] and "complete_with_exemptions" in lines[8]


def test_list_filters_and_speaks_json(run: Run, recorded: RecordLedger) -> None:
    code, out, _ = run("audit", "list", "--status", "failed", "--json")
    assert code == 0
    [only] = json.loads(out)
    assert only["request_ref"] == "REQ-2026-0044" and only["status"] == "failed"
    assert "body" not in only
    code, out, _ = run("audit", "list", "--since", "2999-01-01", "--json")
    assert json.loads(out) == []


def test_show_prints_one_request(run: Run, recorded: RecordLedger) -> None:
    code, out, _ = run("audit", "show", "REQ-2026-0042")
    assert code == 0
    assert "#4 completed [complete]" in out
    assert "effective erasure date: 2027-01-15" in out
    assert "crypto_shred   backup.crm_nightly" in out
    code, out, _ = run("audit", "show", "REQ-2026-0042", "--json")
    assert [r["kind"] for r in json.loads(out)] == ["received", "escalated", "decided", "completed"]


def test_show_of_an_unknown_request_is_an_error_on_stderr(run: Run, recorded: RecordLedger) -> None:
    code, out, err = run("audit", "show", "REQ-NONE")
    assert code == 2 and out == ""
    assert err.strip() == f"erasure: {NO_RECORDS}"
    # An identifier typed where the reference goes is not repeated on the terminal.
    code, out, err = run("audit", "show", "jane.doe@example.org")
    assert code == 2 and out == "" and "jane.doe" not in err


def test_verify_with_public_keys_only_compares_nothing_and_says_so(
    run: Run, recorded: RecordLedger, keys_file: Path
) -> None:
    """Offline, no published head is read: a wiped store would verify too, so nothing
    passes unless the auditor gives a head or says she checks the chain alone."""
    code, out, _ = run("audit", "verify", "--public-keys", str(keys_file))
    assert code == 1
    assert out.startswith("chain NOT VERIFIED: it was compared with no published head")
    code, out, _ = run("audit", "verify", "--public-keys", str(keys_file), "--no-anchor")
    assert code == 0
    assert out.startswith("chain OK: 9 record(s), head seq 9 sha256:")
    assert out.strip().endswith(
        "NOT compared with the heads published outside the store (no Vault access)"
    )
    code, out, _ = run("audit", "verify", "--public-keys", str(keys_file), "--no-anchor", "--json")
    report = json.loads(out)
    assert report["ok"] is True and report["first_problem"] is None
    assert report["anchor_location"] is None


def test_verify_exits_1_naming_the_first_bad_record(
    run: Run, recorded: RecordLedger, keys_file: Path, tamper: sqlite3.Connection
) -> None:
    tamper.execute("DROP TRIGGER completion_records_no_delete")
    tamper.execute("DELETE FROM completion_records WHERE seq = 3")
    code, out, err = run("audit", "verify", "--public-keys", str(keys_file))
    assert code == 1 and err == ""
    assert out.splitlines()[0].startswith(
        "chain BROKEN at seq 3: record seq 3 is missing: the chain jumps from seq 2 to 4"
    )
    code, out, _ = run("audit", "verify", "--public-keys", str(keys_file), "--json")
    assert code == 1 and json.loads(out)["first_problem"]["seq"] == 3
    assert json.loads(out)["problems"][-1]["problem"] == "unanchored"  # said after the break


def test_verify_with_an_anchor(run: Run, recorded: RecordLedger, keys_file: Path) -> None:
    seq, head = recorded.head()
    assert (
        run("audit", "verify", "--public-keys", str(keys_file), "--anchor", f"{seq}:{head}")[0] == 0
    )
    code, _, err = run("audit", "verify", "--public-keys", str(keys_file), "--anchor", "nine")
    assert code == 2 and "--anchor must be SEQ:HASH" in err


def test_verify_without_keys_or_vault_says_what_to_set(run: Run, recorded: RecordLedger) -> None:
    code, out, err = run("audit", "verify")
    assert code == 2 and out == ""
    assert "ERASURE_VAULT_ADDR is not set" in err


def test_no_output_holds_the_identifier(run: Run, recorded: RecordLedger, keys_file: Path) -> None:
    outputs = [
        run("audit", "list", "--json"),
        run("audit", "show", "REQ-2026-0043", "--json"),
        run("audit", "verify", "--public-keys", str(keys_file), "--json"),
    ]
    for _, out, err in outputs:
        assert CANARY.casefold() not in (out + err).casefold()
