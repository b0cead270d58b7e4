"""The generated stored-form families (`matching_families.py`) on Python's decision and on
SQLite, through locate, relocate, erase, verify, the ingest filter and the near-miss report;
and columns that declare their own stored form (catalog `stored_forms`).
`tests/integration/test_matching_postgres.py` runs the same on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from erasure.catalog import Catalog, StoredForm, load_catalog
from erasure.errors import CatalogError, SubjectError
from erasure.matching import Matcher, candidate_predicate
from erasure.pseudonym import normalise
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate
from tests.unit.matching_corpus import catalog_yaml, corpus_tables, create_tables, fill_tables
from tests.unit.matching_families import (
    EXACT,
    NEAR,
    OTHER,
    STORED_FORMS_CATALOG,
    as_corpus,
    check_family_target,
    check_stored_forms,
    families,
    python_disagreements,
    stored_forms_statements,
)

FAMILIES = families()
CORPORA = {name: as_corpus(fam) for name, fam in FAMILIES.items()}
TARGETS = [(name, t) for name, c in CORPORA.items() for t in c.targets.values()]
SCHEMA = "families"
TABLES = corpus_tables(CORPORA)


@pytest.mark.parametrize("id_type", sorted(FAMILIES))
def test_each_type_has_several_hundred_forms_of_every_label(id_type: str) -> None:
    fam = FAMILIES[id_type]
    assert len(fam.forms) >= 250, id_type
    for t in fam.targets:
        labels = [form.label(t.name) for form in fam.forms]
        assert labels.count(EXACT) >= 40, t.name
        assert labels.count(NEAR) >= 10, t.name
        assert labels.count(OTHER) >= 10, t.name


@pytest.mark.parametrize("id_type", sorted(FAMILIES))
def test_python_decides_every_label(id_type: str) -> None:
    wrong = python_disagreements(FAMILIES[id_type])
    assert not wrong, f"{len(wrong)} form(s):\n" + "\n".join(wrong[:40])


@pytest.fixture(scope="module")
def sqlite_estate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Catalog, Warehouse]]:
    root: Path = tmp_path_factory.mktemp("matching-families")
    (root / "catalog.yaml").write_text(catalog_yaml("sqlite:///wh.db", SCHEMA, CORPORA, TABLES))
    catalog = load_catalog(root / "catalog.yaml")
    warehouse = Warehouse(catalog)
    create_tables(warehouse.engine("warehouse"), SCHEMA, TABLES)
    yield catalog, warehouse
    warehouse.dispose()


@pytest.mark.parametrize(("id_type", "target"), TARGETS, ids=[t.id for _, t in TARGETS])
def test_sqlite_matches_exact_forms_and_reports_near_ones(
    sqlite_estate: tuple[Catalog, Warehouse], id_type: str, target: object
) -> None:
    catalog, warehouse = sqlite_estate
    fill_tables(warehouse.engine("warehouse"), SCHEMA, CORPORA, TABLES)
    warehouse.forget_tables()
    check_family_target(
        catalog,
        warehouse,
        SCHEMA,
        FAMILIES[id_type],
        CORPORA[id_type],
        target,
        TABLES,  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------------------------------------
# Family 4: stored_forms


def test_sqlite_matches_each_column_by_its_declared_stored_form(tmp_path: Path) -> None:
    catalog, warehouse = make_estate(
        tmp_path,
        STORED_FORMS_CATALOG.format(url="sqlite:///wh.db", s="crm"),
        stored_forms_statements("crm"),
    )
    check_stored_forms(catalog, warehouse, "crm")


def test_a_column_without_a_stored_form_keeps_the_types_normaliser(tmp_path: Path) -> None:
    catalog, _ = make_estate(
        tmp_path, STORED_FORMS_CATALOG.format(url="sqlite:///wh.db", s="crm"), []
    )
    tickets = catalog.by_name("crm.tickets")
    orders = catalog.by_name("crm.orders")
    assert Matcher.for_column(catalog, tickets, "customer", "customer_id") == Matcher.of(
        catalog, "customer_id"
    )
    lower = Matcher.for_column(catalog, orders, "customer_id", "customer_id")
    assert lower.matches({"C0001"})("c0001") and not lower.matches({"C0001"})("c0002")
    legacy = Matcher.for_column(catalog, orders, "legacy_no", "customer_id")
    assert legacy.matches({"C0001"})(1) and legacy.matches({"C0001"})("0001")
    assert not legacy.matches({"D0001"})(1)  # another prefix: not this column's customers
    assert legacy.canonical(1) is None  # lossy: never expands the identity
    both = Matcher(
        "customer_id", "strip", form=StoredForm(normaliser="lower", drop_prefix="C", prefix="X-")
    )
    assert both.matches({"C0001"})("x-0001") and not both.matches({"C0001"})("x-0002")
    assert both.target_key("D0001") is None


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ("{case: lowr}", "Input should be 'as_is', 'upper' or 'lower'"),
        ("{integer: yes please}", "valid boolean"),
        ("{prefix: ''}", "at least 1 character"),
        ("{colour: red}", "unknown field"),
        ("{normaliser: e164, integer: true}", "cannot also declare integer, case or drop_prefix"),
    ],
)
def test_a_bad_stored_form_is_refused_saying_what_to_fix(
    tmp_path: Path, form: str, message: str
) -> None:
    text = STORED_FORMS_CATALOG.format(url="sqlite:///wh.db", s="crm").replace(
        "shouted: {case: upper}", f"shouted: {form}"
    )
    (tmp_path / "catalog.yaml").write_text(text)
    with pytest.raises(CatalogError, match="stored_forms") as err:
        load_catalog(tmp_path / "catalog.yaml")
    assert message in str(err.value)


def test_a_stored_form_must_name_a_subject_column(tmp_path: Path) -> None:
    text = STORED_FORMS_CATALOG.format(url="sqlite:///wh.db", s="crm").replace(
        "shouted: {case: upper}", "shouted: {case: upper}\n      notes: {case: lower}"
    )
    (tmp_path / "catalog.yaml").write_text(text)
    with pytest.raises(CatalogError, match="'notes', which holds_subject does not list"):
        load_catalog(tmp_path / "catalog.yaml")


def test_an_email_column_cannot_declare_a_case_it_already_folds(tmp_path: Path) -> None:
    text = """\
version: 1
identifiers: {email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.people, connection: warehouse, kind: table,
     holds_subject: {email: mail}, stored_forms: {mail: {case: upper}}}
"""
    (tmp_path / "catalog.yaml").write_text(text)
    with pytest.raises(CatalogError, match=r"stored_forms\.mail': email values are read"):
        load_catalog(tmp_path / "catalog.yaml")


# ---------------------------------------------------------------------------------------------
# Security: no raw identifier in errors or in SQL text


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("e164", "+44 20 7946 0958 ext. (ask for 4471)"),
        ("email", "ann.7f3a@example.com, bob.7f3a@example.com"),
        ("email", '"Ann 7f3a" <ann.7f3a@example.com> <bob.7f3a@example.com>'),
    ],
)
def test_a_value_that_cannot_be_read_is_refused_without_echoing_it(kind: str, value: str) -> None:
    with pytest.raises(SubjectError) as err:
        normalise(kind, value, default_region="GB")
    assert "7f3a" not in str(err.value) and "4471" not in str(err.value)
    assert "0958" not in str(err.value)


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        ("email", "zoë.7f3a@bücher.example"),
        ("strip", "C-7F3A-0001"),
        ("e164", "+442079467731;ext=99"),
    ],
)
def test_the_candidate_predicate_binds_every_subject_value(kind: str, target: str) -> None:
    table = sa.Table("t", sa.MetaData(), sa.Column("v", sa.Text))
    form = StoredForm(prefix="CUST-", case="lower") if kind == "strip" else None
    matcher = Matcher("x", kind, "GB" if kind == "e164" else None, form)
    sql = str(
        candidate_predicate(table.c.v, matcher, {target}).compile(dialect=postgresql.dialect())
    )
    for fragment in ("7f3a", "7F3A", "7731", "b\u00fccher", "'%"):
        assert fragment not in sql, fragment


def test_a_derived_copy_is_recounted_in_every_form_its_sources_store(tmp_path: Path) -> None:
    """Verify's recount of a rebuilt artefact: its `customer_id` may be a copy of the orders'
    lower-cased column, so c0001 counts as the subject there, as C0001 does."""
    catalog, _ = make_estate(
        tmp_path, STORED_FORMS_CATALOG.format(url="sqlite:///wh.db", s="crm"), []
    )
    copied = Matcher.any_form_of(catalog, "customer_id", "customer_id")({"C0001"})
    assert copied("C0001") and copied("c0001") and not copied("c0002")
    legacy = Matcher.any_form_of(catalog, "legacy_no", "customer_id")({"C0001"})
    assert legacy(1) and not legacy(2)
