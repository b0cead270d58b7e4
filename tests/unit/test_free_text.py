"""Free text is checked by whole tokens, case- and Unicode-insensitively, in any format a
phone number is written in; short identifiers only when they stand alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from erasure.catalog import Catalog, load_catalog
from erasure.free_text import NamesSubject, contains_token, named_types, refuse_if_named
from erasure.locate import Identity

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
  phone: {normalise: e164, default_region: GB}
datasets: []
"""


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    return load_catalog(tmp_path / "catalog.yaml")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("DSR-1", True),
        ("request 1 of 3", True),
        ("2026-12-01", False),
        ("a1b2", False),
        ("seq 147112, rows 11", False),
        ("customer #1.", True),
    ],
)
def test_a_one_character_id_counts_only_as_a_whole_token(
    catalog: Catalog, text: str, named: bool
) -> None:
    assert bool(named_types(catalog, text, [Identity("customer_id", "1")])) is named


@pytest.mark.parametrize(
    "text",
    [
        "wrote from ZOË.MÜLLER@EXAMPLE.COM today",
        "wrote from zoe\u0308.mu\u0308ller@example.com",  # decomposed accents
        "<zoë.müller@example.com>",
    ],
)
def test_an_email_is_found_in_any_case_and_composition(catalog: Catalog, text: str) -> None:
    identities = [Identity("email", "zoë.müller@example.com")]
    assert named_types(catalog, text, identities) == ["email"]


def test_a_longer_address_containing_the_email_is_not_the_email(catalog: Catalog) -> None:
    identities = [Identity("email", "ann@example.com")]
    assert named_types(catalog, "joann@example.com.au", identities) == []


@pytest.mark.parametrize(
    "text",
    ["call 020 7946 0958", "ring +44 (0)20 7946-0958 after 5", "tel 442079460958", "02079460958"],
)
def test_a_phone_is_found_however_it_is_written(catalog: Catalog, text: str) -> None:
    assert named_types(catalog, text, [Identity("phone", "+442079460958")]) == ["phone"]


def test_the_refusal_names_field_and_type_never_the_value(catalog: Catalog) -> None:
    with pytest.raises(NamesSubject) as refused:
        refuse_if_named(catalog, "justification", "C77 asked", [Identity("customer_id", "C77")])
    message = str(refused.value)
    assert "justification contains the subject's customer_id:" in message
    assert "C77" not in message


def test_contains_token_respects_boundaries_on_both_sides() -> None:
    assert contains_token("x c1 y", "c1")
    assert not contains_token("xc1 y", "c1")
    assert not contains_token("x c1y", "c1")
    assert contains_token("a@b.c,", "a@b.c")
