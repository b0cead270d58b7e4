"""Hostile estates (issue 18, family 8): erasures on copies of the demo estate that someone's
data, catalog or lineage makes hard, on SQLite and Postgres, through the real workflow.

Each scenario ends either completed, with nothing of the subject left (read independently:
raw SQL and Vault reads, our own matching) and nobody else's rows or keys touched (every other
person's rows snapshotted before, compared after), or stopped with a reason that names the
cause. Completing while the subject's data remains is a false completion; changing another
person's data is a wrong-person erasure: both fail the scenario. Where the DPO must rule, the
scenario answers with the ruling the hostile input makes tempting, and, where it differs, the
honest one. The tally goes to docs/reliability.md, beside the fault matrix, once every
scenario ran.
"""

from __future__ import annotations

import copy
import csv
import json
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from erasure import workflow
from erasure.crm_ingest import ingest_crm_export
from erasure.keys.vault import EmbeddedOpenBao
from erasure.pseudonym import subject_hash
from erasure.sample.embedded import ARCHIVE
from erasure.services import Services
from erasure.suppression import identifier_columns
from tests.integration.hostile_support import (
    BACKENDS,
    RETAINING,
    SUBJECT,
    Dpo,
    Drive,
    Estate,
    Estates,
    Hook,
    HostileAdmin,
    People,
    Run,
    Verdict,
    database_engine,
    drive,
    others_snapshot,
    request_conf,
    residue,
    touched,
)
from tests.integration.published import publish
from tests.integration.workflow_support import answer

pytestmark = [pytest.mark.integration, pytest.mark.vault, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
ALICE = "alice.smith@example.com"
EITHER = frozenset({Verdict.TRUE_COMPLETION, Verdict.STOPPED})
STOP = frozenset({Verdict.STOPPED})
DONE = frozenset({Verdict.TRUE_COMPLETION})

Setup = Callable[[Estate], People | None]


@dataclass(frozen=True)
class Scenario:
    family: int
    name: str
    what: str  # one line for the published table
    setup: Setup | None = None
    id_type: str = "email"
    identifier: str = ALICE
    people: People = field(default_factory=People)
    how: Drive = field(default_factory=Drive)
    expect: frozenset[Verdict] = EITHER
    cause: str = ""  # what a stop must name (regex, case-insensitive)
    # What the completion record claims that the estate cannot show (dataset -> why).
    false_claims: Callable[[Run], dict[str, str]] | None = None

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"


# ---------------------------------------------------------------------------------------------
# Estate edits the scenarios share


def add_customer(estate: Estate, customer_id: str, **columns: Any) -> None:
    """A customer and two orders, stored as given (as a CRM sync would have written them)."""
    row = {"id": customer_id, "email": None, "alt_email": None, "phone": None, **columns}
    with estate.reader() as svc, svc.warehouse.engine("warehouse").begin() as conn:
        next_order = conn.execute(sa.text("SELECT MAX(id) FROM crm.orders")).scalar_one() + 1
        conn.execute(
            sa.text(
                "INSERT INTO crm.customers (id, email, alt_email, phone, full_name, region) "
                "VALUES (:id, :email, :alt_email, :phone, 'Added Customer', 'east')"
            ),
            row,
        )
        for n in range(2):
            conn.execute(
                sa.text(
                    "INSERT INTO crm.orders (id, customer_id, product_id, amount, ordered_on, "
                    "month) VALUES (:id, :customer, 3, 65, '2026-11-02', '2026-11')"
                ),
                {"id": next_order + n, "customer": customer_id},
            )


def customers(*rows: tuple[str, dict[str, Any]]) -> Setup:
    def setup(estate: Estate) -> None:
        for customer_id, columns in rows:
            add_customer(estate, customer_id, **columns)
        estate.refresh_derived()

    return setup


def update(*statements: str) -> Setup:
    def setup(estate: Estate) -> None:
        estate.execute(*statements)
        estate.refresh_derived()

    return setup


# --- 1. lineage --------------------------------------------------------------------------------


def _archive_event() -> dict[str, Any]:
    text = (resources.files("erasure.sample") / "estate" / "lineage" / "events.jsonl").read_text()
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    return next(
        e
        for e in events
        if e["job"]["name"] == "archive_customer_events.write" and e["eventType"] == "COMPLETE"
    )


WRITER_RUN = "01937a10-0000-7000-8000-000000000001"


def event(
    kind: str,
    run_id: str,
    at: str,
    *,
    inputs: list[dict[str, Any]] | None = None,
    outputs: bool = True,
    renamed: bool = False,
) -> dict[str, Any]:
    """An event of the archive's writer job: its COMPLETE with what changed."""
    e = copy.deepcopy(_archive_event())
    e["eventType"], e["eventTime"], e["run"]["runId"] = kind, at, run_id
    if inputs is not None:
        e["inputs"] = inputs
    if renamed:
        for ds in e["inputs"]:
            ds["name"] += "_v2"
        text = json.dumps(e["outputs"]).replace('public.customers"', 'public.customers_v2"')
        e["outputs"] = json.loads(text.replace('public.orders"', 'public.orders_v2"'))
    if not outputs:
        e["outputs"] = []
    return e


def lineage(*events: dict[str, Any]) -> Setup:
    def setup(estate: Estate) -> None:
        estate.add_events(*events)

    return setup


ARCHIVE_CAUSE = r"archive[._]customer_events"


# --- 3. catalog drift ---------------------------------------------------------------------------


def catalog_edit(old: str, new: str) -> Setup:
    def setup(estate: Estate) -> None:
        estate.edit_catalog(old, new)

    return setup


def orders_table_renamed(estate: Estate) -> People:
    estate.execute("ALTER TABLE crm.orders RENAME TO orders_2026")
    return People(order_tables=("crm.orders_2026",))


def phone_became_a_number(estate: Estate) -> None:
    """crm.customers.phone changed type: the CRM now stores the E.164 digits as a BIGINT."""
    if estate.backend == "Postgres":
        estate.execute(
            "ALTER TABLE crm.customers ALTER COLUMN phone TYPE BIGINT USING CASE "
            "WHEN id = 'C0001' THEN 442079460958 "
            "ELSE CAST(REGEXP_REPLACE(phone, '[^0-9]', '', 'g') AS BIGINT) END"
        )
        return
    columns = (
        "id VARCHAR(12) PRIMARY KEY, email VARCHAR(200), alt_email VARCHAR(200), phone BIGINT, "
        "full_name VARCHAR(120), region VARCHAR(12), address_id INTEGER"
    )
    digits = "REPLACE(REPLACE(REPLACE(phone, '+', ''), ' ', ''), '-', '')"
    # SQLite cannot alter a column's type: the table is rebuilt, as its docs describe, with
    # foreign keys off and the orders' reference left pointing at the name `customers`.
    with sqlite3.connect(estate.dir / "warehouse.crm.db") as conn:
        conn.execute("PRAGMA legacy_alter_table = ON")
        for statement in (
            "ALTER TABLE customers RENAME TO customers_old",
            f"CREATE TABLE customers ({columns})",
            "INSERT INTO customers SELECT id, email, alt_email, "
            f"CASE WHEN id = 'C0001' THEN 442079460958 ELSE CAST({digits} AS INTEGER) END, "
            "full_name, region, address_id FROM customers_old",
            "DROP TABLE customers_old",
        ):
            conn.execute(statement)
    conn.close()


# --- 4. per-column stored forms -----------------------------------------------------------------


def orders_lower_cased(estate: Estate) -> None:
    lower = "UPDATE crm.orders SET customer_id = 'c0001' WHERE customer_id = 'C0001'"
    if estate.backend == "Postgres":
        estate.execute(
            "ALTER TABLE crm.orders DROP CONSTRAINT IF EXISTS orders_customer_id_fkey", lower
        )
    else:  # the warehouse's connections enforce foreign keys; the source that wrote it did not
        with sqlite3.connect(estate.dir / "warehouse.crm.db") as conn:
            conn.execute(lower.replace("crm.orders", "orders"))
        conn.close()
    estate.refresh_derived()


# How a catalog declares the form a column stores an identifier in (DatasetSpec.stored_forms).
ORDERS_FORM = """    holds_subject: {customer_id: customer_id}
    stored_forms: {customer_id: {case: lower}}
"""


def orders_lower_cased_and_declared(estate: Estate) -> None:
    orders_lower_cased(estate)
    estate.edit_catalog("    holds_subject: {customer_id: customer_id}\n", ORDERS_FORM)


# --- 5. checks that check nothing ---------------------------------------------------------------


def only_alice_buys_product_21(estate: Estate) -> None:
    """Product 21 is popular only through the subject's order: her erasure must drop it."""
    estate.execute(
        "INSERT INTO crm.products (id, name, price) VALUES (21, 'Product 21', 500)",
        "INSERT INTO crm.orders (id, customer_id, product_id, amount, ordered_on, month) "
        "VALUES (9001, 'C0001', 21, 500, '2026-11-03', '2026-11')",
    )
    estate.refresh_derived()


def popular_products_rebuild_is_a_no_op(estate: Estate) -> None:
    only_alice_buys_product_21(estate)
    estate.edit_catalog(
        "CREATE TABLE marts.popular_products AS",
        "CREATE TABLE IF NOT EXISTS marts.popular_products AS",
    )


def archive_key_named_otherwise(estate: Estate) -> People:
    """The archive's producer named the subject's key from her id as its own source stores it
    ('c0001'): a shred that looks for the catalog's form finds no key."""
    with estate.reader() as svc:
        pepper = svc.peppers.current()
        usual = subject_hash(pepper, "customer_id", SUBJECT)
        other = subject_hash(pepper, "customer_id", "c0001")
        svc.keystore.create(other, ARCHIVE)
        svc.keystore.shred(usual)
        with svc.warehouse.engine("warehouse").begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE archive.customer_events SET subject_hash = :o WHERE subject_hash = :u"
                ),
                {"o": other, "u": usual},
            )
    return People(extra_keys=(other,))


def extend_after_verify(estate: Estate, svc: Services, ref: str) -> None:
    workflow.extend(svc, ref, 1, "complex request: the archive restore takes longer", "dana")


def the_subject_comes_back(estate: Estate, svc: Services, ref: str) -> None:
    """Another application writes her customer row and an order again, past the tombstone."""
    with svc.warehouse.engine("warehouse").begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO crm.customers (id, email, phone, full_name, region) VALUES "
                "('C0001', 'alice.smith@example.com', NULL, 'Alice Smith', 'north')"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO crm.orders (id, customer_id, product_id, amount, ordered_on, month) "
                "VALUES (9002, 'C0001', 2, 50, '2026-11-30', '2026-11')"
            )
        )


def claims_deleted(name: str, why: str) -> Callable[[Run], dict[str, str]]:
    """A completion whose record says `name` was deleted, where deleting it is impossible."""

    def claims(run: Run) -> dict[str, str]:
        if run.completed and run.rulings.get(name) == "delete_artefact":
            return {name: f"recorded deleted, but {why}"}
        return {}

    return claims


DELETE_IT = answer("Delete the artefact", justification="tempting: just delete it")


# --- 6. system of record ------------------------------------------------------------------------


def crm_aliased_onto_its_copy(estate: Estate) -> People:
    """The CRM (its own database, still holding everyone) is catalogued, and also declared an
    alias of its warehouse copy."""
    url = estate.new_database("crm_source")
    engine = database_engine(url)
    with estate.reader() as svc, svc.warehouse.engine("warehouse").connect() as wh:
        people = [
            tuple(r) for r in wh.execute(sa.text("SELECT id, email, phone FROM crm.customers"))
        ]
    with engine.begin() as conn:
        if estate.backend == "Postgres":
            conn.execute(sa.text("CREATE SCHEMA crm"))
        conn.execute(
            sa.text(
                "CREATE TABLE crm.customers (id VARCHAR(12) PRIMARY KEY, email VARCHAR(200), "
                "phone VARCHAR(40))"
            )
        )
        conn.execute(
            sa.text("INSERT INTO crm.customers (id, email, phone) VALUES (:i, :e, :p)"),
            [{"i": i, "e": e, "p": p} for i, e, p in people],
        )
    engine.dispose()
    estate.edit_catalog("connections:\n", f'connections:\n  crm_source: {{url: "{url}"}}\n')
    estate.edit_catalog(
        '    aliases: [{namespace: "postgres://crm-db:5432", name: crm.public.customers}]\n',
        '    aliases: [{namespace: "postgres://crm-db:5432", name: crm.public.customers},\n'
        "              {namespace: crm, name: crm.customers}]\n",
    )
    estate.edit_catalog(
        "  # --- marts, rebuilt",
        "  - namespace: crm\n"
        "    name: crm.customers\n"
        "    connection: crm_source\n"
        "    kind: table\n"
        "    holds_subject: {email: [email], customer_id: id, phone: phone}\n"
        "    pii_columns: [email, phone]\n"
        "    owner: crm-team\n"
        "    description: The CRM itself, the system of record.\n\n"
        "  # --- marts, rebuilt",
    )
    return People(extra_databases=(url,))


def crm_sync(**alice: str | None) -> Hook:
    """The CRM still holds her: the nightly sync after the completion brings her row (as the
    CRM now writes it) through the suppression list, as the crm_ingest DAG does."""

    def sync(estate: Estate, svc: Services, ref: str) -> None:
        row: dict[str, str | None] = {"id": "C0001R", "email": None, "alt_email": None}
        row.update(phone=None, full_name="Alice Smith", region="north", address_id=None)
        row.update(alice)
        export = estate.dir / "crm_delta.csv"
        with export.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(row))
            writer.writeheader()
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        dataset = svc.catalog.by_name("crm.customers")
        ingest_crm_export(
            export,
            engine=svc.warehouse.engine("warehouse"),
            table=dataset.name,
            identifier_columns=identifier_columns(svc.catalog, dataset),
            peppers=svc.peppers.all_versions(),
            suppression=svc.suppression,
        )

    return sync


RESYNCED = People(subject_ids=frozenset({SUBJECT, "C0001R"}))


def key_already_gone(estate: Estate) -> None:
    """Someone destroyed the subject's archive key by hand before the request."""
    with estate.reader() as svc:
        svc.keystore.shred(subject_hash(svc.peppers.current(), "customer_id", SUBJECT))


# ---------------------------------------------------------------------------------------------
# The scenarios


def stored(family: int, name: str, what: str, columns: dict[str, Any], id_type: str,
           identifier: str, other: dict[str, Any] | None = None) -> Scenario:  # fmt: skip
    """Family 7: the subject (C9001) stored in a hostile form; `other` a second person."""
    rows = [("C9001", columns)] + ([("C9002", other)] if other is not None else [])
    return Scenario(
        family, name, what, customers(*rows), id_type, identifier,
        People(subject_ids=frozenset({"C9001"})), Drive(dpo=Dpo.TEMPTING),
        cause=r"found nowhere|not held|subject_search|email|phone|identif",
    )  # fmt: skip


def fullwidth(text: str) -> str:
    """`text` in the fullwidth forms East Asian input methods type (NFKC folds them back)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


HOUSEHOLD_PHONE = update("UPDATE crm.customers SET phone = '+44 20 7946 0958' WHERE id = 'C0002'")
SHARED_EMAIL = update(
    "UPDATE crm.customers SET alt_email = 'alice.smith@example.com' WHERE id = 'C0002'"
)
EXTENSIONS = customers(
    ("C9001", {"phone": "+44 20 7946 0958 ext. 99", "email": "ext99@example.org"}),
    ("C9002", {"phone": "+44 20 7946 0958 ext. 98", "email": "ext98@example.org"}),
)
COLLEAGUE = People(subject_ids=frozenset({"C9001"}))

SCENARIOS: list[Scenario] = [
    # 0. The control: the demo request on an untouched copy (the harness judges it true).
    Scenario(0, "demo-as-shipped", "nothing hostile: the demo request on a copy of the estate",
             expect=DONE),
    # 1. Lineage shrinks: the archive's writer reports less than it read before.
    Scenario(1, "late-fail-of-the-writing-run",
             "a FAIL arrives for the run that wrote the archive (after its COMPLETE)",
             lineage(event("FAIL", WRITER_RUN, "2026-11-28T01:10:00Z", inputs=[],
                           outputs=False)), cause=ARCHIVE_CAUSE),
    Scenario(1, "fail-of-an-earlier-run",
             "an earlier run of the writer FAILed part-way, reading only the customers",
             lineage(event("FAIL", "01937a10-0000-7000-8000-0000000000a0",
                           "2026-11-27T01:04:00Z", inputs=_archive_event()["inputs"][:1])),
             cause=ARCHIVE_CAUSE),
    Scenario(1, "later-complete-with-no-inputs",
             "a later COMPLETE of the writer lists no inputs",
             lineage(event("START", "01937a10-0000-7000-8000-0000000000a1",
                           "2026-11-29T01:00:00Z", inputs=[]),
                     event("COMPLETE", "01937a10-0000-7000-8000-0000000000a1",
                           "2026-11-29T01:04:00Z", inputs=[])), cause=ARCHIVE_CAUSE),
    Scenario(1, "later-complete-with-no-inputs-tempting",
             "as above; the DPO accepts the archive as non-personal (its last run read nothing)",
             lineage(event("COMPLETE", "01937a10-0000-7000-8000-0000000000a1",
                           "2026-11-29T01:04:00Z", inputs=[])),
             how=Drive(dpo=Dpo.TEMPTING,
                       answers={ARCHIVE: answer("Accept as non-personal",
                                                justification="its last run read nothing")}),
             cause=ARCHIVE_CAUSE),
    Scenario(1, "late-abort-of-the-writing-run",
             "an ABORT arrives for the run that wrote the archive",
             lineage(event("ABORT", WRITER_RUN, "2026-11-28T01:10:00Z", inputs=[],
                           outputs=False)), cause=ARCHIVE_CAUSE),
    Scenario(1, "later-run-aborted",
             "a later run of the writer STARTs without inputs and is ABORTed",
             lineage(event("START", "01937a10-0000-7000-8000-0000000000a2",
                           "2026-11-29T01:00:00Z", inputs=[]),
                     event("ABORT", "01937a10-0000-7000-8000-0000000000a2",
                           "2026-11-29T01:01:00Z", inputs=[])), cause=ARCHIVE_CAUSE),
    Scenario(1, "later-other-event",
             "an OTHER event (metadata outside the run lifecycle) lists no inputs",
             lineage(event("OTHER", "01937a10-0000-7000-8000-0000000000a4",
                           "2026-11-29T01:04:00Z", inputs=[])), cause=ARCHIVE_CAUSE),
    Scenario(1, "streaming-run-with-no-inputs",
             "a later, still RUNNING (streaming) run of the writer lists no inputs",
             lineage(event("START", "01937a10-0000-7000-8000-0000000000a5",
                           "2026-11-29T01:00:00Z", inputs=[]),
                     event("RUNNING", "01937a10-0000-7000-8000-0000000000a5",
                           "2026-11-29T01:30:00Z", inputs=[])), cause=ARCHIVE_CAUSE),
    Scenario(1, "inputs-renamed",
             "a later COMPLETE reads crm.public.customers_v2/orders_v2 (uncatalogued)",
             lineage(event("COMPLETE", "01937a10-0000-7000-8000-0000000000a3",
                           "2026-11-29T01:04:00Z", renamed=True)), cause=ARCHIVE_CAUSE),
    # 2. Identity reaches others.
    Scenario(2, "household-phone", "Bob (C0002) stores the household phone; request by email",
             HOUSEHOLD_PHONE, cause=r"phone|shar"),
    Scenario(2, "household-phone-tempting", "as above; the DPO deletes the row it asks about",
             HOUSEHOLD_PHONE, how=Drive(dpo=Dpo.TEMPTING), cause=r"phone|shar"),
    Scenario(2, "household-phone-honest", "as above; the DPO keeps Bob's row",
             HOUSEHOLD_PHONE, how=Drive(dpo=Dpo.HONEST), cause=r"phone|shar"),
    Scenario(2, "shared-email", "Bob's alt_email is Alice's address; request by email",
             SHARED_EMAIL, cause=r"email|shar"),
    Scenario(2, "shared-email-tempting", "as above; the DPO deletes the row it asks about",
             SHARED_EMAIL, how=Drive(dpo=Dpo.TEMPTING), cause=r"email|shar"),
    Scenario(2, "shared-email-honest", "as above; the DPO keeps Bob's row",
             SHARED_EMAIL, how=Drive(dpo=Dpo.HONEST), cause=r"email|shar"),
    Scenario(2, "family-mailbox",
             "two customers share family@example.org; one of them asks, by that address",
             customers(("C9001", {"email": "family@example.org"}),
                       ("C9002", {"email": "family@example.org"})),
             "email", "family@example.org", People(subject_ids=frozenset({"C9001"})),
             Drive(dpo=Dpo.TEMPTING), expect=STOP, cause=r"email|shar"),
    Scenario(2, "extension-by-phone",
             "colleagues on ext. 99 and ext. 98 of Alice's number; request by ext. 99",
             EXTENSIONS, "phone", "+44 20 7946 0958 ext. 99", COLLEAGUE,
             cause=r"phone|shar|extension"),
    Scenario(2, "extension-by-email",
             "as above; request by the ext. 99 colleague's email (expands to the phone)",
             EXTENSIONS, "email", "ext99@example.org", COLLEAGUE, Drive(dpo=Dpo.TEMPTING),
             cause=r"phone|shar|extension"),
    # 3. Catalog drift: stop and name what to fix, never "no rows".
    Scenario(3, "table-renamed-in-catalog", "the catalog names crm.orders `crm.order`",
             catalog_edit("    name: crm.orders\n", "    name: crm.order\n"),
             expect=STOP, cause=r"crm\.order\b"),
    Scenario(3, "table-renamed-in-warehouse", "crm.orders is now crm.orders_2026; the "
             "catalog still says crm.orders", orders_table_renamed, expect=STOP,
             cause=r"crm\.orders\b"),
    Scenario(3, "column-missing", "the catalog's crm.orders.customer_ref does not exist",
             catalog_edit("    holds_subject: {customer_id: customer_id}\n",
                          "    holds_subject: {customer_id: customer_ref}\n"),
             expect=STOP, cause=r"customer_ref"),
    Scenario(3, "root-column-missing",
             "the catalog's crm.customers.secondary_email (an email column) does not exist",
             catalog_edit("holds_subject: {email: [email, alt_email],",
                          "holds_subject: {email: [email, alt_email, secondary_email],"),
             expect=STOP, cause=r"secondary_email"),
    Scenario(3, "reference-column-missing",
             "the catalog's reference column crm.customers.address_ref does not exist",
             catalog_edit("{column: address_id, dataset: crm.addresses",
                          "{column: address_ref, dataset: crm.addresses"),
             expect=STOP, cause=r"address_ref"),
    Scenario(3, "column-type-changed", "crm.customers.phone became a BIGINT; request by phone",
             phone_became_a_number, "phone", "+44 20 7946 0958", cause=r"phone"),
    # 4. Per-column stored forms.
    Scenario(4, "orders-lower-cased", "crm.orders stores `c0001` for customer C0001",
             orders_lower_cased, cause=r"crm\.orders|customer_id"),
    Scenario(4, "orders-lower-cased-declared",
             "as above, the column's form declared in the catalog (stored_forms)",
             orders_lower_cased_and_declared, expect=DONE),
    # 5. Checks that check nothing.
    Scenario(5, "orders-daily-not-rebuilt",
             "build_marts ends `success` without rebuilding marts.orders_daily",
             how=Drive(noop_dags=frozenset({"build_marts"})),
             cause=r"marts\.orders_daily"),
    Scenario(5, "monthly-revenue-not-rebuilt",
             "build_reports ends `success` without rebuilding reports.monthly_revenue",
             how=Drive(noop_dags=frozenset({"build_reports"})),
             cause=r"reports\.monthly_revenue"),
    Scenario(5, "popular-products-not-rebuilt",
             "the rebuild SQL of marts.popular_products is CREATE TABLE IF NOT EXISTS",
             popular_products_rebuild_is_a_no_op,
             cause=r"marts\.popular_products"),
    Scenario(5, "shred-finds-no-key",
             "the archive key is named from `c0001`: the shred finds no key of C0001",
             archive_key_named_otherwise, how=Drive(answers={ARCHIVE: None}), expect=STOP,
             cause=ARCHIVE_CAUSE + "|key"),
    Scenario(5, "shred-key-already-gone",
             "the subject's archive key was destroyed by hand before the request",
             key_already_gone, cause=ARCHIVE_CAUSE + "|key"),
    # complete looks again while it holds the identifier: it signs a fresh verification.
    Scenario(5, "complete-on-stale-verification",
             "the deadline is extended after verify passed; complete runs after it",
             how=Drive(after_verify=extend_after_verify), cause=r"verif"),
    Scenario(5, "complete-after-failed-verification",
             "she is written back before verify; verify fails; complete runs anyway",
             how=Drive(after_act=the_subject_comes_back, complete_after_failed_verify=True),
             expect=STOP, cause=r"verif"),
    Scenario(5, "delete-an-uncatalogued-cache",
             "the DPO deletes recs.customer_recommendations, which nothing can reach",
             how=Drive(answers={"recs.customer_recommendations": DELETE_IT}), expect=STOP,
             cause=r"recs\.customer_recommendations",
             false_claims=claims_deleted(
                 "recs.customer_recommendations", "it is in no catalog: nothing can reach it"
             )),
    Scenario(5, "delete-an-immutable-backup",
             "the DPO deletes backup.crm_nightly (WORM, holds everyone)",
             how=Drive(answers={"backup.crm_nightly": DELETE_IT}), expect=STOP,
             cause=r"backup\.crm_nightly",
             false_claims=claims_deleted(
                 "backup.crm_nightly", "an immutable (WORM) backup cannot be deleted"
             )),
    # 6. System of record.
    Scenario(6, "crm-aliased-onto-its-copy",
             "the CRM database (catalogued, holds Alice) is an alias of its warehouse copy",
             crm_aliased_onto_its_copy, cause=r"alias|crm\.customers"),
    Scenario(6, "crm-resyncs-under-a-new-id",
             "after completion the CRM syncs her back under a new id, email as first stored",
             people=RESYNCED, how=Drive(after_complete=crm_sync(email=" Alice.Smith@Example.com"))),
    Scenario(6, "crm-resyncs-in-display-form",
             'as above, email as `"Alice Smith" <ALICE.SMITH@EXAMPLE.COM>`',
             people=RESYNCED,
             how=Drive(after_complete=crm_sync(email='"Alice Smith" <ALICE.SMITH@EXAMPLE.COM>'))),
    Scenario(6, "crm-resyncs-by-phone-00",
             "as above, only her phone, written 0044 20 7946 0958",
             people=RESYNCED, how=Drive(after_complete=crm_sync(phone="0044 20 7946 0958"))),
    # 7. Stored forms (the subject C9001 stored one way, requested another).
    stored(7, "nfkc-fullwidth", "email in fullwidth forms (NFKC)",
           {"email": fullwidth("ann.lee@example.org")}, "email", "ann.lee@example.org"),
    stored(7, "nfkc-ligature", "email with the ﬁ ligature (NFKC)",
           {"email": "\ufb01ona@example.org"}, "email", "fiona@example.org"),
    stored(7, "zero-width-joiner", "email with a zero-width joiner inside",
           {"email": "ze\u200dro@example.org"}, "email", "zero@example.org"),
    stored(7, "soft-hyphen", "email with a soft hyphen (Cf) inside",
           {"email": "soft\u00adhyphen@example.org"}, "email", "softhyphen@example.org"),
    stored(7, "bidi-marks", "email wrapped in LRM/RLM marks",
           {"email": "\u200ebidi@example.org\u200f"}, "email", "bidi@example.org"),
    stored(7, "upper-case", "email in capitals",
           {"email": "ANN.CASE@EXAMPLE.ORG"}, "email", "ann.case@example.org"),
    stored(7, "sharp-s", "stored GROSS, requested groß",
           {"email": "GROSS@EXAMPLE.DE"}, "email", "groß@example.de"),
    stored(7, "capital-sharp-s", "stored GROẞ (U+1E9E), requested groß",
           {"email": "GRO\u1e9e@EXAMPLE.DE"}, "email", "groß@example.de"),
    stored(7, "turkish-dotted-i", "stored İRMAK (a Turkish-locale upper-casing)",
           {"email": "\u0130RMAK@EXAMPLE.COM.TR"}, "email", "irmak@example.com.tr"),
    stored(7, "confusable-cyrillic-a", "a second person stores \u0430nn.conf (Cyrillic \u0430)",
           {"email": "ann.conf@example.org"}, "email", "ann.conf@example.org",
           other={"email": "\u0430nn.conf@example.org"}),
    stored(7, "rfc5322-display-name", 'stored "Ann Display" <ann.display@example.org>',
           {"email": '"Ann Display" <ann.display@example.org>'}, "email",
           "ann.display@example.org"),
    stored(7, "rfc5322-angle-brackets", "stored <ann.angle@example.org>",
           {"email": "<ann.angle@example.org>"}, "email", "ann.angle@example.org"),
    stored(7, "rfc5322-comment", "stored ann.comment@example.org (Ann at home)",
           {"email": "ann.comment@example.org (Ann at home)"}, "email",
           "ann.comment@example.org"),
    stored(7, "rfc5322-comment-in-address", "stored ann.cfws(home)@example.org",
           {"email": "ann.cfws(home)@example.org"}, "email", "ann.cfws@example.org"),
    stored(7, "rfc5322-quoted-local-part", 'stored "ann.quoted"@example.org',
           {"email": '"ann.quoted"@example.org'}, "email", "ann.quoted@example.org"),
    stored(7, "idna-ideographic-full-stop", "stored ann.dot@example\u3002org (an IDNA dot)",
           {"email": "ann.dot@example\u3002org"}, "email", "ann.dot@example.org"),
    stored(7, "idna-u-label-stored", "stored ann@bücher.example, requested by its A-label",
           {"email": "ann@b\u00fccher.example"}, "email", "ann@xn--bcher-kva.example"),
    stored(7, "idna-a-label-stored", "stored ann@xn--bcher-kva.example, requested by its U-label",
           {"email": "ann@xn--bcher-kva.example"}, "email", "ann@b\u00fccher.example"),
    stored(7, "phone-national", "stored 020 7946 1234, requested +44",
           {"phone": "020 7946 1234"}, "phone", "+44 20 7946 1234"),
    stored(7, "phone-00", "stored 0044 20 7946 2345",
           {"phone": "0044 20 7946 2345"}, "phone", "+442079462345"),
    stored(7, "phone-trunk-in-brackets", "stored +44 (0)20 7946 7890",
           {"phone": "+44 (0)20 7946 7890"}, "phone", "+44 20 7946 7890"),
    stored(7, "phone-dots", "stored +44.20.7946.3456",
           {"phone": "+44.20.7946.3456"}, "phone", "+44 20 7946 3456"),
    stored(7, "phone-arabic-indic-digits", "stored in Arabic-Indic digits",
           {"phone": "\u0660\u0662\u0660 \u0667\u0669\u0664\u0666 \u0664\u0665\u0666\u0667"},
           "phone", "+44 20 7946 4567"),
    stored(7, "phone-fullwidth-digits", "stored in fullwidth digits",
           {"phone": fullwidth("+44 20 7946 5678")}, "phone", "+44 20 7946 5678"),
    stored(7, "phone-extension-forms", "stored x12, requested ext. 12",
           {"phone": "+44 20 7946 6789 x12"}, "phone", "+44 20 7946 6789 ext. 12"),
]  # fmt: skip
assert len({s.id for s in SCENARIOS}) == len(SCENARIOS)


# ---------------------------------------------------------------------------------------------
# Running a scenario and judging what it left


@dataclass
class Outcome:
    scenario: Scenario
    backend: str
    run: Run
    left: dict[str, str]  # the subject's data still there (not retained on the record)
    others: list[str]  # other people's data that changed
    verdict: Verdict = Verdict.STOPPED
    seconds: float = 0.0

    @property
    def problems(self) -> list[str]:
        found = []
        if self.verdict not in self.scenario.expect:
            found.append(f"ended {self.verdict.value}, expected {_either(self.scenario.expect)}")
        if self.left and self.run.completed:
            found.append("completed while the subject remains: " + _items(self.left))
        if self.others:
            found.append("another person's data changed: " + "; ".join(self.others))
        if self.verdict is Verdict.UNCLEAR_STOP:
            found.append(f"the stop does not name /{self.scenario.cause}/")
        return found

    def cell(self) -> str:
        """The run in the published table: its verdict, and ✗ when the scenario failed."""
        if not self.problems:
            return self.verdict.value
        if self.verdict is Verdict.STOPPED:
            return "stopped, a true completion expected ✗"
        if self.verdict is Verdict.TRUE_COMPLETION:
            return "completed (nothing left), but only a stop is right ✗"
        return f"{self.verdict.value} ✗"

    def describe(self) -> str:
        run = self.run
        where = f"at {run.stopped_at}" if run.stopped_at else ""
        error = f"{run.error}: " if run.error else ""
        return f"{run.status} {where} {error}{run.reason[:400]}".strip()


def _either(verdicts: frozenset[Verdict]) -> str:
    return " or ".join(sorted(v.value for v in verdicts))


def _items(found: dict[str, str]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in found.items())


def judge(scenario: Scenario, backend: str, run: Run, left: dict[str, str],
          others: list[str]) -> Outcome:  # fmt: skip
    outcome = Outcome(scenario, backend, run, left, others)
    if run.completed:
        outcome.verdict = Verdict.FALSE_COMPLETION if left else Verdict.TRUE_COMPLETION
    else:
        named = bool(re.search(scenario.cause, run.reason, re.IGNORECASE))
        outcome.verdict = Verdict.STOPPED if named and run.reason else Verdict.UNCLEAR_STOP
    if others:
        outcome.verdict = Verdict.WRONG_PERSON
    return outcome


def play(estates: Estates, scenario: Scenario, backend: str, lane: int = 0) -> Outcome:
    started = time.perf_counter()
    estate = estates.copy(scenario.id, backend, lane)
    try:
        outcome = _play(estate, scenario, backend)
    finally:
        estate.close()
    outcome.seconds = time.perf_counter() - started
    return outcome


def _play(estate: Estate, scenario: Scenario, backend: str) -> Outcome:
    people = scenario.people
    if scenario.setup is not None:
        changed = scenario.setup(estate)
        if changed is not None:
            people = People(
                subject_ids=people.subject_ids,
                extra_databases=changed.extra_databases or people.extra_databases,
                order_tables=changed.order_tables or people.order_tables,
                extra_keys=changed.extra_keys or people.extra_keys,
            )
    before = others_snapshot(estate, people)
    ref = f"HOSTILE-{SCENARIOS.index(scenario) + 1:03d}"
    run = drive(estate, request_conf(ref, scenario.id_type, scenario.identifier), scenario.how)
    left = residue(estate, people, retained=_retained(run))
    if scenario.false_claims is not None:
        left.update(scenario.false_claims(run))
    return judge(scenario, backend, run, left, touched(before, others_snapshot(estate, people)))


def _retained(run: Run) -> frozenset[str]:
    """Datasets the completion record says still hold the subject (retained, or rebuilt by a
    date): what remains there is on the record, not a false claim."""
    return frozenset(n for n, option in run.rulings.items() if option in RETAINING)


# ---------------------------------------------------------------------------------------------
# Fixtures: one estate per backend, copied per scenario; the session's OpenBao


@pytest.fixture(scope="module")
def admin(postgres_url: str) -> Iterator[HostileAdmin]:
    conn = HostileAdmin(postgres_url)
    try:
        yield conn
    finally:
        conn.close()  # and drops the databases it created


@pytest.fixture(scope="module")
def estates(
    tmp_path_factory: pytest.TempPathFactory,
    openbao: EmbeddedOpenBao,
    admin: HostileAdmin,
    postgres_url: str,
) -> Iterator[Estates]:
    # SQLite estates on tmpfs where there is one: a hundred runs of fsyncs add up to minutes.
    shm = Path("/dev/shm")
    base = (
        Path(tempfile.mkdtemp(prefix="hostile-", dir=shm))
        if shm.is_dir()
        else tmp_path_factory.mktemp("hostile")
    )
    try:
        yield Estates(base, openbao, admin, postgres_url.rpartition("/")[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)


Played = dict[tuple[str, str], Outcome | BaseException]
# Threads of scenarios per backend, each on its own estate and Vault mounts: a Postgres run
# mostly waits on the server, so two of them overlap with the SQLite one.
LANES = {"SQLite": 1, "Postgres": 2}


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, estates: Estates
) -> Callable[[Scenario, str], Outcome]:
    """Every scenario this session selected, played once per backend before the first test
    asks: the SQLite and the Postgres runs side by side (each backend has its own Vault
    mounts), each backend's one after the other. The tally's test asks for all of them."""
    by_id = {s.id: s for s in SCENARIOS}
    wanted: set[tuple[str, str]] = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is not None and item.module.__name__ == __name__:
            if "scenario" in params:
                wanted.add((params["scenario"].id, params["backend"]))
            elif item.name.startswith("test_the_published_tally"):
                wanted.update((s.id, b) for s in SCENARIOS for b in BACKENDS)
    played: Played = {}

    def play_lane(backend: str, lane: int, scenarios: list[Scenario]) -> None:
        for scenario in scenarios:
            try:
                played[(scenario.id, backend)] = play(estates, scenario, backend, lane)
            except BaseException as exc:  # a harness failure: the scenario's test shows it
                played[(scenario.id, backend)] = exc

    lanes = []
    for backend in BACKENDS:
        mine = [s for s in SCENARIOS if (s.id, backend) in wanted]
        count = LANES[backend]
        lanes += [(backend, n, mine[n::count]) for n in range(count) if mine[n::count]]
    threads = [threading.Thread(target=play_lane, args=lane) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def outcome(scenario: Scenario, backend: str) -> Outcome:
        key = (by_id[scenario.id].id, backend)
        if key not in played:
            played[key] = play(estates, scenario, backend)
        found = played[key]
        if isinstance(found, BaseException):
            raise found
        return found

    return outcome


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_a_hostile_estate_ends_complete_and_true_or_stopped_naming_the_cause(
    outcomes: Callable[[Scenario, str], Outcome], scenario: Scenario, backend: str
) -> None:
    outcome = outcomes(scenario, backend)
    assert not outcome.problems, (
        f"{scenario.id} on {backend} ({scenario.what}): "
        + " | ".join(outcome.problems)
        + f" || the run: {outcome.describe()}"
    )


# ---------------------------------------------------------------------------------------------
# The tally, published beside the fault matrix


FAMILIES = {
    0: "Control (the demo estate as shipped)",
    1: "Lineage shrinks (FAIL/ABORT/empty or renamed inputs of the archive's writer)",
    2: "Identity reaches others (household phone, shared email, phone extensions)",
    3: "Catalog drift (table renamed, column missing, column type changed)",
    4: "Per-column stored forms (`c0001` for `C0001`, with and without a declaration)",
    5: "Checks that check nothing (rebuilds that did not run, no key, stale verify, "
    "deleting what cannot be reached)",
    6: "System of record (the CRM aliased onto its warehouse copy; the CRM syncs her back)",
    7: "Stored forms (NFKC, format characters, case incl. ß and İ, confusables, RFC 5322, "
    "IDNA, phone forms and digits)",
}


def render(results: list[Outcome]) -> str:
    head = (
        "| family | scenarios | runs | false completions | wrong-person deletions "
        "| stopped with reason | true completions | other failures |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for family, title in FAMILIES.items():
        mine = [o for o in results if o.scenario.family == family]
        # Each run counted once: a stop or a completion that fails its scenario otherwise
        # (the wrong cause named, a stop where the catalog said how to finish) is "other".
        count = {v: sum(o.verdict is v for o in mine) for v in Verdict}
        for v in (Verdict.STOPPED, Verdict.TRUE_COMPLETION):
            count[v] = sum(o.verdict is v and not o.problems for o in mine)
        other = len(mine) - sum(
            count[v]
            for v in (Verdict.FALSE_COMPLETION, Verdict.WRONG_PERSON, Verdict.STOPPED,
                      Verdict.TRUE_COMPLETION)
        )  # fmt: skip
        lines.append(
            f"| {family}. {title} | {len(mine) // len(BACKENDS)} | {len(mine)} "
            f"| {count[Verdict.FALSE_COMPLETION]} "
            f"| {count[Verdict.WRONG_PERSON]} | {count[Verdict.STOPPED]} "
            f"| {count[Verdict.TRUE_COMPLETION]} | {other} |"
        )
    rows = ["| scenario | what the estate does | SQLite | Postgres |", "|---|---|---|---|"]
    for scenario in SCENARIOS:
        cells = []
        for backend in BACKENDS:
            o = next(r for r in results if r.scenario is scenario and r.backend == backend)
            cells.append(o.cell())
        rows.append(f"| `{scenario.id}` | {scenario.what} | " + " | ".join(cells) + " |")
    failing = sum(bool(o.problems) for o in results)
    return SECTION.format(
        runs=len(results),
        scenarios=len(SCENARIOS),
        failing=failing,
        tally="\n".join(lines),
        table="\n".join(rows),
    )


SECTION = """\
## Hostile estates: does `completed` stay true when the estate fights back?

<!-- Generated by tests/integration/test_hostile_estates.py; do not edit by hand. -->

{scenarios} scenarios, each run on a copy of the demo estate on SQLite and on Postgres
({runs} runs), through the real workflow (register, plan, act, DPO rulings, verify,
complete). A run passes when it ends **completed with nothing of the subject left** (read
independently: raw SQL over every table the subject's rows reach, the subject's keys in
Vault, each rebuilt artefact compared with its SQL over the cleaned sources) **and nobody
else touched** (every other person's rows and keys snapshotted before, compared after), or
**stopped with a reason that names the cause** (a failed check, an escalation left for the
DPO, an error). What stays where a DPO ruling retained it on the record (an Art. 17(3)
exemption, a rebuild by a date) is not counted as left. Where the DPO must rule, the
scenario answers with the ruling the hostile input makes tempting (delete the row, confirm
not held, accept as non-personal) and, where it differs, the honest one.

**{failing} of {runs} runs fail** (✗): a false completion, a wrong-person deletion, or a
stop that does not name its cause / a completion where only a stop is right.

{tally}

{table}
"""


def test_the_published_tally_is_the_one_this_run_produced(
    outcomes: Callable[[Scenario, str], Outcome],
) -> None:
    results = [outcomes(s, b) for s in SCENARIOS for b in BACKENDS]
    if publish(DOC, "hostile-estates", render(results)):
        pytest.fail(f"{DOC.relative_to(REPO)} was out of date: rewritten; review and commit it")
