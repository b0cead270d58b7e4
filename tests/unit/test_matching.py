"""The pieces of the matcher the conformance corpus relies on: the SQL superset patterns
keep only what no other character folds to, near misses are counted by kind, the scan tells
apart every value Python may.

The matching of every stored form is proven by the conformance corpus
(`test_matching_corpus.py`, and on Postgres `tests/integration/test_matching_postgres.py`).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import load_catalog
from erasure.errors import WarehouseError
from erasure.locate import locate
from erasure.matching import (
    IDNA_FULL_STOPS,
    Matcher,
    NearMiss,
    count_by_scan,
    email_pattern,
    near_miss_kind,
    near_misses,
    one_edit_apart,
)
from erasure.model import SubjectRef
from erasure.pseudonym import IGNORABLE_CHARACTERS, canonical_text, fold_case
from erasure.warehouse import Warehouse
from tests.unit.estate import make_estate


def test_the_unsafe_ascii_set_covers_every_code_point() -> None:
    """Characters whose casefold makes ASCII that SQL's lower(NFKC) does not live in the BMP:
    the pattern builder looks only there."""
    outside = {
        out
        for cp in range(0x10000, 0x110000)
        if chr(cp) not in IGNORABLE_CHARACTERS
        and (folded := fold_case(canonical_text(chr(cp)))) != _sql_reads(chr(cp))
        for out in folded
        if out.isascii()
    }
    assert outside == set()


def _sql_reads(stored: str, *, email: bool = False) -> str:
    """What the Postgres candidate compares: ignorables dropped, NFKC, ASCII lower-cased; in an
    address IDNA's other full stops read as `.`."""
    text = unicodedata.normalize(
        "NFKC", "".join(c for c in stored if c not in IGNORABLE_CHARACTERS)
    )
    if email:
        text = text.translate(str.maketrans(dict.fromkeys(IDNA_FULL_STOPS, ".")))
    return "".join(ch.lower() if ch.isascii() else ch for ch in text)


@pytest.mark.parametrize(
    ("stored", "target"),
    [
        ("STRAßE@EXAMPLE.DE", "strasse@example.de"),
        ("\ufeffJoe@Example.COM\u3000", "joe@example.com"),
        ("zoe\u0308@example.com", "zoë@example.com"),
        ("\u212aate@example.com", "kate@example.com"),  # KELVIN SIGN
        ("\ufb01ona@example.com", "fiona@example.com"),
        ("jo\u200bhn@exa\u00admple.com", "john@example.com"),  # ZWSP, soft hyphen inside
        ("\uff4a\uff4f\uff48\uff4e\uff20example.com", "john@example.com"),  # fullwidth
        ('"John Smith" <John@Example.com>', "john@example.com"),
        ('"john"@example.com.', "john@example.com"),
        ("john(comment)@example.com", "john@example.com"),
        ("john@xn--bcher-kva.example", "john@b\u00fccher.example"),
        ("\u0130RMAK@EXAMPLE.ORG", "irmak@example.org"),  # Turkish upper case of i
        ("I\u0307RMAK@EXAMPLE.ORG", "irmak@example.org"),  # I + COMBINING DOT ABOVE
        ("ann.dot@example\u3002org", "ann.dot@example.org"),  # IDEOGRAPHIC FULL STOP
        ("ann.dot@example\uff0eorg", "ann.dot@example.org"),  # FULLWIDTH FULL STOP
        ("ANN.DOT@EXAMPLE\uff61ORG\uff61", "ann.dot@example.org"),  # HALFWIDTH IDEOGRAPHIC
    ],
)
def test_every_stored_form_matches_the_like_pattern(stored: str, target: str) -> None:
    assert Matcher("email", "email").canonical(stored) == target  # Python's decision
    pattern = email_pattern(target)
    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        read = sa.literal(_sql_reads(stored, email=True))
        matched = conn.execute(sa.select(read.like(pattern, escape="\\"))).scalar_one()
    assert matched  # and the SQL prefilter keeps the row


@pytest.mark.parametrize("normalise", ["email", "lower"])
def test_the_dotted_capital_i_is_the_plain_i_and_the_dotless_one_a_near_miss(
    normalise: str,
) -> None:
    matcher = Matcher("x", normalise)
    kind = near_miss_kind(matcher, "irmak@example.org")
    assert matcher.key("\u0130RMAK@EXAMPLE.ORG") == "irmak@example.org"
    assert kind("\u0130RMAK@EXAMPLE.ORG") is None  # the subject itself
    assert kind("\u0131RMAK@EXAMPLE.ORG") == NearMiss.TURKISH_I
    assert kind("\u0131rmak@example.org") == NearMiss.TURKISH_I


def test_where_case_is_kept_the_dotted_capital_i_is_a_turkish_i_near_miss() -> None:
    kind = near_miss_kind(Matcher("customer_id", "strip"), "ID-7731")
    assert kind("\u0130D-7731") == NearMiss.TURKISH_I
    assert kind("\u0131D-7731") == NearMiss.TURKISH_I
    assert kind("id-7731") == NearMiss.CASE


def test_one_edit_apart() -> None:
    assert one_edit_apart("c1", "c11")
    assert one_edit_apart("abc", "abd")
    assert one_edit_apart("abc", "ab")
    assert not one_edit_apart("abc", "abc")
    assert not one_edit_apart("abc", "cab")


def test_near_misses_are_counted_by_kind() -> None:
    engine = sa.create_engine("sqlite://")
    table = sa.Table("t", sa.MetaData(), sa.Column("email", sa.Text))
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(
            table.insert(),
            [
                {"email": "ann@example.org"},
                {"email": "ANN@example.net"},
                {"email": "anne@example.com"},
                {"email": "bob@example.com"},
                {"email": None},
            ],
        )
        counts = near_misses(conn, table.c.email, Matcher("email", "email"), "ann@example.com")
    assert counts == {NearMiss.SAME_LOCAL_PART: 2, NearMiss.ONE_EDIT: 1}


CATALOG = """
version: 1
identifiers: {customer_id: {normalise: strip}, email: {normalise: email}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.orders, connection: warehouse, kind: table,
     holds_subject: {customer_id: customer_id}}
"""


def test_the_scan_tells_apart_values_the_columns_collation_calls_equal(tmp_path: Path) -> None:
    _, warehouse = make_estate(
        tmp_path,
        CATALOG,
        [
            "CREATE TABLE crm.orders (id INTEGER PRIMARY KEY, customer_id TEXT COLLATE NOCASE)",
            "INSERT INTO crm.orders (customer_id) VALUES ('c-1'), ('C-1'), ('C-1'), (' C-1')",
        ],
    )
    engine = warehouse.engine("warehouse")
    table = sa.Table("orders", sa.MetaData(), schema="crm", autoload_with=engine)
    strip = Matcher("customer_id", "strip")
    with engine.connect() as conn:
        assert count_by_scan(conn, table.c.customer_id, strip, {"C-1"}) == 3
        assert count_by_scan(conn, table.c.customer_id, strip, {"c-1"}) == 1


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root@127.0.0.1:1/test",
        "mysql+pymysql://root@127.0.0.1:1/test",
        "mssql://sa@127.0.0.1:1/db",
    ],
)
def test_a_warehouse_whose_dialect_cannot_match_exactly_is_refused_before_connecting(
    tmp_path: Path, url: str
) -> None:
    # Port 1 answers nobody and no driver is installed: the refusal comes before either.
    (tmp_path / "catalog.yaml").write_text(CATALOG.replace("sqlite:///wh.db", url))
    catalog = load_catalog(tmp_path / "catalog.yaml")
    warehouse = Warehouse(catalog)
    subject = SubjectRef(type="customer_id", value=SecretStr("C-77f3e1"))
    refused = r"dataset 'crm.orders': the \w+ dialect cannot be matched exactly"
    with pytest.raises(WarehouseError, match=refused) as err:
        locate(catalog, warehouse, subject)
    assert "sqlite and postgresql only" in str(err.value)
    assert "C-77f3e1" not in str(err.value)
