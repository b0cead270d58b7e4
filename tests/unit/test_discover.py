"""Where subjects live (`erasure.discover`, `erasure catalog discover`): columns that look like
identifiers of the catalog's types are proposed with counts for a person to accept, and no
sampled value reaches the report, its YAML, its JSON, a log or an error.

The stored forms come from the standards behind each normaliser: RFC 5322 addresses (display
names, mixed case, plus-addressing, quoted local parts, comments, `mailto:`, IDN and punycode
domains, the root's trailing dot), E.164 numbers as E.123 and RFC 3966 write them (national
with a trunk 0, international with + or 00, brackets, dots, an extension, `tel:`), and opaque
customer ids that only a declared column can vouch for. The estate is shared with the
PostgreSQL test (tests/integration/test_discover_postgres.py).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy.engine import Connection, Engine

from erasure.catalog import load_catalog
from erasure.cli import main
from erasure.discover import (
    MAX_SAMPLE_ROWS,
    Discovery,
    Finding,
    NamedBy,
    Status,
    check_undeclared_holders,
    discover,
    render_discovery,
    undeclared_holders,
)
from erasure.errors import CatalogError, WarehouseError
from erasure.model import DatasetRef
from erasure.warehouse import Warehouse

# One subject whose values must never be repeated: in any form, whole or in part.
CANARY_EMAIL = "zq-canary-7f3a9@example.org"
CANARY_PHONE = "+44 7700 900977"
CANARY_ID = "ZQ7F3A9"
CANARY_PARTS = ("zq-canary", "7f3a9", "ZQ7F3A9", "7700900977", "7700 900977", "900977")

CATALOG = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip, one_per_person: true}
  phone: {normalise: e164, default_region: GB}
connections:
  warehouse: {url: "URL"}
datasets:
  - namespace: warehouse
    name: crm.customers
    connection: warehouse
    kind: table
    holds_subject: {email: email, customer_id: id, phone: phone}
  - namespace: warehouse
    name: crm.orders
    connection: warehouse
    kind: table
    holds_subject: {customer_id: customer_id}
  - namespace: warehouse
    name: crm.mislabelled
    connection: warehouse
    kind: table
    holds_subject: {customer_id: account}
  - namespace: warehouse
    name: sales.contacts
    connection: warehouse
    kind: table
    owner: sales
defaults:
  - match: {namespace: warehouse, name: "legacy.*"}
    kind: table
    connection: warehouse
    rebuild: {dag_id: rebuild_legacy}
    owner: legacy-team
  - match: {namespace: warehouse, name: "sales.name_*"}
    kind: table
    connection: warehouse
    owner: sales
"""

# Addresses as RFC 5322 lets a system store them; each reads as the address it gives.
ADDRESS_FORMS = (
    '"Ann Example {n}" <Ann.Example{n}@Example.COM>',
    "bob+news{n}@example.org",
    "<carol{n}@xn--bcher-kva.example>",
    "dave{n}@bücher.example",
    "mailto:eve{n}@example.net",
    "Frank{n}@Example.co.uk.",
    "grace{n}@example.com (work)",
    '"henry {n}"@example.com',
)
# Numbers as E.123 and RFC 3966 write them, national (trunk 0) and international.
PHONE_FORMS = (
    "07700 900{n:03d}",
    "+44 7700 900{n:03d}",
    "(020) 7946 0{n:03d}",
    "+44 (0)20 7946 0{n:03d}",
    "0044 20 7946 0{n:03d}",
    "tel:+44-20-7946-0{n:03d}",
    "+1 415-555-0{n:03d}",
    "020.7946.0{n:03d} ext. 12",
)
JUNK = ("n/a", "unknown", "opted out", "-", "none given")
CANARY_ROW = 13
CONTACTS = 40
FREE_TEXT_ADDRESSES = (5, 10, 15)  # rows of the notes column whose whole value is an address

TABLES = {
    "crm.customers": "id VARCHAR(12) PRIMARY KEY, email VARCHAR(200), phone VARCHAR(40), "
    "full_name VARCHAR(120), region VARCHAR(12)",
    "crm.orders": "id INTEGER PRIMARY KEY, customer_id VARCHAR(12), amount INTEGER, "
    "ordered_on VARCHAR(10)",
    "crm.mislabelled": "id INTEGER PRIMARY KEY, account VARCHAR(200)",
    "sales.contacts": "id INTEGER PRIMARY KEY, contact VARCHAR(200), mobile VARCHAR(40), "
    "ref VARCHAR(12), email VARCHAR(40), notes TEXT, email_verified VARCHAR(3), "
    "created_epoch BIGINT, order_no VARCHAR(12), ordered_on VARCHAR(10)",
    # Empty: judged by name alone.
    "sales.name_probe": ", ".join(
        f"{name} VARCHAR(40)"
        for name in (
            "email",
            "e_mail",
            '"EmailAddress"',
            '"contactEmail"',
            "mail",
            "work_email",
            "mobile_number",
            "msisdn",
            "tel_no",
            "telephone",
            "customer_id",
            "billing_customer_id",
            '"customerId"',
            "email_verified",
            "email_hash",
            "phone_type",
            "is_mobile",
            "email_domain",
            "mail_sent_at",
            "telemetry",
            "hotel",
            "id",
            "customer_name",
        )
    ),
    "legacy.people": "id INTEGER PRIMARY KEY, e_mail VARCHAR(200), tel VARCHAR(40), "
    "customer_no VARCHAR(12), remarks TEXT",
    "legacy.customers": "id VARCHAR(12) PRIMARY KEY",
    "signups": 'id INTEGER PRIMARY KEY, "EmailAddress" VARCHAR(200)',
}
NAMED = {
    "email": ("email", NamedBy.DECLARED_COLUMN),
    "e_mail": ("email", NamedBy.WORDS),
    "EmailAddress": ("email", NamedBy.TYPE_NAME),
    "contactEmail": ("email", NamedBy.TYPE_NAME),
    "mail": ("email", NamedBy.WORDS),
    "work_email": ("email", NamedBy.TYPE_NAME),
    "mobile_number": ("phone", NamedBy.WORDS),
    "msisdn": ("phone", NamedBy.WORDS),
    "tel_no": ("phone", NamedBy.WORDS),
    "telephone": ("phone", NamedBy.WORDS),
    "customer_id": ("customer_id", NamedBy.DECLARED_COLUMN),
    "billing_customer_id": ("customer_id", NamedBy.TYPE_NAME),
    "customerId": ("customer_id", NamedBy.DECLARED_COLUMN),
}


def customer_ids() -> list[str]:
    return [CANARY_ID if n == CANARY_ROW else f"C{n:04d}" for n in range(1, CONTACTS + 1)]


def rows() -> dict[str, list[dict[str, Any]]]:
    """The estate's rows: deterministic, the canary subject in crm.customers and contacts."""
    ids = customer_ids()
    customers = [
        {
            "id": cid,
            "email": CANARY_EMAIL if cid == CANARY_ID else f"Person.{n}@Example.com",
            "phone": CANARY_PHONE if cid == CANARY_ID else f"+44 7700 900{n:03d}",
            "full_name": f"Person Number{n}",
            "region": ("north", "south", "east", "west")[n % 4],
        }
        for n, cid in enumerate(ids, start=1)
    ]
    contacts = []
    for n in range(1, CONTACTS + 1):
        canary = n == CANARY_ROW
        contacts.append(
            {
                "id": n,
                "contact": f'"Zq Canary" <{CANARY_EMAIL}>'
                if canary
                else ADDRESS_FORMS[n % len(ADDRESS_FORMS)].format(n=n),
                "mobile": CANARY_PHONE if canary else PHONE_FORMS[n % len(PHONE_FORMS)].format(n=n),
                "ref": ids[(n * 7) % CONTACTS],
                "email": JUNK[n % len(JUNK)],
                "notes": f"person.{n}@example.com"
                if n in FREE_TEXT_ADDRESSES
                else f"Called about delivery {n}, will ring back",
                "email_verified": ("yes", "no")[n % 2],
                "created_epoch": 1_700_000_000 + n * 86_400,
                "order_no": str(100_000 + n * 37),
                "ordered_on": f"2026-10-{n % 28 + 1:02d}",
            }
        )
    return {
        "crm.customers": customers,
        "crm.orders": [
            {
                "id": n,
                "customer_id": ids[n % CONTACTS],
                "amount": 10 + n,
                "ordered_on": f"2026-11-{n % 28 + 1:02d}",
            }
            for n in range(1, 81)
        ],
        "crm.mislabelled": [{"id": n, "account": f"acct{n}@example.com"} for n in range(1, 11)],
        "sales.contacts": contacts,
        "legacy.people": [
            {
                "id": n,
                "e_mail": f"legacy{n}@example.net",
                "tel": f"0113 496 0{n:03d}",
                "customer_no": f"C{n:04d}",
                "remarks": f"migrated from the old shop, batch {n % 3}",
            }
            for n in range(1, 31)
        ],
        "legacy.customers": [{"id": f"C{n:04d}"} for n in range(1, 6)],
        "signups": [{"id": n, "EmailAddress": f"signup{n}@example.com"} for n in range(1, 11)],
    }


def fill_estate(conn: Connection, *, public: str | None = None) -> None:
    """Create and fill the estate's tables (their schemas exist); the bare-named table goes
    into `public` when given (PostgreSQL's default schema)."""
    for name, columns in TABLES.items():
        conn.execute(sa.text(f"CREATE TABLE {_qualified(name, public)} ({columns})"))
    for name, values in rows().items():
        keys = list(values[0])
        quoted = ", ".join(f'"{k}"' for k in keys)
        binds = ", ".join(f":{k}" for k in keys)
        conn.execute(
            sa.text(f"INSERT INTO {_qualified(name, public)} ({quoted}) VALUES ({binds})"), values
        )


def _qualified(name: str, public: str | None) -> str:
    return f"{public}.{name}" if public and "." not in name else name


def sqlite_estate(root: Path) -> Path:
    """The estate on SQLite: the catalog's schemas beside warehouse.db, and a `legacy` schema
    file the catalog does not name."""
    root.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(f"sqlite:///{root / 'warehouse.db'}")

    @sa.event.listens_for(engine, "connect")
    def _attach(dbapi_conn: Any, _record: Any) -> None:
        for schema in ("crm", "sales", "legacy"):
            dbapi_conn.execute(f"ATTACH DATABASE '{root / f'warehouse.{schema}.db'}' AS {schema}")

    with engine.begin() as conn:
        fill_estate(conn)
    engine.dispose()
    path = root / "catalog.yaml"
    path.write_text(CATALOG.replace("URL", "sqlite:///warehouse.db"))
    return path


def find(report: Discovery | list[Finding], dataset: str, column: str) -> list[Finding]:
    findings = report.findings if isinstance(report, Discovery) else report
    return [f for f in findings if f.dataset.name == dataset and f.column == column]


def one(report: Discovery | list[Finding], dataset: str, column: str) -> Finding:
    found = find(report, dataset, column)
    assert len(found) == 1, found
    return found[0]


def assert_no_canary(*texts: str) -> None:
    for text in texts:
        for part in CANARY_PARTS:
            assert part.lower() not in text.lower(), f"a sampled value leaked: {part!r}"


@pytest.fixture(scope="module")
def estate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sqlite_estate(tmp_path_factory.mktemp("discover"))


@pytest.fixture(scope="module")
def report(estate: Path) -> Iterator[Discovery]:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    try:
        yield discover(catalog, warehouse, "warehouse")
    finally:
        warehouse.dispose()


def check_estate_findings(report: Discovery, public: str = "") -> None:
    """What a person must be shown about the estate, on either dialect."""
    signups = f"{public}.signups" if public else "signups"
    contact = one(report, "sales.contacts", "contact")
    assert (contact.identifier_type, contact.status) == ("email", Status.PROPOSED)
    assert (contact.values_read, contact.values_sampled) == (CONTACTS, CONTACTS)
    assert contact.named_by is None  # `contact` says nothing: the values do
    assert contact.evidence == f"values: {CONTACTS} of {CONTACTS} sampled values read as email"

    mobile = one(report, "sales.contacts", "mobile")
    assert (mobile.identifier_type, mobile.status, mobile.named_by) == (
        "phone",
        Status.PROPOSED,
        NamedBy.WORDS,
    )
    assert mobile.values_read == CONTACTS

    # Ids of the declared key, under a name that does not say whose: shown, never proposed.
    ref = one(report, "sales.contacts", "ref")
    assert (ref.identifier_type, ref.status) == ("customer_id", Status.VALUES_ONLY)
    assert (ref.found_in, ref.ids_found, ref.ids_looked_up) == ("crm.customers.id", 40, 40)
    assert ref.named_by is None
    assert ref.evidence == (
        "values: 40 of 40 distinct sampled values found in crm.customers.id (a key); the name "
        "does not say whose"
    )

    # Named like an address, holding none: shown, by name only, with the counts that say so.
    junk = one(report, "sales.contacts", "email")
    assert (junk.identifier_type, junk.status) == ("email", Status.NAME_ONLY)
    assert junk.evidence == (
        f"name (like crm.customers.email, declared email); values: 0 of {CONTACTS} sampled "
        "values read as email"
    )

    # Free text where a few values are addresses: below the share, seen but not proposed.
    notes = one(report, "sales.contacts", "notes")
    assert (notes.identifier_type, notes.status) == ("email", Status.BELOW_SHARE)
    assert (notes.values_read, notes.values_sampled) == (len(FREE_TEXT_ADDRESSES), CONTACTS)

    for column in ("email_verified", "created_epoch", "order_no", "ordered_on"):
        assert find(report, "sales.contacts", column) == [], column  # not phones, not ids
    for column in ("full_name", "region"):
        assert find(report, "crm.customers", column) == []

    # Other schemas, named or not in the catalog.
    legacy = [f for f in report.findings if f.dataset.name == "legacy.people"]
    assert {(f.column, f.identifier_type, f.status) for f in legacy} == {
        ("e_mail", "email", Status.PROPOSED),
        ("tel", "phone", Status.PROPOSED),
        ("customer_no", "customer_id", Status.PROPOSED),
    }
    customer_no = one(report, "legacy.people", "customer_no")
    assert (customer_no.named_by, customer_no.found_in) == (NamedBy.TYPE_NAME, "crm.customers.id")
    legacy_id = one(report, "legacy.customers", "id")
    assert legacy_id.named_like == "crm.customers.id, declared customer_id"
    assert one(report, signups, "EmailAddress").status is Status.PROPOSED

    # Already declared: marked, never proposed; declared as another type: said so.
    declared = {(f.dataset.name, f.column) for f in report.having(Status.DECLARED)}
    assert declared == {
        ("crm.customers", "email"),
        ("crm.customers", "id"),
        ("crm.customers", "phone"),
        ("crm.orders", "customer_id"),
        ("crm.mislabelled", "account"),
    }
    other = report.having(Status.DECLARED_OTHER)
    assert [(f.dataset.name, f.column, f.identifier_type) for f in other] == [
        ("crm.mislabelled", "account", "email")
    ]
    assert other[0].evidence.endswith("declared as customer_id")


def test_discovery_proposes_by_name_and_by_values_and_shows_what_it_does_not(
    report: Discovery,
) -> None:
    check_estate_findings(report)
    assert report.schemas == ["main", "crm", "sales", "legacy"]  # legacy: a file beside it


def test_a_name_counts_when_it_names_the_identifier_not_a_fact_about_it(
    report: Discovery,
) -> None:
    probe = {f.column: f for f in report.findings if f.dataset.name == "sales.name_probe"}
    assert {c: (f.identifier_type, f.named_by) for c, f in probe.items()} == NAMED
    for f in probe.values():
        assert f.status is Status.PROPOSED  # no rows: nothing says otherwise
        assert f.evidence.endswith("no values to check (no rows sampled)")
    # `id` is a customer's id only in a table of customers.
    assert find(report, "legacy.people", "id") == []


@pytest.mark.parametrize("form", range(len(ADDRESS_FORMS)))
def test_every_stored_form_of_an_address_reads_as_one(tmp_path: Path, form: int) -> None:
    report = _one_column(tmp_path, "stored", [ADDRESS_FORMS[form].format(n=n) for n in range(9)])
    found = one(report, "inbox.messages", "stored")
    assert (found.identifier_type, found.values_read) == ("email", 9)


@pytest.mark.parametrize("form", range(len(PHONE_FORMS)))
def test_every_written_form_of_a_number_reads_as_one(tmp_path: Path, form: int) -> None:
    report = _one_column(tmp_path, "stored", [PHONE_FORMS[form].format(n=n) for n in range(9)])
    found = one(report, "inbox.messages", "stored")
    assert (found.identifier_type, found.values_read) == ("phone", 9)


@pytest.mark.parametrize(
    "values",
    [
        [str(1_700_000_000 + n * 86_400) for n in range(9)],  # timestamps
        [str(2_079_460_000 + n) for n in range(9)],  # a London number without its trunk 0
        [f"2026-1{n % 3}-1{n}" for n in range(9)],  # dates
        [f"{100 + n}.{n}5" for n in range(9)],  # amounts
    ],
    ids=["timestamps", "bare-digits", "dates", "amounts"],
)
def test_numbers_that_are_not_written_as_phone_numbers_are_not_proposed(
    tmp_path: Path, values: list[str]
) -> None:
    # The e164 normaliser reads each as a possible number: the form it is written in decides.
    assert find(_one_column(tmp_path, "stored", values), "inbox.messages", "stored") == []


def test_an_opaque_ids_values_are_shown_where_a_declared_key_holds_them_never_proposed(
    tmp_path: Path,
) -> None:
    # Codes that could be customer ids but are no customer's: nothing to show.
    report = _one_column(tmp_path, "code", [f"SKU-{n:04d}" for n in range(20)])
    assert find(report, "inbox.messages", "code") == []
    report = _one_column(tmp_path / "2", "code", ["C0001", "C0002", "C0003", "SKU-1"])
    found = one(report, "inbox.messages", "code")
    assert (found.identifier_type, found.ids_found, found.ids_looked_up) == ("customer_id", 3, 4)
    assert found.status is Status.VALUES_ONLY  # `code` does not say whose: not in the YAML
    assert yaml.safe_load(report.catalog_yaml) is None  # comments only
    assert "# inbox.messages:\n#   # not added: customer_id: [code]  (values: 3 of 4 distinct" in (
        report.catalog_yaml
    )


def _one_column(root: Path, column: str, values: list[str]) -> Discovery:
    """Discover over a catalog with customers and one uncatalogued table of `values`."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "catalog.yaml"
    path.write_text(
        CATALOG.replace("URL", "sqlite:///warehouse.db").split("  - namespace: warehouse\n")[0]
        + "  - {namespace: warehouse, name: crm.customers, connection: warehouse, kind: table,\n"
        "     holds_subject: {customer_id: id}}\n"
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.customers (id VARCHAR(12) PRIMARY KEY)"))
        conn.execute(
            sa.text("INSERT INTO crm.customers VALUES (:v)"), [{"v": f"C{n:04d}"} for n in range(9)]
        )
    with sqlite3.connect(root / "warehouse.inbox.db") as db:
        db.execute(f"CREATE TABLE messages ({column} TEXT)")
        db.executemany("INSERT INTO messages VALUES (?)", [(v,) for v in values])
    try:
        return discover(catalog, warehouse, "warehouse", schemas=["inbox"])
    finally:
        warehouse.dispose()


def test_the_cli_report_json_and_yaml_never_hold_a_sampled_value(
    estate: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="erasure")
    caplog.set_level(logging.INFO, logger="sqlalchemy")
    args = ["catalog", "discover", "--catalog", str(estate), "--connection", "warehouse"]
    assert main(args) == 0
    text, err = capsys.readouterr()
    assert main([*args, "--json"]) == 0
    as_json, err_json = capsys.readouterr()
    assert_no_canary(text, err, as_json, err_json, caplog.text)
    doc = json.loads(as_json)
    assert doc["connection"] == "warehouse" and doc["sample_rows"] == 1000
    assert {"dataset", "column", "identifier_type", "status", "evidence"} <= set(doc["findings"][0])
    assert "Proposed: not in the catalog's holds_subject" in text
    assert re.search(r"\n    contact +email +values: 40 of 40 sampled values read as email", text)
    assert "  sales.contacts  (in the catalog: table)" in text
    assert "  legacy.people  (no entry of its own; catalog default #1" in text
    assert "Some values read as identifiers, below the share (not proposed):" in text
    assert "Already declared: 5 column(s): crm.customers: email (email), id" in text


def test_the_yaml_pastes_into_the_catalog_and_then_reads_as_declared(
    estate: Path, report: Discovery, tmp_path: Path
) -> None:
    proposed = yaml.safe_load(report.catalog_yaml)["datasets"]
    by_name = {entry["name"]: entry for entry in proposed}
    assert by_name["legacy.people"] == {
        "namespace": "warehouse",
        "name": "legacy.people",
        "connection": "warehouse",
        "kind": "table",
        # How the default keeps its rows comes along; its rebuild does not, and is said so.
        "owner": "legacy-team",
        "holds_subject": {"customer_id": ["customer_no"], "email": ["e_mail"], "phone": ["tel"]},
    }
    assert "    # catalog default #1 " in report.catalog_yaml
    assert "this entry replaces that description and has no rebuild" in report.catalog_yaml
    assert by_name["signups"]["holds_subject"] == {"email": ["EmailAddress"]}
    assert "sales.contacts" not in by_name  # catalogued: its holds_subject is given to merge
    merge = re.search(r"^# sales\.contacts:\n#   (holds_subject: .*)$", report.catalog_yaml, re.M)
    assert merge is not None
    assert "# not added: email: [email]  (name (like crm.customers.email, declared email)" in (
        report.catalog_yaml
    )
    holds = yaml.safe_load(merge.group(1))["holds_subject"]
    assert holds == {"email": ["contact"], "phone": ["mobile"]}  # `ref`: values only
    assert "#   # not added: customer_id: [ref]  (values: 40 of 40 distinct" in report.catalog_yaml

    # Paste: the new entries under datasets, the merged holds_subject into sales.contacts.
    raw = yaml.safe_load(estate.read_text().replace("sqlite:///", f"sqlite:///{estate.parent}/"))
    for entry in raw["datasets"]:
        if entry["name"] == "sales.contacts":
            entry["holds_subject"] = holds
    raw["datasets"] += proposed
    pasted = tmp_path / "catalog.yaml"
    pasted.write_text(yaml.safe_dump(raw, sort_keys=False))
    catalog = load_catalog(pasted)
    warehouse = Warehouse(catalog)
    try:
        again = discover(catalog, warehouse, "warehouse")
    finally:
        warehouse.dispose()
    for f in report.having(Status.PROPOSED):
        assert one(again, f.dataset.name, f.column).status is Status.DECLARED, f
    assert "datasets:" not in again.catalog_yaml  # left: comments on what was not added


def test_sampling_is_bounded_one_query_per_table_its_limit_a_parameter(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "version: 1\n"
        "identifiers: {email: {normalise: email}, customer_id: {normalise: strip}}\n"
        'connections: {warehouse: {url: "sqlite:///warehouse.db"}}\n'
        "datasets:\n"
        "  - {namespace: warehouse, name: crm.customers, connection: warehouse, kind: table,\n"
        "     holds_subject: {customer_id: id}}\n"
        "  - {namespace: warehouse, name: crm.orders, connection: warehouse, kind: table,\n"
        "     holds_subject: {customer_id: customer_id}}\n"
        "  - {namespace: warehouse, name: web.clicks, connection: warehouse, kind: table}\n"
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.customers (id VARCHAR(12) PRIMARY KEY)"))
        conn.execute(sa.text("CREATE TABLE crm.orders (id INTEGER, customer_id VARCHAR(12))"))
        conn.execute(sa.text("CREATE TABLE web.clicks (id INTEGER, user_email TEXT, visitor TEXT)"))
        conn.execute(
            sa.text(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) "
                "INSERT INTO web.clicks SELECT i, 'user' || i || '@example.com', 'V' || i FROM n"
            )
        )
    warehouse.dispose()
    with seen_statements() as statements:
        report = discover(catalog, warehouse, "warehouse", sample_rows=700)
    clicks = [(s, p) for s, p in statements if "clicks" in s and not s.startswith("PRAGMA")]
    assert len(clicks) == 1  # one sample of the table, nothing else read from it
    sql, parameters = clicks[0]
    # Each text value is cut in SQL: a 5 MB value costs 321 characters, not 5 MB.
    assert "substr(CAST(web.clicks.user_email AS TEXT), ?, ?)" in sql
    assert sql.endswith("LIMIT ? OFFSET ?") and tuple(parameters)[-2:] == (700, 0)
    assert set(tuple(parameters)[:-2]) == {1, 321}
    found = one(report, "web.clicks", "user_email")
    assert (found.rows_sampled, found.values_sampled, found.values_read) == (700, 700, 700)
    # The ids are looked up in the declared key only (crm.orders.customer_id is no key), in
    # bounded IN lists of bound values; the integer ids never (no evidence).
    lookups = [(s, p) for s, p in statements if "IN (" in s]
    assert lookups and all("crm.customers" in s for s, _ in lookups)
    assert sum(len(p) for _, p in lookups) == 700  # the distinct visitors sampled, no more
    assert find(report, "web.clicks", "visitor") == []  # no customer's id


@contextmanager
def seen_statements() -> Iterator[list[tuple[str, Any]]]:
    """The statements every engine runs meanwhile (discovery opens its own connections)."""
    statements: list[tuple[str, Any]] = []

    def _seen(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((" ".join(statement.split()), parameters))

    sa.event.listen(Engine, "before_cursor_execute", _seen)
    try:
        yield statements
    finally:
        sa.event.remove(Engine, "before_cursor_execute", _seen)


def test_the_sample_size_has_a_hard_maximum(
    estate: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["catalog", "discover", "--catalog", str(estate), "--connection", "warehouse"]
    for bad in ("0", str(MAX_SAMPLE_ROWS + 1), "ten"):
        with pytest.raises(SystemExit) as exited:
            main([*base, "--sample", bad])
        assert exited.value.code == 2
        assert "must be a whole number from 1 to 100,000" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--min-share", "1.5"])
    assert "must be a number above 0 and at most 1" in capsys.readouterr().err
    catalog = load_catalog(estate)
    with pytest.raises(ValueError, match="sample_rows"):
        discover(catalog, Warehouse(catalog), "warehouse", sample_rows=MAX_SAMPLE_ROWS + 1)


def test_min_share_decides_what_values_alone_propose(estate: Path) -> None:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    try:
        low = discover(catalog, warehouse, "warehouse", schemas=["sales"], min_share=0.05)
    finally:
        warehouse.dispose()
    notes = one(low, "sales.contacts", "notes")
    assert notes.status is Status.PROPOSED
    assert notes.evidence == f"values: 3 of {CONTACTS} sampled values read as email"


def test_schemas_can_be_chosen_and_left_out(estate: Path) -> None:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    try:
        only = discover(catalog, warehouse, "warehouse", schemas=["legacy"])
        without = discover(catalog, warehouse, "warehouse", exclude_schemas=["legacy", "sales"])
        with pytest.raises(WarehouseError) as missing:
            discover(catalog, warehouse, "warehouse", schemas=["nosuch"])
    finally:
        warehouse.dispose()
    assert only.schemas == ["legacy"]
    assert {f.dataset.name for f in only.findings} == {"legacy.people", "legacy.customers"}
    assert without.schemas == ["main", "crm"]
    assert not [f for f in without.findings if f.dataset.name.startswith(("legacy.", "sales."))]
    assert str(missing.value) == (
        "connection 'warehouse' has no schema 'nosuch'; its schemas: main, crm, sales, legacy"
    )


@pytest.mark.parametrize(
    ("catalog_text", "connection", "message"),
    [
        (
            None,
            "nope",
            "erasure: connection 'nope' is not declared under 'connections'; declared: "
            "['warehouse']\n",
        ),
        (
            'version: 1\nidentifiers: {email: {normalise: email}}\nconnections: {w: {url: "sqlite'
            ':///missing.db"}}\ndatasets: []\n',
            "w",
            "erasure: connection 'w': the SQLite file {dir}/missing.db does not exist; check the "
            "connection's url in the catalog (a relative path is relative to the catalog file)\n",
        ),
        (
            "version: 1\nidentifiers: {email: {normalise: email}}\nconnections: {w: "
            "{airflow_conn_id: dwh}}\ndatasets: []\n",
            "w",
            "erasure: connection 'w' uses airflow_conn_id 'dwh': resolve it through Airflow, or "
            "give a 'url' to use it outside Airflow\n",
        ),
        (
            'version: 1\nidentifiers: {email: {normalise: email}}\nconnections: {w: {url: "mysql'
            ':///x"}}\ndatasets: []\n',
            "w",
            "erasure: connection 'w': the mysql dialect cannot be matched exactly (its text "
            "comparison may ignore case, accents or trailing spaces); the subject can be located "
            "on sqlite and postgresql only\n",
        ),
    ],
    ids=["unknown-connection", "missing-sqlite-file", "airflow-only", "unsupported-dialect"],
)
def test_bad_input_says_what_to_fix_on_stderr_with_exit_2(
    estate: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    catalog_text: str | None,
    connection: str,
    message: str,
) -> None:
    path = estate
    if catalog_text is not None:
        path = tmp_path / "catalog.yaml"
        path.write_text(catalog_text)
    code = main(["catalog", "discover", "--catalog", str(path), "--connection", connection])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == message.replace("{dir}", str(tmp_path))
    assert not (tmp_path / "missing.db").exists()  # not created by looking


def test_text_that_is_not_utf8_is_read_and_never_quoted(tmp_path: Path) -> None:
    # sqlite3 refuses such a row with a message that quotes it: discovery reads it with
    # replacement characters, the sample goes on, and nothing of it is repeated.
    path = tmp_path / "catalog.yaml"
    path.write_text(
        'version: 1\nidentifiers: {email: {normalise: email}}\nconnections: {w: {url: "sqlite:'
        '///warehouse.db"}}\ndatasets:\n'
        "  - {namespace: w, name: customers, connection: w, kind: table,"
        " holds_subject: {email: email}}\n"
        "  - {namespace: w, name: crm.notes, connection: w, kind: table}\n"
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    with warehouse.engine("w").begin() as conn:
        conn.execute(sa.text("CREATE TABLE customers (email TEXT)"))
        conn.execute(sa.text("CREATE TABLE crm.notes (id INT, contact TEXT)"))
        broken = (CANARY_EMAIL.encode() + b"\xff\xfe").hex()
        conn.execute(sa.text(f"INSERT INTO crm.notes VALUES (1, CAST(X'{broken}' AS TEXT))"))
        conn.execute(sa.text("INSERT INTO crm.notes VALUES (2, 'ann@example.com')"))
    warehouse.dispose()
    report = discover(catalog, warehouse, "w")
    sampled = undeclared_holders(catalog, warehouse, [DatasetRef("w", "crm.notes")], sample_rows=10)
    assert report.notes == []
    found = one(report, "crm.notes", "contact")
    assert (found.status, found.rows_sampled, found.values_read) == (Status.PROPOSED, 2, 1)
    assert [(f.column, f.values_read) for f in sampled] == [("contact", 1)]
    assert_no_canary(
        report.model_dump_json(),
        render_discovery(report),
        json.dumps([f.model_dump(mode="json") for f in sampled]),
    )


def test_undeclared_holders_by_name_reads_no_rows(estate: Path) -> None:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    statements: list[str] = []
    sa.event.listen(
        warehouse.engine("warehouse"),
        "before_cursor_execute",
        lambda _c, _cur, statement, *_: statements.append(statement),
    )
    refs = [
        DatasetRef("warehouse", name)
        for name in ("crm.customers", "sales.contacts", "sales.name_probe", "nowhere.known")
    ]
    try:
        found = undeclared_holders(catalog, warehouse, refs)
    finally:
        warehouse.dispose()
    rows_read = [s for s in statements if s.startswith("SELECT") and "sqlite_master" not in s]
    assert statements and rows_read == []  # the schema, read once per connection, no rows
    assert {(f.column, f.identifier_type) for f in find_in(found, "sales.contacts")} == {
        ("mobile", "phone"),
        ("email", "email"),  # by name it looks like one: no values are read to say otherwise
    }
    probe = {f.column: (f.identifier_type, f.named_by) for f in find_in(found, "sales.name_probe")}
    assert probe == NAMED
    assert {f.status for f in found} == {Status.PROPOSED}
    mobile = one(found, "sales.contacts", "mobile")
    assert mobile.evidence == "name (like a phone number column); values not sampled"
    described = one(found, "sales.name_probe", "msisdn").described_by
    assert described is not None and described.startswith("catalog default #2")


def find_in(findings: list[Finding], dataset: str) -> list[Finding]:
    return [f for f in findings if f.dataset.name == dataset]


def test_undeclared_holders_with_a_sample_reads_the_values_too(estate: Path) -> None:
    catalog = load_catalog(estate)
    warehouse = Warehouse(catalog)
    refs = [DatasetRef("warehouse", "sales.contacts"), DatasetRef("warehouse", "crm.mislabelled")]
    try:
        found = undeclared_holders(catalog, warehouse, refs, sample_rows=100)
    finally:
        warehouse.dispose()
    assert {(f.dataset.name, f.column, f.identifier_type, f.status) for f in found} == {
        ("sales.contacts", "contact", "email", Status.PROPOSED),
        ("sales.contacts", "mobile", "phone", Status.PROPOSED),
        ("sales.contacts", "ref", "customer_id", Status.VALUES_ONLY),
        ("sales.contacts", "email", "email", Status.NAME_ONLY),
        ("crm.mislabelled", "account", "email", Status.DECLARED_OTHER),
    }
    assert_no_canary(json.dumps([f.model_dump(mode="json") for f in found]))


def test_undeclared_holders_skips_views_and_what_the_catalog_cannot_reach(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        'version: 1\nidentifiers: {email: {normalise: email}}\nconnections: {w: {url: "sqlite:'
        '///warehouse.db"}}\ndatasets:\n'
        "  - {namespace: w, name: crm.people, connection: w, kind: table}\n"
        "  - {namespace: w, name: crm.people_view, connection: w, kind: view}\n"
        "  - {namespace: w, name: crm.export, kind: file}\n"
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    with warehouse.engine("w").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.people (email TEXT)"))
        conn.execute(sa.text("CREATE VIEW crm.people_view AS SELECT email FROM people"))
    refs = [DatasetRef("w", n) for n in ("crm.people", "crm.people_view", "crm.export")]
    try:
        found = undeclared_holders(catalog, warehouse, refs)
    finally:
        warehouse.dispose()
    assert [(f.dataset.name, f.column) for f in found] == [("crm.people", "email")]


def test_a_catalog_error_is_the_catalogs(tmp_path: Path) -> None:
    path = sqlite_estate(tmp_path)
    catalog = load_catalog(path)
    with pytest.raises(CatalogError, match="declared: \\['warehouse'\\]"):
        discover(catalog, Warehouse(catalog), "warehouse2")


# ---------------------------------------------------------------------------------------------
# Whose identifier: whole numbers, value-only matches and another party's columns


def _shop(root: Path, catalog_text: str) -> Path:
    """A shop as ORMs lay one out: integer keys everywhere, a referral column on customers,
    a sales rep's address on orders and a supplier's number on products."""
    root.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(root / "warehouse.db") as db:
        db.execute(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT, "
            "referred_by_customer_id INTEGER)"
        )
        db.execute(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, quantity INTEGER, "
            "product_id INTEGER, sales_rep_email TEXT, amount_cents INTEGER, created_at TEXT, "
            "shipped_epoch INTEGER, zip TEXT, legacy_no TEXT)"
        )
        db.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, supplier_phone TEXT)")
        db.executemany(
            "INSERT INTO customers VALUES (?, ?, ?)",
            [(i, f"p{i}@ex.com", (i * 3) % 500 + 1) for i in range(1, 2001)],
        )
        db.executemany(
            "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (i, (i * 7) % 2000 + 1, i % 5 + 1, i % 300 + 1, f"rep{i % 4}@shop.com", 1000 + i,
                 "2024-01-02", 1_700_000_000 + i, f"0{i % 9000 + 1000}", f"{i:08d}")
                for i in range(1, 3001)
            ],
        )  # fmt: skip
        db.executemany(
            "INSERT INTO products VALUES (?, ?, ?)",
            [(i, f"prod{i}", f"+44 20 7946 0{i % 1000:03d}") for i in range(1, 301)],
        )
    path = root / "catalog.yaml"
    path.write_text(catalog_text)
    return path


SHOP = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip, one_per_person: true}
  phone: {normalise: e164, default_region: GB}
connections:
  warehouse: {url: "sqlite:///warehouse.db"}
datasets:
  - namespace: warehouse
    name: customers
    connection: warehouse
    kind: table
    holds_subject: {email: email, customer_id: id}
"""


def test_whole_numbers_are_no_evidence_and_another_partys_columns_are_never_proposed(
    tmp_path: Path,
) -> None:
    catalog = load_catalog(_shop(tmp_path, SHOP))
    report = discover(catalog, Warehouse(catalog), "warehouse")
    # Any small number is inside an integer key's range: quantities, product ids, amounts,
    # epochs, zero-padded numbers and ZIP codes are nobody's customer id (nor phone).
    for table, column in [
        ("orders", "id"),
        ("orders", "quantity"),
        ("orders", "product_id"),
        ("orders", "amount_cents"),
        ("orders", "shipped_epoch"),
        ("orders", "zip"),
        ("orders", "legacy_no"),
        ("orders", "created_at"),
        ("products", "id"),
    ]:
        assert find(report, table, column) == [], (table, column)
    # Named as the type, holding whole numbers: proposed by its name, the values said mute.
    own = one(report, "orders", "customer_id")
    assert (own.status, own.named_by, own.values_neutral) == (
        Status.PROPOSED,
        NamedBy.TYPE_NAME,
        1000,
    )
    assert own.evidence == (
        "name (like the identifier type customer_id); values: all 1000 sampled values are "
        "whole numbers (no evidence)"
    )
    # Another party's: shown with what says so, never in the YAML.
    others = {(f.dataset.name, f.column): f for f in report.having(Status.OTHER_PARTY)}
    assert {k: (f.identifier_type, f.other_party) for k, f in others.items()} == {
        ("customers", "referred_by_customer_id"): ("customer_id", "referred by"),
        ("orders", "sales_rep_email"): ("email", "sales rep"),
        ("products", "supplier_phone"): ("phone", "supplier"),
    }
    assert others[("orders", "sales_rep_email")].evidence.endswith(
        "another party's, by its name (sales rep)"
    )
    proposed = yaml.safe_load(report.catalog_yaml)["datasets"]
    assert proposed == [
        {
            "namespace": "warehouse",
            "name": "orders",
            "connection": "warehouse",
            "kind": "table",
            "holds_subject": {"customer_id": ["customer_id"]},
        }
    ]
    assert "holds_subject: {" not in report.catalog_yaml  # nothing merged into customers
    for column in ("sales_rep_email", "supplier_phone", "referred_by_customer_id"):
        assert f": [{column}]  (name (like the identifier type" in report.catalog_yaml
    assert report.catalog_yaml.count("declare it under `references`") == 3
    text = render_discovery(report)
    assert "Another party's, by its name (not proposed" in text

    # Declared by a catalog already: said, for the catalog's owner to change.
    declared = _shop(
        tmp_path / "declared",
        SHOP.replace("customer_id: id}", "customer_id: [id, referred_by_customer_id]}"),
    )
    catalog = load_catalog(declared)
    again = discover(catalog, Warehouse(catalog), "warehouse")
    mine = one(again, "customers", "referred_by_customer_id")
    assert (mine.status, mine.other_party) == (Status.DECLARED, "referred by")
    assert (
        "Declared, but the name says another party's (check the catalog):\n"
        "  customers.referred_by_customer_id  customer_id  (referred by): a request by that "
        "party's identifier erases these rows"
    ) in render_discovery(again)


# How CRM, ticketing, commerce, HR and audit schemas name a party other than the row's
# person; each column holds well-formed addresses or numbers, so only its name can tell.
OTHER_PARTY_COLUMNS = {
    "email": [
        "sales_rep_email", "SalesRepEmail", "account_manager_email", "created_by",
        "updatedBy", "approved_by_email", "assignee_email", "agent_email", "owner_email",
        "supplier_email", "vendor_contact_email", "merchant_email", "support_email",
        "referrer_email", "referred_by_email", "invited_by", "guardian_email", "parent_email",
        "emergency_contact_email", "employee_email",
    ],
    "phone": ["emergency_contact_phone", "next_of_kin_phone", "courier_phone", "driverMobile"],
    "customer_id": ["referred_by_customer_id", "parent_customer_id", "sponsor_customer_no"],
}  # fmt: skip
# ... and names of the row's own person, which stay proposals.
OWN_COLUMNS = {
    "email": [
        "email", "contact_email", "billing_email", "user_email", "work_email", "primary_email",
        "customer_email", "recipient_email",
    ],
    "phone": ["mobile", "home_phone", "contact_number_tel"],
    "customer_id": ["customer_id", "customer_no", "customerRef"],
}  # fmt: skip


def _party_estate(root: Path, table: str, columns: dict[str, list[str]]) -> Discovery:
    """Discover over a customers key and one table of `columns`, each filled by its type."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "catalog.yaml"
    path.write_text(
        CATALOG.replace("URL", "sqlite:///warehouse.db").split("  - namespace: warehouse\n")[0]
        + "  - {namespace: warehouse, name: crm.customers, connection: warehouse, kind: table,\n"
        "     holds_subject: {customer_id: id}}\n"
    )
    sqlite3.connect(root / "warehouse.db").close()
    with sqlite3.connect(root / "warehouse.crm.db") as db:
        db.execute("CREATE TABLE customers (id TEXT PRIMARY KEY)")
        db.executemany("INSERT INTO customers VALUES (?)", [(f"C{n:04d}",) for n in range(20)])
    names = [c for cols in columns.values() for c in cols]
    fill = {"email": "p{n}@example.com", "phone": "+44 20 7946 0{n:03d}", "customer_id": "C{n:04d}"}
    with sqlite3.connect(root / "warehouse.ops.db") as db:
        typed = ", ".join(f'"{c}" TEXT' for c in names)
        db.execute(f"CREATE TABLE {table} ({typed})")
        db.executemany(
            f"INSERT INTO {table} VALUES ({', '.join('?' for _ in names)})",
            [
                tuple(fill[t].format(n=n) for t, cols in columns.items() for _ in cols)
                for n in range(20)
            ],
        )
    catalog = load_catalog(path)
    return discover(catalog, Warehouse(catalog), "warehouse", schemas=["ops"])


def test_a_name_that_says_another_partys_is_shown_never_proposed(tmp_path: Path) -> None:
    report = _party_estate(tmp_path / "a", "orders", OTHER_PARTY_COLUMNS)
    for id_type, columns in OTHER_PARTY_COLUMNS.items():
        for column in columns:
            found = one(report, "ops.orders", column)
            assert (found.identifier_type, found.status) == (id_type, Status.OTHER_PARTY), column
    whose = {f.column: f.other_party for f in report.findings}
    assert whose["account_manager_email"] == "account manager"
    assert whose["SalesRepEmail"] == "sales rep"
    assert whose["updatedBy"] == "updated by"
    assert whose["vendor_contact_email"] == "vendor contact"
    assert whose["referred_by_customer_id"] == "referred by"
    assert whose["sponsor_customer_no"] == "sponsor"
    assert report.having(Status.PROPOSED) == []
    assert yaml.safe_load(report.catalog_yaml) is None  # comments only

    report = _party_estate(tmp_path / "b", "orders", OWN_COLUMNS)
    for id_type, columns in OWN_COLUMNS.items():
        for column in columns:
            found = one(report, "ops.orders", column)
            assert (found.identifier_type, found.status) == (id_type, Status.PROPOSED), column


@pytest.mark.parametrize(
    ("table", "column", "status"),
    [
        ("suppliers", "supplier_phone", Status.PROPOSED),  # the row is the supplier
        ("sales_reps", "rep_email", Status.PROPOSED),
        ("employees", "employee_email", Status.PROPOSED),
        ("employees", "manager_email", Status.OTHER_PARTY),
        ("products", "supplier_phone", Status.OTHER_PARTY),
    ],
)
def test_a_word_that_names_the_tables_own_rows_is_no_other_party(
    tmp_path: Path, table: str, column: str, status: Status
) -> None:
    id_type = "phone" if column.endswith("phone") else "email"
    report = _party_estate(tmp_path, table, {id_type: [column]})
    assert one(report, f"ops.{table}", column).status is status


# ---------------------------------------------------------------------------------------------
# What a value says: numbers that are not phones, logins that are not addresses


@pytest.mark.parametrize(
    "values",
    [
        [f"{n:07d}" for n in range(1, 10)],  # zero-padded ids
        [f"0{n:04d}" for n in range(1001, 1010)],  # US ZIP codes of New England
        [f"0{n:04d}-{n:04d}" for n in range(1001, 1010)],  # ZIP+4
        [f"{d:02d}/0{d % 9 + 1}/2024" for d in range(1, 10)],  # dd/mm/yyyy
        [f"{d:02d}.0{d % 9 + 1}.2024" for d in range(1, 10)],  # dd.mm.yyyy
        [f"0{d}-0{d % 9 + 1}-24" for d in range(1, 10)],  # dd-mm-yy
        [f"0.{n}5" for n in range(1, 10)],  # decimals
        [f"07700900{n:03d}" for n in range(1, 10)],  # digits with no form: could be anything
    ],
    ids=["zero-padded", "zip", "zip+4", "dd/mm/yyyy", "dd.mm.yyyy", "dd-mm-yy", "decimal", "bare"],
)
def test_digits_in_no_dialled_form_are_not_phones(tmp_path: Path, values: list[str]) -> None:
    assert find(_one_column(tmp_path, "stored", values), "inbox.messages", "stored") == []


@pytest.mark.parametrize(
    "values",
    [
        [f"user{n}@localhost" for n in range(9)],
        [f"postgres{n}@127.0.0.{n}" for n in range(9)],
        [f"root{n}@[10.0.0.{n}]" for n in range(9)],
        [f"svc{n}@db-{n}" for n in range(9)],
    ],
    ids=["localhost", "ipv4", "address-literal", "bare-host"],
)
def test_logins_at_a_host_are_not_addresses(tmp_path: Path, values: list[str]) -> None:
    assert find(_one_column(tmp_path, "stored", values), "inbox.messages", "stored") == []


def test_a_long_value_is_cut_in_sql_and_reads_as_no_identifier(tmp_path: Path) -> None:
    report = _one_column(tmp_path, "email", ["a@example.com" + " " * 2_000_000] * 3)
    found = one(report, "inbox.messages", "email")
    assert (found.status, found.values_sampled, found.values_read) == (Status.NAME_ONLY, 3, 0)


# ---------------------------------------------------------------------------------------------
# Reading: keys only, bounded, read-only, never a write lock or a file


def test_a_uuid_key_on_sqlite_is_compared_as_stored(tmp_path: Path) -> None:
    ids = [str(uuid.UUID(int=n + 1)) for n in range(10)]
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "version: 1\nidentifiers: {customer_id: {normalise: strip}}\n"
        'connections: {w: {url: "sqlite:///w.db"}}\ndatasets:\n'
        "  - {namespace: w, name: customers, connection: w, kind: table,"
        " holds_subject: {customer_id: id}}\n"
    )
    with sqlite3.connect(tmp_path / "w.db") as db:
        db.execute("CREATE TABLE customers (id UUID PRIMARY KEY, email TEXT)")  # NUMERIC
        db.executemany("INSERT INTO customers VALUES (?, NULL)", [(i,) for i in ids])
        db.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, requester TEXT)")
        db.executemany("INSERT INTO tickets (requester) VALUES (?)", [(i,) for i in ids[:6]])
    catalog = load_catalog(path)
    report = discover(catalog, Warehouse(catalog), "w")
    found = one(report, "tickets", "requester")
    assert (found.status, found.found_in, found.ids_found) == (
        Status.VALUES_ONLY,
        "customers.id",
        6,
    )
    assert report.notes == []


def test_ids_are_looked_up_within_a_budget_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("erasure.discover.judge.MAX_KEY_LOOKUPS", 1)
    catalog = load_catalog(sqlite_estate(tmp_path))
    with seen_statements() as statements:
        report = discover(catalog, Warehouse(catalog), "warehouse")
    assert (
        "ids were looked up in 1 declared key columns, the most one run makes: the columns "
        "after judged by name and value shape alone"
    ) in report.notes
    assert len([s for s, _ in statements if " IN (" in s]) == 1


def test_discovery_on_sqlite_reads_only_takes_no_lock_and_creates_no_file(
    tmp_path: Path,
) -> None:
    path = sqlite_estate(tmp_path)
    # A schema the catalog names whose file does not exist: the warehouse would create it.
    path.write_text(
        path.read_text().replace(
            "defaults:\n",
            "  - {namespace: warehouse, name: mart.summary, connection: warehouse, kind: table}\n"
            "defaults:\n",
        )
    )
    files = {p: p.read_bytes() for p in tmp_path.glob("warehouse*.db")}
    # Another process writing: it holds the write lock of the main file and of crm's.
    writer = sqlite3.connect(tmp_path / "warehouse.db", isolation_level=None)
    writer.execute(f"ATTACH DATABASE '{tmp_path / 'warehouse.crm.db'}' AS crm")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO crm.orders (id) VALUES (9999)")
    catalog = load_catalog(path)
    started = time.monotonic()
    try:
        report = discover(catalog, Warehouse(catalog), "warehouse")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert time.monotonic() - started < 10  # the busy timeout is 30 s: no lock was waited for
    check_estate_findings(report)
    assert not (tmp_path / "warehouse.mart.db").exists()
    assert {p: p.read_bytes() for p in tmp_path.glob("warehouse*.db")} == files


def test_a_read_only_uri_url_is_read(tmp_path: Path) -> None:
    path = sqlite_estate(tmp_path)
    path.write_text(
        path.read_text().replace(
            "sqlite:///warehouse.db", "sqlite:///file:warehouse.db?mode=ro&uri=true"
        )
    )
    catalog = load_catalog(path)
    report = discover(catalog, Warehouse(catalog), "warehouse", schemas=["sales"])
    assert one(report, "sales.contacts", "contact").status is Status.PROPOSED


def test_schema_files_are_attached_within_sqlites_limit_and_never_to_the_warehouses_pool(
    tmp_path: Path,
) -> None:
    path = sqlite_estate(tmp_path)
    for n in range(10):
        with sqlite3.connect(tmp_path / f"warehouse.zextra{n}.db") as db:
            db.execute("CREATE TABLE people (email TEXT)")
            db.execute("INSERT INTO people VALUES ('x@example.com')")
    (tmp_path / "warehouse.broken.db").write_text("not a database " * 100)
    # A per-user schema named with a number: searched, never named.
    with sqlite3.connect(tmp_path / "warehouse.07700900123.db") as db:
        db.execute("CREATE TABLE people (email TEXT)")
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    with warehouse.engine("warehouse").connect() as conn:  # a pooled connection, kept
        before = [row[1] for row in conn.exec_driver_sql("PRAGMA database_list")]
    report = discover(catalog, warehouse, "warehouse")
    with warehouse.engine("warehouse").connect() as conn:
        after = [row[1] for row in conn.exec_driver_sql("PRAGMA database_list")]
    warehouse.dispose()
    assert before == after == ["main", "crm", "sales"]
    assert report.schemas[:4] == ["main", "crm", "sales", "legacy"]
    assert len(report.schemas) - 1 == 10  # attached: SQLite's limit
    assert "schema 'broken': not searched (cannot be read (DatabaseError SQLITE_NOTADB)); " in (
        "\n".join(report.notes)
    )
    limited = [n for n in report.notes if "SQLite attaches at most 10 schema files" in n]
    # 15 files beside the main one: 10 attached, 1 broken, 1 not searched for its name
    assert len(limited) == 3
    assert "1 schema(s) not searched: each name may be an identifier" in "\n".join(report.notes)
    text = render_discovery(report)
    assert "07700900123" not in text + report.model_dump_json()
    # Asked for by name, it is searched (and named: the person typed it).
    asked = discover(catalog, Warehouse(catalog), "warehouse", schemas=["07700900123"])
    assert asked.schemas == ["07700900123"]


def test_a_dbt_described_model_is_proposed_without_its_rebuild_or_machine_paths(
    tmp_path: Path,
) -> None:
    manifest = {
        "metadata": {"adapter_type": "postgres"},
        "sources": {},
        "nodes": {
            "model.shop.customer_value": {
                "resource_type": "model", "database": "analytics", "schema": "marts",
                "name": "customer_value", "alias": "customer_value",
                "config": {"materialized": "table"}, "depends_on": {"nodes": []},
                "original_file_path": "models/marts/customer_value.sql",
            }
        },
    }  # fmt: skip
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "manifest.json").write_text(json.dumps(manifest))
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "version: 1\nidentifiers: {email: {normalise: email}}\n"
        'connections: {w: {url: "sqlite:///w.db"}}\ndatasets: []\n'
        "lineage:\n  dbt:\n    - {manifest: target/manifest.json, connection: w, namespace: w, "
        f"profiles_dir: {tmp_path}/profiles, executable: {tmp_path}/venv/bin/dbt}}\n"
    )
    sqlite3.connect(tmp_path / "w.db").close()
    with sqlite3.connect(tmp_path / "w.marts.db") as db:
        db.execute("CREATE TABLE customer_value (email TEXT, value INTEGER)")
        db.execute("INSERT INTO customer_value VALUES ('ann@example.com', 3)")
    catalog = load_catalog(path)
    report = discover(catalog, Warehouse(catalog), "w")
    found = one(report, "marts.customer_value", "email")
    assert found.status is Status.PROPOSED and found.described_by is not None
    assert yaml.safe_load(report.catalog_yaml)["datasets"] == [
        {
            "namespace": "w",
            "name": "marts.customer_value",
            "connection": "w",
            "kind": "table",
            "holds_subject": {"email": ["email"]},
        }
    ]
    assert str(tmp_path) not in report.catalog_yaml
    assert "rebuilds it (dbt); this entry replaces that description and has no rebuild" in (
        report.catalog_yaml
    )


# ---------------------------------------------------------------------------------------------
# undeclared_holders: a warning, so a warehouse it cannot read is skipped, never raised


def test_undeclared_holders_skips_what_it_cannot_reach_and_says_which(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "version: 1\nidentifiers: {email: {normalise: email}}\nconnections:\n"
        '  w: {url: "sqlite:///warehouse.db"}\n'
        '  down: {url: "postgresql://nobody@127.0.0.1:1/nowhere"}\n'
        "  af: {airflow_conn_id: dwh}\n"
        '  nodriver: {url: "postgresql+nosuchdriver://x@127.0.0.1/y"}\n'
        "datasets:\n"
        "  - {namespace: w, name: crm.people, connection: w, kind: table}\n"
        "  - {namespace: w, name: a.one, connection: down, kind: table}\n"
        "  - {namespace: w, name: a.two, connection: down, kind: table}\n"
        "  - {namespace: w, name: b.one, connection: af, kind: table}\n"
        "  - {namespace: w, name: c.one, connection: nodriver, kind: table}\n"
        "  - {namespace: w, name: d.one, connection: w, kind: table}\n"
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    with warehouse.engine("w").begin() as conn:
        conn.execute(sa.text("CREATE TABLE crm.people (email TEXT)"))
        conn.execute(sa.text("INSERT INTO crm.people VALUES ('ann@example.com')"))
    refs = [ds.ref for ds in catalog.datasets]
    try:
        for rows in (0, 10):
            checked = check_undeclared_holders(catalog, warehouse, refs, sample_rows=rows)
            assert [(f.dataset.name, f.column) for f in checked.findings] == [
                ("crm.people", "email")
            ], rows
            reasons = {s.dataset.name: s.reason for s in checked.skipped}
            assert sorted(reasons) == ["a.one", "a.two", "b.one", "c.one"], rows
            assert reasons["a.one"] == reasons["a.two"]  # the connection is tried once
            assert reasons["a.one"].startswith("connection 'down'")
            assert "airflow_conn_id 'dwh'" in reasons["b.one"]
            assert reasons["c.one"].startswith("connection 'nodriver': cannot use its URL")
            found = undeclared_holders(catalog, warehouse, refs, sample_rows=rows)
            assert found == checked.findings
    finally:
        warehouse.dispose()


def test_a_column_name_cannot_write_into_the_proposed_catalog(tmp_path: Path) -> None:
    """A column named with a line break would end a YAML comment and start an entry of its
    own in what a person pastes: such names are not searched, and a note says so."""
    path = tmp_path / "catalog.yaml"
    path.write_text(
        'version: 1\nidentifiers: {email: {normalise: email}}\nconnections: {w: {url: "sqlite:'
        '///warehouse.db"}}\ndatasets:\n'
        "  - {namespace: w, name: customers, connection: w, kind: table,"
        " holds_subject: {email: email}}\n"
    )
    catalog = load_catalog(path)
    warehouse = Warehouse(catalog)
    injected = (
        "rep_email\n  - {namespace: w, name: crm, connection: w, kind: table, "
        "holds_subject: {email: [email]}} #"
    )
    with warehouse.engine("w").begin() as conn:
        conn.execute(sa.text("CREATE TABLE customers (email TEXT)"))
        conn.execute(sa.text(f'CREATE TABLE leads ("{injected}" TEXT, "rep\u2028mail" TEXT)'))
        conn.execute(sa.text("INSERT INTO leads VALUES ('a@example.com', 'b@example.com')"))
    warehouse.dispose()
    report = discover(catalog, warehouse, "w")
    proposed = yaml.safe_load(report.catalog_yaml) or {}
    assert [d["name"] for d in proposed.get("datasets") or []] == []
    assert not [f for f in report.findings if f.dataset.name == "leads"]
    assert any("2 column(s) not searched" in note for note in report.notes)
    assert "holds_subject: {email: [email]}} #" not in render_discovery(report)
