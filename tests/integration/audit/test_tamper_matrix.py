"""Every way to falsify the record that the people holding a piece of the system have, played
against a real OpenBao and an SQLite store; `verify` must catch each, and the auditor keeps
nothing. The tally is published in docs/reliability.md (section `tamper`).

Each attack starts from the same chain (two requests' lives, 8 records, each head published)
and does what its attacker can: the store's owner drops the triggers and edits, deletes,
cuts, rewinds or wipes; a holder of the signer's credentials also signs and publishes heads;
a Vault administrator (root) removes published versions, which no shipped policy allows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import hvac
import pytest

from erasure.audit.anchor import ANCHOR_PATH, AnchorError, VaultAnchorBoard, anchor_of
from erasure.audit.canonical import canonical_json, hash_document, sha256_hex
from erasure.audit.records import RecordLedger
from erasure.audit.signing import TransitSigner
from erasure.store import open_store
from tests.integration.published import publish
from tests.unit.audit.support import OTHER_SUBJECT, LocalSigner, received_body, record_request
from tests.unit.audit.test_anchor import cut_to
from tests.unit.audit.test_tamper_sqlite import RECORD_TRIGGERS, drop

pytestmark = [pytest.mark.integration, pytest.mark.vault]

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "reliability.md"


@dataclass
class World:
    db: Path
    ledger: RecordLedger  # the deployment's own: signer and board
    signer: TransitSigner
    board: VaultAnchorBoard
    vault: hvac.Client  # root: what a Vault administrator holds
    kv: str

    def raw(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db, isolation_level=None)


Attack = Callable[[World], None]


def edit_a_body(w: World) -> None:
    raw = w.raw()
    drop(raw, *RECORD_TRIGGERS)
    raw.execute("UPDATE completion_records SET body = ? WHERE seq = 4", ('{"edited":true}',))


def edit_and_rehash(w: World) -> None:
    raw = w.raw()
    drop(raw, *RECORD_TRIGGERS)
    row = raw.execute(
        "SELECT seq, request_ref, kind, status, created_at, body, prev_hash, signing_key_version "
        "FROM completion_records WHERE seq = 6"
    ).fetchone()
    record = next(r for r in w.ledger.list() if r.seq == 6)
    forged = sha256_hex(
        canonical_json(
            hash_document(
                seq=row[0],
                request_ref=row[1],
                subject_hash=OTHER_SUBJECT,
                kind=row[2],
                status=row[3],
                created_at=record.created_at,
                body=json.loads(row[5]),
                prev_hash=row[6],
                signing_key_version=row[7],
            )
        )
    )
    raw.execute(
        "UPDATE completion_records SET subject_hash = ?, record_hash = ? WHERE seq = 6",
        (OTHER_SUBJECT, forged),
    )


def delete_a_middle_record(w: World) -> None:
    raw = w.raw()
    drop(raw, *RECORD_TRIGGERS)
    raw.execute("DELETE FROM completion_records WHERE seq = 3")


def delete_the_tail(w: World) -> None:
    raw = w.raw()
    drop(raw, *RECORD_TRIGGERS)
    raw.execute("DELETE FROM completion_records WHERE seq > 5")


def cut_the_tail_and_rewind_the_head(w: World) -> None:
    cut_to(w.raw(), 5)


def wipe_the_store(w: World) -> None:
    cut_to(w.raw(), 0)


def replace_the_store(w: World) -> None:
    w.db.unlink()
    open_store(f"sqlite:///{w.db}").close()  # a fresh, migrated, empty store


def append_with_another_key(w: World) -> None:
    with open_store(f"sqlite:///{w.db}") as store:
        RecordLedger(store, LocalSigner()).append(
            "REQ-2026-000X", OTHER_SUBJECT, "received", received_body("REQ-2026-000X")
        )


def re_sign_the_tail(w: World) -> None:
    cut_to(w.raw(), 4)
    with open_store(f"sqlite:///{w.db}") as store:
        forger = RecordLedger(store, w.signer, w.board)
        with pytest.raises(AnchorError):  # its head cannot be published over seq 5's
            forger.append(
                "REQ-2026-000F", OTHER_SUBJECT, "received", received_body("REQ-2026-000F")
            )


def head_key(w: World, seq: int) -> str:
    return f"{ANCHOR_PATH}/{seq:012d}"


def delete_the_newest_head(w: World) -> None:
    w.vault.secrets.kv.v2.delete_secret_versions(
        path=head_key(w, 8), versions=[1], mount_point=w.kv
    )


def destroy_a_head(w: World) -> None:
    w.vault.secrets.kv.v2.destroy_secret_versions(
        path=head_key(w, 2), versions=[1], mount_point=w.kv
    )


def cut_and_rewrite_the_heads(w: World) -> None:
    """Cut to seq 4, re-sign seq 5, and write its head over the published one."""
    re_sign_the_tail(w)
    with open_store(f"sqlite:///{w.db}") as store:
        fifth = RecordLedger(store).list()[-1]
    w.vault.secrets.kv.v2.create_or_update_secret(
        path=head_key(w, 5),
        mount_point=w.kv,
        secret=anchor_of(
            5, fifth.record_hash, fifth.signature, fifth.signing_key_version
        ).model_dump(mode="json"),
    )


STORE_OWNER = "the store's owner"
SIGNER = "the store's owner and the signer's credentials"
VAULT_ROOT = "Vault's root (no shipped policy)"
ATTACKS: list[tuple[str, str, Attack]] = [
    ("edit a record's body", STORE_OWNER, edit_a_body),
    ("edit a record and recompute its hash", STORE_OWNER, edit_and_rehash),
    ("delete a record in the middle", STORE_OWNER, delete_a_middle_record),
    ("delete the tail", STORE_OWNER, delete_the_tail),
    ("cut the tail and rewind the head", STORE_OWNER, cut_the_tail_and_rewind_the_head),
    ("wipe the store", STORE_OWNER, wipe_the_store),
    ("replace the store with an empty one", STORE_OWNER, replace_the_store),
    ("append a record signed by another key", STORE_OWNER, append_with_another_key),
    ("cut and re-sign the tail", SIGNER, re_sign_the_tail),
    ("delete the newest published head", VAULT_ROOT, delete_the_newest_head),
    ("destroy a published head", VAULT_ROOT, destroy_a_head),
    ("cut, re-sign and write a head over the published one", VAULT_ROOT, cut_and_rewrite_the_heads),
]


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory, vault: hvac.Client
) -> dict[str, tuple[bool, str]]:
    """attack -> (caught, the first problem's kind), each on a chain of its own."""
    from erasure.keys.vault import ensure_kv_v2, ensure_transit

    results: dict[str, tuple[bool, str]] = {}
    for number, (name, _, attack) in enumerate(ATTACKS):
        base = tmp_path_factory.mktemp(f"tamper{number}")
        kv, transit = f"tamper-kv-{base.name}", f"tamper-transit-{base.name}"
        ensure_kv_v2(vault, kv)
        ensure_transit(vault, transit)
        signer = TransitSigner(vault, transit)
        board = VaultAnchorBoard(vault, kv)
        db = base / "erasure.db"
        with open_store(f"sqlite:///{db}") as store:
            ledger = RecordLedger(store, signer, board)
            record_request(ledger, "REQ-2026-0042")
            record_request(ledger, "REQ-2026-0043")
            assert ledger.verify().ok
            attack(World(db, ledger, signer, board, vault, kv))
        with open_store(f"sqlite:///{db}") as store:
            report = RecordLedger(store, signer, board).verify()
        first = report.first_problem
        results[name] = (not report.ok, "" if first is None else first.problem)
    return results


@pytest.mark.parametrize("attack", [name for name, _, _ in ATTACKS])
def test_verify_catches_it(outcomes: dict[str, tuple[bool, str]], attack: str) -> None:
    caught, _ = outcomes[attack]
    assert caught, f"{attack}: the chain still verifies"


def test_the_published_tally_is_the_one_this_run_produced(
    outcomes: dict[str, tuple[bool, str]],
) -> None:
    rows = [
        f"| {name} | {holder} | {'yes' if outcomes[name][0] else '**NO**'} "
        f"| `{outcomes[name][1] or '-'}` |"
        for name, holder, _ in ATTACKS
    ]
    caught = sum(caught for caught, _ in outcomes.values())
    text = SECTION.format(caught=caught, total=len(ATTACKS), table="\n".join(rows))
    if publish(DOC, "tamper", text):
        pytest.fail(f"{DOC.relative_to(REPO)} was out of date: rewritten; review and commit it")


SECTION = """\
## Tampering: does `erasure audit verify` catch a falsified record?

<!-- Generated by tests/integration/audit/test_tamper_matrix.py; do not edit by hand. -->

Each attack below was played on a chain of two requests' lives (8 records, each head
published in a real OpenBao as the ledger does), then `verify` ran as an auditor runs it,
having kept nothing. **{caught} of {total} attacks were caught.** The store's owner can drop
the database's guards; a holder of the signer's credentials can also sign and publish heads,
but it cannot write a published head again, and no shipped Vault policy lets anyone
remove or rewrite one (`tests/integration/test_vault_policies.py`): the last three need
Vault's root.

| attack | the attacker holds | caught | first problem |
|---|---|---|---|
{table}
"""
