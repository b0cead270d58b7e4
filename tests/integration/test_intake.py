"""Sealed submissions on a real OpenBao (transit) and a real store, SQLite and Postgres."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
import sqlalchemy as sa

from erasure.errors import RequestError
from erasure.intake import (
    NOTE_HANDLE,
    SubmissionBox,
    Ticket,
    TransitSubmissionKey,
    ensure_submissions_key,
    note_binding,
)
from erasure.keys.vault import EmbeddedOpenBao, ensure_transit
from erasure.store import Store
from erasure.store.schema import sealed_notes, submissions
from erasure.submission import ErasureRequest

pytestmark = [pytest.mark.integration, pytest.mark.vault]

CANARY = "Zoë.Sealed.7b41c2@Example.org"
NOTES = "called on 2026-11-30 from the shop, ref 7b41c2"


@pytest.fixture
def box(store: Store, openbao: EmbeddedOpenBao) -> SubmissionBox:
    client = openbao.client()
    ensure_transit(client, "erasure-transit")
    ensure_submissions_key(client, "erasure-transit")
    return SubmissionBox(store, TransitSubmissionKey(client, "erasure-transit"))


def submitted(ref: str = "DSR-SEAL-1") -> ErasureRequest:
    return ErasureRequest.parse(
        {
            "request_ref": ref,
            "identifier_type": "email",
            "identifier": CANARY,
            "received_on": date.today().isoformat(),
            "legal_ground": "art17_1_a",
            "notes": NOTES,
            "dry_run": True,
        }
    )


def stored_text(store: Store) -> str:
    with store.engine.connect() as conn:
        return "\n".join(str(tuple(row)) for row in conn.execute(sa.select(submissions)))


def test_a_sealed_submission_opens_to_what_was_typed_and_is_stored_as_ciphertext(
    box: SubmissionBox, store: Store
) -> None:
    ticket = box.seal(submitted())
    assert ticket.request_ref == "DSR-SEAL-1" and box.held("DSR-SEAL-1") == 1
    text = stored_text(store)
    assert "vault:v1:" in text
    assert "zoë" not in text.casefold() and "7b41c2" not in text and "shop" not in text

    opened = box.open(ticket)
    assert opened == submitted()
    assert opened.identifier.get_secret_value() == CANARY
    assert opened.notes is not None and opened.notes.get_secret_value() == NOTES

    assert box.destroy(ticket) and not box.destroy(ticket)  # idempotent
    assert box.held("DSR-SEAL-1") == 0 and stored_text(store) == ""


def test_a_ticket_opens_only_its_own_request(box: SubmissionBox) -> None:
    ticket = box.seal(submitted())
    forged = Ticket(request_ref="DSR-OTHER-1", submission=ticket.submission)
    with pytest.raises(RequestError, match="submit the request again"):
        box.open(forged)
    assert not box.destroy(forged)  # nor destroys another request's submission
    assert box.held("DSR-SEAL-1") == 1
    box.destroy(ticket)
    with pytest.raises(RequestError, match="not in the erasure store") as gone:
        box.open(ticket)
    assert "zoë" not in str(gone.value).casefold()


def test_the_store_refuses_a_submission_in_clear(store: Store) -> None:
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(
            submissions.insert().values(
                handle="sub-" + "0" * 32,
                request_ref="DSR-CLEAR-1",
                sealed=f'{{"identifier": "{CANARY}"}}',
                sealed_at=datetime.now(UTC),
            )
        )


JUSTIFICATION = "Retained: Zoë's invoice 7b41c2 is under dispute until the court rules."


def notes_text(store: Store) -> str:
    with store.engine.connect() as conn:
        return "\n".join(str(tuple(row)) for row in conn.execute(sa.select(sealed_notes)))


def test_a_prompt_that_ruled_leaves_no_earlier_answer_s_note(box: SubmissionBox) -> None:
    """An answer whose task never resumed (its run failed; the prompt cleared and answered
    again) leaves its note: the prompt's ruling destroys every note of that prompt, and only
    that prompt's."""
    prompt = note_binding("gdpr_erasure", "erasure-DSR-SEAL-3", "dpo_decides", 0)
    other = note_binding("gdpr_erasure", "erasure-DSR-SEAL-3", "dpo_decides", 1)
    first, second = box.seal_note(JUSTIFICATION, prompt), box.seal_note(JUSTIFICATION, prompt)
    kept = box.seal_note(JUSTIFICATION, other)
    assert box.destroy_notes_of(prompt) == 2
    for gone in (first, second):
        with pytest.raises(RequestError, match="was not sealed by the erasure plugin"):
            box.open_note(gone, prompt)
    assert box.open_note(kept, other) == JUSTIFICATION


def test_a_sealed_note_opens_only_for_the_prompt_it_answers(
    box: SubmissionBox, store: Store
) -> None:
    prompt = note_binding("gdpr_erasure", "erasure-DSR-SEAL-1", "dpo_decides", 2)
    handle = box.seal_note(JUSTIFICATION, prompt)
    assert NOTE_HANDLE.match(handle)
    text = notes_text(store)
    assert "vault:v1:" in text and "7b41c2" not in text and "dispute" not in text
    assert "erasure-DSR-SEAL-1" not in text  # bound by a hash, not by the run id

    # Another map index, run or task of the same DAG is another prompt.
    for elsewhere in (
        note_binding("gdpr_erasure", "erasure-DSR-SEAL-1", "dpo_decides", 3),
        note_binding("gdpr_erasure", "erasure-DSR-SEAL-2", "dpo_decides", 2),
        note_binding("gdpr_erasure", "erasure-DSR-SEAL-1", "dpo_decides_2", 2),
    ):
        with pytest.raises(RequestError, match="sealed for another prompt") as refused:
            box.open_note(handle, elsewhere)
        assert "7b41c2" not in str(refused.value)
    assert box.open_note(handle, prompt) == JUSTIFICATION

    assert not box.destroy_note(handle, elsewhere)  # nor by another prompt's answer
    assert box.destroy_note(handle, prompt) and not box.destroy_note(handle, prompt)
    assert notes_text(store) == ""
    with pytest.raises(RequestError, match="was not sealed by the erasure plugin"):
        box.open_note(handle, prompt)


@pytest.mark.parametrize("typed", ["", JUSTIFICATION, "note-" + "0" * 31, "NOTE-" + "a" * 32])
def test_an_answer_that_holds_no_sealed_note_is_no_justification(
    box: SubmissionBox, typed: str
) -> None:
    """Typed into Airflow past the plugin (or a handle forged): the worker refuses it."""
    prompt = note_binding("gdpr_erasure", "erasure-DSR-SEAL-1", "dpo_decides", -1)
    with pytest.raises(RequestError, match="not sealed by the erasure plugin") as refused:
        box.open_note(typed, prompt)
    assert "7b41c2" not in str(refused.value)


def test_the_store_refuses_a_note_in_clear(store: Store) -> None:
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(
            sealed_notes.insert().values(
                handle="note-" + "0" * 32,
                bound_to="0" * 64,
                sealed=JUSTIFICATION,
                sealed_at=datetime.now(UTC),
            )
        )
