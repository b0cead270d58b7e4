"""The ticket a `gdpr_erasure` run carries: a reference and a handle, never what was typed."""

from __future__ import annotations

from typing import Any

import pytest

from erasure.errors import RequestError
from erasure.intake import Ticket

CANARY = "ticket.canary.5c0e2a91@example.org"
HANDLE = "sub-" + "a1" * 16


def test_the_desks_conf_is_a_ticket() -> None:
    ticket = Ticket.parse({"request_ref": "DSR-2026-0042", "submission": HANDLE})
    assert ticket.conf() == {"request_ref": "DSR-2026-0042", "submission": HANDLE}


@pytest.mark.parametrize(
    "conf",
    [
        # The old trigger form's conf: the identifier typed into Airflow.
        {"request_ref": "DSR-1", "identifier_type": "email", "identifier": CANARY},
        {"request_ref": "DSR-1", "submission": CANARY},
        {"request_ref": CANARY, "submission": HANDLE},
        {"request_ref": "DSR-1", "submission": HANDLE, "notes": CANARY},
        {"submission": HANDLE},
        {},
        [CANARY],
    ],
)
def test_any_other_conf_is_sent_to_the_desk_without_echoing_it(conf: Any) -> None:
    with pytest.raises(RequestError, match="erasure desk") as refused:
        Ticket.parse(conf)
    assert "canary" not in str(refused.value).lower()
