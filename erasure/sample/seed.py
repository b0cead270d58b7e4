"""Build the demo warehouse: sources with deterministic fake people, and every derived
artefact materialised by the same SQL the catalog declares as its lineage.
"""

from __future__ import annotations

import csv
import hashlib
import random
import shutil
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import sqlalchemy as sa

from erasure.catalog import Catalog, load_catalog
from erasure.sample.lake import build_lake
from erasure.sample.rematerialise import REMATERIALISATION_DAGS, rematerialise, select_of
from erasure.warehouse import Warehouse

DEMO_SUBJECT = ("email", "alice.smith@example.com")
# Tomorrow's CRM export: everybody, the demo subject included, as the CRM still holds them.
CRM_EXPORT = "crm_export.csv"
REGIONS = ("north", "south", "east", "west")
MONTHS = ("2026-09", "2026-10", "2026-11")
CUSTOMERS = 240

# encrypt(customer_id, dataset, plaintext) -> (subject hash, blob): the archive's producer
# seals each customer's events under that customer's own key.
Encrypt = Callable[[str, str, bytes], tuple[str, bytes]]


def copy_estate(target: Path) -> Path:
    """A fresh copy of the packaged estate (catalog, SQL, lineage) in `target`."""
    if target.exists():
        shutil.rmtree(target)
    source = resources.files("erasure.sample") / "estate"
    with resources.as_file(source) as path:
        shutil.copytree(path, target)
    return target / "catalog.yaml"


def build_demo(target: Path, *, url: str | None = None, encrypt: Encrypt | None = None) -> Catalog:
    """Copy the estate to `target`, create and fill its warehouse; returns the catalog.

    `url` points the catalog's warehouse at another database (Postgres in tests).
    """
    catalog_path = copy_estate(target)
    if url is not None:
        text = catalog_path.read_text().replace(
            '{url: "sqlite:///warehouse.db"}', f'{{url: "{url}"}}'
        )
        catalog_path.write_text(text)
    catalog = load_catalog(catalog_path)
    warehouse = Warehouse(catalog)
    try:
        engine = warehouse.engine("warehouse")
        _create_sources(engine)
        _materialise(engine, catalog, encrypt)
        _write_crm_export(engine, target / CRM_EXPORT)
        build_lake(target, engine)
        for dag_id in REMATERIALISATION_DAGS:
            rematerialise(catalog, warehouse, dag_id)
    finally:
        warehouse.dispose()
    return catalog


def _sources() -> tuple[sa.MetaData, dict[str, sa.Table]]:
    md = sa.MetaData()
    t = {
        "addresses": sa.Table(
            "addresses",
            md,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("street", sa.String(120)),
            sa.Column("city", sa.String(60)),
            sa.Column("postcode", sa.String(12)),
            schema="crm",
        ),
        "customers": sa.Table(
            "customers",
            md,
            sa.Column("id", sa.String(12), primary_key=True),
            sa.Column("email", sa.String(200)),
            sa.Column("alt_email", sa.String(200)),
            sa.Column("phone", sa.String(40)),
            sa.Column("full_name", sa.String(120)),
            sa.Column("region", sa.String(12)),
            sa.Column("address_id", sa.Integer, sa.ForeignKey("crm.addresses.id")),
            schema="crm",
        ),
        "products": sa.Table(
            "products",
            md,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("name", sa.String(80)),
            sa.Column("price", sa.Numeric(10, 2)),
            schema="crm",
        ),
        "orders": sa.Table(
            "orders",
            md,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("customer_id", sa.String(12), sa.ForeignKey("crm.customers.id")),
            sa.Column("product_id", sa.Integer, sa.ForeignKey("crm.products.id")),
            sa.Column("amount", sa.Numeric(10, 2)),
            sa.Column("ordered_on", sa.String(10)),
            sa.Column("month", sa.String(7)),
            schema="crm",
        ),
        "stock_levels": sa.Table(
            "stock_levels",
            md,
            sa.Column("product_id", sa.Integer, primary_key=True),
            sa.Column("depot", sa.String(40), primary_key=True),
            sa.Column("units", sa.Integer),
            schema="ops",
        ),
    }
    return md, t


def _people(rng: random.Random) -> list[dict[str, object]]:
    first = ["Bob", "Chen", "Dara", "Eve", "Femi", "Gita", "Hugo", "Ines", "Jon", "Kai", "Lena"]
    last = ["Jones", "Okafor", "Novak", "Silva", "Tanaka", "Weber", "Murphy", "Haddad"]
    people: list[dict[str, object]] = [
        # The demo subject: stored with odd spacing and case, sharing a household address.
        {
            "id": "C0001",
            "email": " Alice.Smith@Example.com",
            "alt_email": "a.smith@work.example",
            "phone": "020 7946 0958",
            "full_name": "Alice Smith",
            "region": "north",
            "address_id": 1,
        },
        {
            "id": "C0002",
            "email": "bob.smith@example.com",
            "alt_email": None,
            "phone": "+44 20 7946 0000",
            "full_name": "Bob Smith",
            "region": "north",
            "address_id": 1,
        },
    ]
    for n in range(3, CUSTOMERS + 1):
        name = f"{rng.choice(first)} {rng.choice(last)}"
        people.append(
            {
                "id": f"C{n:04d}",
                "email": f"{name.lower().replace(' ', '.')}.{n}@example.net",
                "alt_email": None,
                "phone": f"+44 7700 9{n:05d}",
                "full_name": name,
                "region": REGIONS[n % len(REGIONS)],
                "address_id": n,
            }
        )
    return people


def _create_sources(engine: sa.Engine) -> None:
    md, t = _sources()
    rng = random.Random(17)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            for schema in ("crm", "ops", "marts", "agg", "archive", "backup", "ml", "reports"):
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        md.create_all(conn)
        people = _people(rng)
        conn.execute(
            t["addresses"].insert(),
            [
                {
                    "id": n,
                    "street": f"{n} {rng.choice(['High St', 'Mill Lane', 'Park Rd'])}",
                    "city": "Leeds",
                    "postcode": f"LS{n // 3:02d} 1AB",
                }
                for n in range(1, CUSTOMERS + 1)
            ],
        )
        conn.execute(t["customers"].insert(), people)
        products = [{"id": i, "name": f"Product {i}", "price": 20 + 15 * i} for i in range(1, 21)]
        conn.execute(t["products"].insert(), products)
        orders: list[dict[str, object]] = []
        for person in people:
            for month in MONTHS:
                product = rng.randint(1, 20)
                day = f"{month}-{rng.randint(1, 28):02d}"
                orders.append(
                    {
                        "id": len(orders) + 1,
                        "customer_id": person["id"],
                        "product_id": product,
                        "amount": 20 + 15 * product,
                        "ordered_on": day,
                        "month": month,
                    }
                )
        conn.execute(t["orders"].insert(), orders)
        conn.execute(
            t["stock_levels"].insert(),
            [
                {"product_id": p["id"], "depot": d, "units": rng.randint(0, 500)}
                for p in products
                for d in ("leeds", "bristol")
            ],
        )


def _materialise(engine: sa.Engine, catalog: Catalog, encrypt: Encrypt | None) -> None:
    """Derived artefacts, built the way their producers build them."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE marts.segment_history (customer_id VARCHAR(12), segment VARCHAR(20))"
            )
        )
        for name in (
            "marts.customer_ltv",
            "marts.popular_products",
            "marts.customer_segments",
            "marts.segment_history",
        ):
            if name == "marts.segment_history":
                conn.execute(sa.text("DROP TABLE marts.segment_history"))
            for statement in catalog.by_name(name).rebuild.declared_sql() or []:  # type: ignore[union-attr]
                conn.execute(sa.text(statement))
        for name in (
            "agg.customers_by_region_month",
            "agg.customers_by_postcode",
            "backup.crm_nightly",
        ):
            conn.execute(sa.text(f"CREATE TABLE {name} AS {select_of(catalog, name)}"))
        conn.execute(
            sa.text(
                "CREATE TABLE ml.customer_embeddings (customer_id VARCHAR(12) "
                "PRIMARY KEY, vector VARCHAR(200))"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TABLE archive.customer_events (id INTEGER PRIMARY KEY, "
                "subject_hash VARCHAR(64), event_type VARCHAR(40), payload TEXT)"
            )
        )
        people = conn.execute(sa.text("SELECT id, full_name, email FROM crm.customers")).all()
        conn.execute(
            sa.text("INSERT INTO ml.customer_embeddings (customer_id, vector) VALUES (:c, :v)"),
            [{"c": pid, "v": _embedding(str(name))} for pid, name, _ in people],
        )
        if encrypt is not None:
            rows = []
            for i, (pid, _name, email) in enumerate(people, start=1):
                owner, blob = encrypt(
                    str(pid), "archive.customer_events", f"signup:{email}".encode()
                )
                rows.append({"id": i, "h": owner, "e": "signup", "p": blob.hex()})
            conn.execute(
                sa.text(
                    "INSERT INTO archive.customer_events (id, subject_hash, "
                    "event_type, payload) VALUES (:id, :h, :e, :p)"
                ),
                rows,
            )


def _write_crm_export(engine: sa.Engine, path: Path) -> None:
    """The CRM's nightly export, written the way the CRM writes it (its own letter case)."""
    with engine.connect() as conn:
        result = conn.execute(sa.text("SELECT * FROM crm.customers ORDER BY id"))
        columns = list(result.keys())
        rows = [dict(zip(columns, row, strict=True)) for row in result]
    for row in rows:
        if row["id"] == "C0001":
            row["email"] = "ALICE.Smith@Example.COM"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def _embedding(text: str) -> str:
    """An opaque stand-in for a model: 8 numbers derived from the text."""
    digest = hashlib.sha256(text.encode()).digest()
    return ",".join(f"{b / 255:.3f}" for b in digest[:8])
