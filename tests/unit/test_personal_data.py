"""The personal data free text must not carry, read from the subject's located rows
(`erasure.locate.personal_data`): names apart, short values left out, a catalogued pii
column the table no longer has skipped (not a failed plan)."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from erasure.free_text import PERSONAL_DATA, named_types
from erasure.locate import locate, personal_data
from erasure.model import SubjectRef
from tests.unit.estate import make_estate

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - {namespace: w, name: src.people, connection: warehouse, kind: table,
     holds_subject: {email: email},
     pii_columns: [email, full_name, house_no, country, street, nickname_gone]}
"""
ROWS = [
    "CREATE TABLE src.people (email TEXT, full_name TEXT, house_no TEXT, country TEXT, "
    "street TEXT)",
    "INSERT INTO src.people VALUES ('ann@example.com', 'Ann  Canary', '3', 'UK', '14 Wharf Road')",
    "INSERT INTO src.people VALUES ('bob@example.com', 'Bob Other', '9', 'FR', 'Quai 2')",
]


def test_the_subjects_personal_data_and_nobody_elses(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(tmp_path, CATALOG, ROWS)
    location = locate(
        catalog, warehouse, SubjectRef(type="email", value=SecretStr("ann@example.com"))
    )
    found = personal_data(warehouse, location)
    # The identifier column is an identity, not a term; '3' and 'UK' are too short to be
    # the person; the missing column is skipped; Bob's row is not read.
    assert (found.names, found.values) == (["Ann Canary"], ["14 Wharf Road"])
    assert (
        named_types(catalog, "cites Art. 17(3)(b), UK law", [], found.values, names=found.names)
        == []
    )
    assert named_types(catalog, "asked by Ms Canary", [], found.values, names=found.names) == [
        PERSONAL_DATA
    ]
