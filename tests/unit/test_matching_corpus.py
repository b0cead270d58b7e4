"""The matching conformance corpus on Python's decision and on a real SQLite warehouse.

Python's decision (`erasure.matching.Matcher.canonical`) must be what the corpus file says
for every stored value; then locate, relocate, erase, verify and the CRM ingest filter must
select exactly those rows from SQLite, where the warehouse runs the normaliser as the SQL
function `erasure_canonical`. `tests/integration/test_matching_postgres.py` runs the same
check on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from erasure.catalog import Catalog, load_catalog
from erasure.locate import normalise_subject
from erasure.warehouse import Warehouse
from tests.unit.matching_corpus import (
    CorpusTable,
    IdentifierCorpus,
    Stored,
    Target,
    catalog_yaml,
    check_ingest_filter,
    check_target,
    corpus_tables,
    create_tables,
    fill_tables,
    load_corpus,
)

CORPUS = load_corpus()
TARGETS = [t for corpus in CORPUS.values() for t in corpus.targets.values()]
STORED = [(corpus, s) for corpus in CORPUS.values() for s in corpus.stored]
SCHEMA = "corpus"
# SQLite: bytes stay BLOBs in a TEXT column; a NOCASE column groups case variants together.
TABLES = corpus_tables(CORPUS, [("nocase", "TEXT COLLATE NOCASE", "text")], text_holds="text+bytes")


def test_the_corpus_covers_every_identifier_type_with_at_least_50_values() -> None:
    assert {c.normalise for c in CORPUS.values()} == {"email", "strip", "lower", "e164"}
    for corpus in CORPUS.values():
        assert len(corpus.stored) >= 50, corpus.id_type
        assert corpus.of(None), f"{corpus.id_type}: no value that must not match"
        for target in corpus.targets.values():
            assert len(corpus.of(target)) >= 3, target.id


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_a_request_normalises_to_the_canonical_form_the_corpus_gives(target: Target) -> None:
    catalog = Catalog.model_validate(
        {
            "version": 1,
            "identifiers": {
                c.id_type: {"normalise": c.normalise, "default_region": c.default_region}
                for c in CORPUS.values()
            },
            "datasets": [],
        }
    )
    assert normalise_subject(catalog, target.subject()).value == target.canonical


@pytest.mark.parametrize(
    ("corpus", "stored"), STORED, ids=[f"{c.id_type}#{s.index}" for c, s in STORED]
)
def test_python_decides_what_the_corpus_says(corpus: IdentifierCorpus, stored: Stored) -> None:
    canonical = corpus.matcher.canonical(stored.value)
    whose = [t.name for t in corpus.targets.values() if t.canonical == canonical]
    assert whose == ([stored.subject] if stored.subject else []), stored.why


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_the_ingest_filter_drops_exactly_the_targets_values(target: Target) -> None:
    check_ingest_filter(CORPUS[target.id_type], target)


@pytest.fixture(scope="module")
def sqlite_estate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Catalog, Warehouse]]:
    root: Path = tmp_path_factory.mktemp("matching-corpus")
    (root / "catalog.yaml").write_text(catalog_yaml("sqlite:///wh.db", SCHEMA, CORPUS, TABLES))
    catalog = load_catalog(root / "catalog.yaml")
    warehouse = Warehouse(catalog)
    create_tables(warehouse.engine("warehouse"), SCHEMA, TABLES)
    yield catalog, warehouse
    warehouse.dispose()


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_sqlite_locates_erases_and_verifies_exactly_pythons_rows(
    sqlite_estate: tuple[Catalog, Warehouse], target: Target
) -> None:
    catalog, warehouse = sqlite_estate
    fill_tables(warehouse.engine("warehouse"), SCHEMA, CORPUS, TABLES)
    warehouse.forget_tables()
    check_target(catalog, warehouse, SCHEMA, CORPUS[target.id_type], target, TABLES)


def test_sqlite_keeps_bytes_as_blobs_in_a_text_column(
    sqlite_estate: tuple[Catalog, Warehouse],
) -> None:
    """The corpus's bytes values really reach the matcher as bytes, not as text."""
    _, warehouse = sqlite_estate
    fill_tables(warehouse.engine("warehouse"), SCHEMA, CORPUS, TABLES)
    table: CorpusTable = next(t for t in TABLES if t.name == "email_text")
    with warehouse.engine("warehouse").connect() as conn:
        kinds = conn.execute(
            sa.text(f"SELECT DISTINCT typeof(value) FROM {SCHEMA}.{table.name}")
        ).scalars()
        assert set(kinds) == {"text", "blob", "null"}
