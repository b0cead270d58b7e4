"""The matching conformance corpus on a real PostgreSQL, and a probe of the SQL side.

Postgres cannot compute the canonical forms, so `erasure.matching` selects candidates with a
broader predicate and Python decides on each candidate value. The corpus
(`tests/unit/data/matching_corpus/`) must come out exactly as on SQLite: locate, relocate,
erase, verify and the ingest filter agree with Python on every stored value, in text, keyless,
integer, CHAR, bytea, "C"-collated and Turkish-collated columns. The probe feeds the
candidate predicate thousands of generated stored forms (`tests/unit/matching_variants.py`)
under several collations: it must never miss one that Python decides is the target's.
A column whose equality ignores case or accents (citext, also under a domain, or a
nondeterministic collation) is refused, since its rows cannot be selected exactly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import Catalog, load_catalog
from erasure.errors import WarehouseError
from erasure.locate import locate
from erasure.matching import Matcher, candidate_predicate
from erasure.model import SubjectRef
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate
from tests.unit.matching_corpus import (
    CorpusTable,
    Target,
    catalog_yaml,
    check_target,
    corpus_tables,
    create_tables,
    fill_tables,
    load_corpus,
)
from tests.unit.matching_families import (
    STORED_FORMS_CATALOG,
    as_corpus,
    check_family_target,
    check_stored_forms,
    families,
    stored_forms_statements,
)
from tests.unit.matching_variants import Probe, phone_probes, text_probes

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

CORPUS = load_corpus()
TARGETS = [t for corpus in CORPUS.values() for t in corpus.targets.values()]
TURKISH = "tr-x-icu"  # ICU's Turkish: lower('I') is a dotless i


@dataclass
class Estate:
    catalog: Catalog
    warehouse: Warehouse
    schema: str
    tables: list[CorpusTable]


def _has_collation(url: str, name: str) -> bool:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT 1 FROM pg_collation WHERE collname = :n")
            return conn.execute(query, {"n": name}).first() is not None
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def icu(postgres_url: str) -> bool:
    """Whether the server was built with ICU (its collations are used below)."""
    return _has_collation(postgres_url, TURKISH)


@pytest.fixture(scope="module")
def estate(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str, icu: bool
) -> Iterator[Estate]:
    schema = f"corpus_{uuid.uuid4().hex[:10]}"
    extra = [
        ("c", 'TEXT COLLATE "C"', "text"),
        ("char", "CHAR(100)", "text"),
        ("varchar", "VARCHAR(200)", "text"),
        ("bytes", "BYTEA", "bytes"),
    ]
    if icu:
        extra.append(("turkish", f'TEXT COLLATE "{TURKISH}"', "text"))
    tables = corpus_tables(CORPUS, extra)
    root: Path = tmp_path_factory.mktemp("matching-corpus-pg")
    (root / "catalog.yaml").write_text(catalog_yaml(postgres_url, schema, CORPUS, tables))
    catalog = load_catalog(root / "catalog.yaml")
    warehouse = Warehouse(catalog)
    engine = warehouse.engine("warehouse")
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    create_tables(engine, schema, tables)
    yield Estate(catalog, warehouse, schema, tables)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    warehouse.dispose()


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_postgres_locates_erases_and_verifies_exactly_pythons_rows(
    estate: Estate, target: Target
) -> None:
    fill_tables(estate.warehouse.engine("warehouse"), estate.schema, CORPUS, estate.tables)
    estate.warehouse.forget_tables()
    check_target(
        estate.catalog,
        estate.warehouse,
        estate.schema,
        CORPUS[target.id_type],
        target,
        estate.tables,
    )


def test_an_id_with_a_capital_i_is_found_in_a_turkish_collated_column(
    estate: Estate, icu: bool
) -> None:
    """Before the candidate compared under "C", lower('ID-7731') there began with a dotless i: the
    subject was found nowhere in that column while Python and verify saw four rows."""
    if not icu:
        pytest.skip("this PostgreSQL has no ICU collations")
    fill_tables(estate.warehouse.engine("warehouse"), estate.schema, CORPUS, estate.tables)
    estate.warehouse.forget_tables()
    subject = CORPUS["customer_id"].targets["id7731"].subject()
    found = locate(estate.catalog, estate.warehouse, subject)
    located = {ref.name: hit for ref, hit in found.located.items()}
    assert located[f"{estate.schema}.customer_id_turkish"].rows == 4


def _located_as_python_decides(estate: Estate, id_type: str, target: str) -> dict[str, int]:
    """Locate's row counts per table for a corpus target, and assert they are Python's."""
    fill_tables(estate.warehouse.engine("warehouse"), estate.schema, CORPUS, estate.tables)
    estate.warehouse.forget_tables()
    corpus = CORPUS[id_type]
    found = locate(estate.catalog, estate.warehouse, corpus.targets[target].subject())
    located = {ref.name: hit.rows for ref, hit in found.located.items()}
    decided = {
        f"{estate.schema}.{t.name}": n
        for t in estate.tables
        if t.id_type == id_type and (n := sum(1 for s in t.rows(corpus) if s.subject == target))
    }
    assert located == decided
    return located


def test_an_address_with_an_ideographic_full_stop_in_its_domain_is_located(
    estate: Estate,
) -> None:
    """The candidate LIKE pattern insisted on `.` in the domain, where Python reads IDNA's
    ideographic (U+3002) and halfwidth ideographic (U+FF61, NFKC: U+3002) full stops as `.`:
    SQLite found `ann.dot@example。org`, Postgres did not."""
    located = _located_as_python_decides(estate, "email", "anndot")
    assert located[f"{estate.schema}.email_text"] == 5


@pytest.mark.parametrize(("id_type", "target"), [("email", "irmak"), ("username", "istanbul")])
def test_a_turkish_locales_dotted_capital_i_is_located_as_the_plain_i(
    estate: Estate, id_type: str, target: str
) -> None:
    """`İRMAK@EXAMPLE.ORG` is `irmak@example.org` upper-cased by a Turkish locale: located in
    every column, Turkish-collated ones too; the dotless i (U+0131) is not."""
    located = _located_as_python_decides(estate, id_type, target)
    assert located[f"{estate.schema}.{id_type}_text"] >= 4


# ---------------------------------------------------------------------------------------------
# The probe: generated stored forms under several collations

# (targets, stored forms of each) per normaliser. Phones fewer: their predicate reads every
# non-ASCII value through translate() over the digits of every script (about 25 us a row).
PROBE_SIZE = {"email": (300, 10), "lower": (300, 10), "strip": (300, 10), "e164": (200, 6)}
# Share of generated forms Python must decide are the target's, so the probe is not vacuous
# (the rest are forms the generator garbles past recognition: they test nothing here).
MIN_MATCHED = {"email": 0.95, "lower": 0.95, "strip": 0.99, "e164": 0.55}


def _probes(kind: str) -> list[Probe]:
    targets, variants = PROBE_SIZE[kind]
    if kind == "e164":
        return list(phone_probes("GB", targets, variants))
    return list(text_probes(kind, targets, variants))


@pytest.mark.parametrize("kind", ["email", "lower", "strip", "e164"])
def test_the_candidate_predicate_never_misses_a_stored_form_python_decides_is_the_target(
    postgres_url: str, icu: bool, kind: str
) -> None:
    matcher = Matcher("probe", kind, "GB" if kind == "e164" else None)
    probes = _probes(kind)
    rows = [
        {"probe": i, "value": value} for i, probe in enumerate(probes) for value in probe.stored
    ]
    for n, row in enumerate(rows):
        row["id"] = n
    wanted: dict[int, set[int]] = {i: set() for i in range(len(probes))}
    for row in rows:
        if matcher.canonical(row["value"]) == probes[row["probe"]].target:
            wanted[row["probe"]].add(row["id"])
    matched = sum(len(ids) for ids in wanted.values())
    assert matched >= MIN_MATCHED[kind] * len(rows), f"the generator made {matched} matches"

    collations = ["", ' COLLATE "C"']
    if icu:
        collations += [f' COLLATE "{TURKISH}"', ' COLLATE "und-x-icu"']
    schema = f"probe_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(postgres_url, hide_parameters=True)
    misses: list[str] = []
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
            for n, collation in enumerate(collations):
                create = f'CREATE TABLE "{schema}".p{n} (id INT PRIMARY KEY, value TEXT{collation})'
                conn.execute(sa.text(create))
                conn.execute(
                    sa.text(f'INSERT INTO "{schema}".p{n} (id, value) VALUES (:id, :value)'),
                    [{"id": r["id"], "value": r["value"]} for r in rows],
                )
        with engine.connect() as conn:
            for n, collation in enumerate(collations):
                table = sa.Table(f"p{n}", sa.MetaData(), schema=schema, autoload_with=conn)
                for i, probe in enumerate(probes):
                    query = sa.select(table.c.id).where(
                        candidate_predicate(table.c.value, matcher, {probe.target})
                    )
                    missed = wanted[i] - set(conn.execute(query).scalars())
                    misses += [
                        f"{collation or 'default'}: {probe.target!a} stored as {rows[m]['value']!a}"
                        for m in sorted(missed)
                    ]
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()
    assert not misses, f"{len(misses)} missed, e.g.\n" + "\n".join(misses[:10])


# ---------------------------------------------------------------------------------------------
# Columns whose equality is not exact are refused


def _refusal_estate(tmp_path: Path, url: str, schema: str, column_sql: str) -> Warehouse:
    catalog_text = (
        "version: 1\n"
        "identifiers: {email: {normalise: email}}\n"
        f'connections: {{warehouse: {{url: "{url}"}}}}\n'
        "datasets:\n"
        f"  - {{namespace: w, name: {schema}.people, connection: warehouse, kind: table,\n"
        "     holds_subject: {email: email}}\n"
    )
    (tmp_path / "catalog.yaml").write_text(catalog_text)
    warehouse = Warehouse(load_catalog(tmp_path / "catalog.yaml"))
    with warehouse.engine("warehouse").begin() as conn:
        create = f'CREATE TABLE "{schema}".people (id INT PRIMARY KEY, email {column_sql})'
        conn.execute(sa.text(create))
        conn.execute(
            sa.text(f'INSERT INTO "{schema}".people VALUES (1, :v)'),
            {"v": "Refused.Person.7f3a@example.com"},
        )
    return warehouse


@pytest.fixture
def refusal_schema(postgres_url: str, icu: bool) -> Iterator[str]:
    """A schema with citext, a nondeterministic ICU collation and domains over both."""
    schema = f"refuse_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS citext"))
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        conn.execute(sa.text(f'CREATE DOMAIN "{schema}".email_ci AS citext'))
        conn.execute(sa.text(f'CREATE DOMAIN "{schema}".email_ci2 AS "{schema}".email_ci'))
        if icu:
            conn.execute(
                sa.text(
                    f'CREATE COLLATION "{schema}".ci (provider = icu, '
                    "locale = 'und-u-ks-level2', deterministic = false)"
                )
            )
            conn.execute(
                sa.text(f'CREATE DOMAIN "{schema}".email_nd AS text COLLATE "{schema}".ci')
            )
    try:
        yield schema
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@pytest.mark.parametrize(
    ("column_sql", "needs_icu"),
    [
        ("citext", False),
        ('"{schema}".email_ci', False),
        ('"{schema}".email_ci2', False),
        ('TEXT COLLATE "{schema}".ci', True),
        ('"{schema}".email_nd', True),
    ],
    ids=[
        "citext",
        "domain-over-citext",
        "domain-over-a-domain-over-citext",
        "nondeterministic-collation",
        "domain-with-a-nondeterministic-collation",
    ],
)
def test_a_column_whose_equality_ignores_case_or_accents_is_refused(
    tmp_path: Path,
    postgres_url: str,
    refusal_schema: str,
    icu: bool,
    column_sql: str,
    needs_icu: bool,
) -> None:
    if needs_icu and not icu:
        pytest.skip("this PostgreSQL has no ICU collations")
    warehouse = _refusal_estate(
        tmp_path, postgres_url, refusal_schema, column_sql.format(schema=refusal_schema)
    )
    subject = SubjectRef(type="email", value=SecretStr("refused.person.7f3a@example.com"))
    try:
        with pytest.raises(WarehouseError, match="citext or a nondeterministic collation") as err:
            locate(warehouse.catalog, warehouse, subject)
    finally:
        warehouse.dispose()
    assert f"{refusal_schema}.people" in str(err.value) and "'email'" in str(err.value)
    assert "refused.person" not in str(err.value).lower()


# ---------------------------------------------------------------------------------------------
# The generated families (tests/unit/matching_families.py) and declared stored forms

FAMILIES = families()
FAMILY_CORPORA = {name: as_corpus(fam) for name, fam in FAMILIES.items()}
FAMILY_TARGETS = [(name, t) for name, c in FAMILY_CORPORA.items() for t in c.targets.values()]


@pytest.fixture(scope="module")
def family_estate(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str, icu: bool
) -> Iterator[Estate]:
    schema = f"families_{uuid.uuid4().hex[:10]}"
    extra = [("c", 'TEXT COLLATE "C"', "text"), ("varchar", "VARCHAR(300)", "text")]
    if icu:
        extra.append(("turkish", f'TEXT COLLATE "{TURKISH}"', "text"))
    tables = corpus_tables(FAMILY_CORPORA, extra)
    root: Path = tmp_path_factory.mktemp("matching-families-pg")
    (root / "catalog.yaml").write_text(catalog_yaml(postgres_url, schema, FAMILY_CORPORA, tables))
    catalog = load_catalog(root / "catalog.yaml")
    warehouse = Warehouse(catalog)
    engine = warehouse.engine("warehouse")
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    create_tables(engine, schema, tables)
    yield Estate(catalog, warehouse, schema, tables)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    warehouse.dispose()


@pytest.mark.parametrize(
    ("id_type", "target"), FAMILY_TARGETS, ids=[t.id for _, t in FAMILY_TARGETS]
)
def test_postgres_matches_exact_family_forms_and_reports_near_ones(
    family_estate: Estate, id_type: str, target: Target
) -> None:
    fill_tables(
        family_estate.warehouse.engine("warehouse"),
        family_estate.schema,
        FAMILY_CORPORA,
        family_estate.tables,
    )
    family_estate.warehouse.forget_tables()
    check_family_target(
        family_estate.catalog,
        family_estate.warehouse,
        family_estate.schema,
        FAMILIES[id_type],
        FAMILY_CORPORA[id_type],
        target,
        family_estate.tables,
    )


def test_postgres_matches_each_column_by_its_declared_stored_form(
    tmp_path: Path, postgres_url: str
) -> None:
    schema = f"forms_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        catalog, warehouse = make_estate(
            tmp_path,
            STORED_FORMS_CATALOG.format(url=postgres_url, s=schema),
            stored_forms_statements(schema, integer_type="BIGINT"),
        )
        try:
            check_stored_forms(catalog, warehouse, schema)
        finally:
            warehouse.dispose()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()
