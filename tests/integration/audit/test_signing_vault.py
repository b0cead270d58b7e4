"""Records signed by a real OpenBao transit key and verified with its public key alone."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest
import requests

from erasure.audit.export import export_json, verify_pack
from erasure.audit.records import RecordLedger
from erasure.audit.signing import TransitSigner, verify_with_public_key
from erasure.errors import ConfigError, VaultError
from erasure.store import open_store
from tests.unit.audit.support import OTHER_SUBJECT, SUBJECT, received_body, record_request

pytestmark = [pytest.mark.integration, pytest.mark.vault]


def no_network(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("verification must not call Vault")


def test_the_signing_key_is_ed25519_and_cannot_leave_vault(
    vault: hvac.Client, transit_signer: TransitSigner, transit_mount: str
) -> None:
    assert transit_signer.latest_version() == 1  # created on first use
    info = vault.secrets.transit.read_key(name="completion-records", mount_point=transit_mount)
    data = info["data"]
    assert data["type"] == "ed25519"
    assert data["exportable"] is False and data["allow_plaintext_backup"] is False
    with pytest.raises(hvac.exceptions.VaultError):
        vault.secrets.transit.export_key(
            name="completion-records", key_type="signing-key", mount_point=transit_mount
        )


def test_a_vault_signature_verifies_with_the_public_key_alone(
    transit_signer: TransitSigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b"9c1d" * 16
    signature, version = transit_signer.sign(payload)
    assert signature.startswith(f"vault:v{version}:")
    public = transit_signer.public_keys()[version]
    assert len(base64.b64decode(public)) == 32

    monkeypatch.setattr(requests.Session, "request", no_network)
    assert verify_with_public_key(public, payload, signature)
    assert not verify_with_public_key(public, payload.upper(), signature)


def test_a_chain_signed_in_vault_verifies_offline(
    tmp_path: Path, transit_signer: TransitSigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        ledger = RecordLedger(store, transit_signer)
        record_request(ledger, "REQ-2026-0042", with_tape=True)
        pack = export_json(ledger, "REQ-2026-0042")
        public_keys = transit_signer.public_keys()

        # From here on Vault is unreachable, and the auditor's ledger has no signer at all.
        monkeypatch.setattr(requests.Session, "request", no_network)
        auditor = RecordLedger(store)
        report = auditor.verify(public_keys=public_keys)
        assert report.ok, report.summary()
        assert report.records == 4 and report.key_versions == [1]
        assert verify_pack(pack, public_keys=public_keys).ok


def test_rotation_signs_with_the_new_version_and_old_records_still_verify(
    tmp_path: Path, vault: hvac.Client, transit_signer: TransitSigner, transit_mount: str
) -> None:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        ledger = RecordLedger(store, transit_signer)
        ledger.append("REQ-2026-0041", SUBJECT, "received", received_body())
        vault.secrets.transit.rotate_key(name="completion-records", mount_point=transit_mount)
        later = ledger.append("REQ-2026-0043", OTHER_SUBJECT, "received", received_body())
        assert later.signing_key_version == 2
        assert set(transit_signer.public_keys()) == {1, 2}
        report = ledger.verify()
        assert report.ok and report.key_versions == [1, 2]


def test_a_record_signed_with_another_vault_key_fails(
    tmp_path: Path, vault: hvac.Client, transit_signer: TransitSigner, transit_mount: str
) -> None:
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        RecordLedger(store, transit_signer).append(
            "REQ-2026-0041", SUBJECT, "received", received_body()
        )
        # Someone with sign rights on a different key appends through the ledger.
        rogue = TransitSigner(vault, transit_mount, "not-the-records-key")
        RecordLedger(store, rogue).append("REQ-2026-0042", SUBJECT, "received", received_body())
        report = RecordLedger(store, transit_signer).verify()
        assert report.first_problem is not None
        assert (report.first_problem.seq, report.first_problem.problem) == (2, "bad_signature")


def test_an_exportable_key_is_refused(vault: hvac.Client, transit_mount: str) -> None:
    signer = TransitSigner(vault, transit_mount, "leaky")
    vault.sys.enable_secrets_engine(backend_type="transit", path=transit_mount)
    vault.secrets.transit.create_key(
        name="leaky", key_type="ed25519", exportable=True, mount_point=transit_mount
    )
    with pytest.raises(VaultError, match="exportable"):
        signer.sign(b"x")


def test_a_key_of_another_type_is_refused(vault: hvac.Client, transit_mount: str) -> None:
    vault.sys.enable_secrets_engine(backend_type="transit", path=transit_mount)
    vault.secrets.transit.create_key(name="aes", key_type="aes256-gcm96", mount_point=transit_mount)
    with pytest.raises(ConfigError, match="not ed25519"):
        TransitSigner(vault, transit_mount, "aes").sign(b"x")


def test_public_keys_of_a_key_never_created_are_empty(
    vault: hvac.Client, transit_signer: TransitSigner, transit_mount: str
) -> None:
    transit_signer.ensure_key()  # the mount exists, the other key does not
    assert TransitSigner(vault, transit_mount, "never-created").public_keys() == {}
