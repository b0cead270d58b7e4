"""Restore replay of a backup of the CRM's customers against a plain scan of the same table.

The table is shaped like the demo's `crm.customers` (id, email, alt_email, phone, full_name,
region, address_id; every row a different person, one in 20 emails padded and mixed case as
an export writes them, one in 10 people with an alt_email, nine in 10 with a phone), in a
catalog of that one dataset on a SQLite warehouse, with its store on SQLite and its keys and
pepper in an `EmbeddedOpenBao` dev server started here. Before the backup's rows come back,
SUBJECTS of its people are erased, half before a pepper rotation and half after, one in five
asked for by customer id and the rest by email: the first REQUESTS of them (split between the
two halves) end to end through `erasure.workflow` (register, plan, tombstone, erase, verify,
complete, on a live table holding only them). The others take the workflow's own tombstone
step (`locate` for their identities, `insert_tombstones`) and a `completed` record signed and
chained by `RecordLedger.append`, whose body is a real request's of the same identifier type
with its tombstone evidence replaced by theirs: a replay cites a request by the tombstones its
completed record lists and by its erase_rows of the dataset, and running each of them through
the workflow would take about a second apiece. Each person's every identifier is tombstoned
(id, email, phone, alt_email: about three tombstones a person, as the workflow makes them).
Then the backup is restored: every row back, the erased people's among them. All of that is
the build, timed apart.

Measured, in this order, each with wall and process CPU seconds and the RSS high-water mark
(`VmHWM`, reset before each step through /proc/self/clear_refs): the baseline, a plain scan
(the columns the replay reads, every row, through SQLAlchemy `yield_per` batches of 1,000, as
tuples; best of two, the first warming the page cache); the CRM ingest's `SuppressionFilter`
over the same rows read as dicts (what the replay runs every row through); and the replay
through `erasure.replay.replay`, what `erasure restore replay --dataset crm.customers` calls
(read, match, attribute, delete by primary key, reclaim, a second read to verify, the signed
`replayed` record), once: it changes the table.

A Postgres variant does the same on the local Postgres (a fresh database, dropped at the end;
the same store, keys and records: the catalog's dataset on a Postgres warehouse instead).
`BENCH_REPLAY_ROWS` sets the rows (default 1,000,000), `BENCH_REPLAY_SUBJECTS` the erased
people (default 1,000), `BENCH_REPLAY_REQUESTS` how many of them go through the workflow
(default 20), `BENCH_REPLAY_POSTGRES_URL` the admin URL (default the local server; empty skips).
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from erasure import workflow
from erasure.actions.tombstone import insert_tombstones
from erasure.audit.records import CompletionRecord, RecordKind, RecordStatus
from erasure.catalog import DatasetSpec
from erasure.config import Settings
from erasure.keys.vault import EmbeddedOpenBao, connect
from erasure.locate import locate, normalise_subject
from erasure.model import Action, SubjectRef
from erasure.provision import initialise
from erasure.pseudonym import subject_hash
from erasure.replay import dataset_named, replay
from erasure.sample.embedded import demo_settings
from erasure.services import Services
from erasure.submission import ErasureRequest
from erasure.suppression import SuppressionFilter, identifier_columns
from local.bench._steps import PeakRss

ROWS = int(os.environ.get("BENCH_REPLAY_ROWS", "1000000"))
SUBJECTS = int(os.environ.get("BENCH_REPLAY_SUBJECTS", "1000"))
REQUESTS = int(os.environ.get("BENCH_REPLAY_REQUESTS", "20"))
POSTGRES = os.environ.get(
    "BENCH_REPLAY_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
DATASET = "crm.customers"
BATCH = 1000  # rows a batch, as the replay reads them
LOAD_CHUNK = 50_000  # rows an INSERT executemany, building
BY_CUSTOMER_ID_EVERY = 5  # one subject in five asked for by customer id, the rest by email
FIRST = ("Bob", "Chen", "Dara", "Eve", "Femi", "Gita", "Hugo", "Ines", "Jon", "Kai", "Lena")
LAST = ("Jones", "Okafor", "Novak", "Silva", "Tanaka", "Weber", "Murphy", "Haddad")
REGIONS = ("north", "south", "east", "west")
COLUMNS = ("id", "email", "alt_email", "phone", "full_name", "region", "address_id")
CATALOG = """\
version: 1
k_threshold: 10
sla_days: 30
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
    holds_subject: {email: [email, alt_email], customer_id: id, phone: phone}
    pii_columns: [email, alt_email, phone, full_name]
    owner: crm-team
"""


def main() -> None:
    """Print the replay, the ingest filter and a plain scan of the same table, SQLite then
    Postgres, with the ratios to the scan."""
    if not 0 < SUBJECTS <= ROWS or REQUESTS < 1:
        raise SystemExit(f"need 0 < subjects <= rows and requests >= 1; got {SUBJECTS}, {ROWS}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"restore replay: {SUBJECTS:,} erased people in a restored {DATASET} of {ROWS:,} rows "
        f"vs a plain scan; load average {load}"
    )
    peak = PeakRss()
    print(f"  memory: {peak.how}")
    with (
        tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp,
        EmbeddedOpenBao() as bao,
    ):
        base = Path(tmp)
        (base / "catalog.yaml").write_text(CATALOG.replace("URL", "sqlite:///warehouse.db"))
        settings = demo_settings(base, bao)
        initialise(connect(settings), settings)
        with Services.open(settings) as svc:
            start = time.perf_counter()
            _create(svc)
            _load(svc, _rows(_subjects()))
            real = _erase_subjects(svc)
            stones = svc.suppression.count()
            print(
                f"  build (not measured): {SUBJECTS:,} people erased in "
                f"{time.perf_counter() - start:.1f} s ({real} through erasure.workflow, "
                f"{SUBJECTS - real} by its tombstone step + RecordLedger.append), "
                f"{stones:,} tombstones over pepper versions "
                f"{[p.version for p in svc.peppers.all_versions()]}"
            )
            _bench(svc, "sqlite", peak)
        if POSTGRES:
            _postgres(base, settings, peak)


# The people ---------------------------------------------------------------------------------


def _subjects() -> list[int]:
    """The customer numbers of the people erased, spread evenly over the table."""
    step = ROWS // SUBJECTS
    return [1 + k * step + step // 2 for k in range(SUBJECTS)]


def _row(n: int) -> tuple[Any, ...]:
    first, last = FIRST[n % len(FIRST)], LAST[n // len(FIRST) % len(LAST)]
    email = f"{first}.{last}.{n}@example.net"
    email = f"  {email.replace('example.net', 'Example.NET')} " if n % 20 == 7 else email.lower()
    alt = f"{first[0]}.{last}.{n}@work.example".lower() if n % 10 == 3 else None
    digits = f"{n // 1_000_000 % 100:02d} {n % 1_000_000:06d}"
    phone = None if n % 10 == 9 else (f"077{digits}" if n % 4 == 1 else f"+44 77{digits}")
    return (f"C{n:07d}", email, alt, phone, f"{first} {last}", REGIONS[n % 4], n // 2 + 1)


def _rows(numbers: list[int] | range) -> Iterator[tuple[Any, ...]]:
    return (_row(n) for n in numbers)


def _subject(k: int, n: int) -> SubjectRef:
    row = _row(n)
    if k % BY_CUSTOMER_ID_EVERY == 0:
        return SubjectRef(type="customer_id", value=row[0])
    return SubjectRef(type="email", value=row[1])


# Build --------------------------------------------------------------------------------------


def _table(schema: str = "crm") -> sa.Table:
    return sa.Table(
        "customers",
        sa.MetaData(),
        sa.Column("id", sa.String(12), primary_key=True),
        sa.Column("email", sa.String(200)),
        sa.Column("alt_email", sa.String(200)),
        sa.Column("phone", sa.String(40)),
        sa.Column("full_name", sa.String(120)),
        sa.Column("region", sa.String(12)),
        sa.Column("address_id", sa.Integer),
        schema=schema,
    )


def _create(svc: Services) -> None:
    engine = svc.warehouse.engine("warehouse")
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("CREATE SCHEMA IF NOT EXISTS crm"))
        _table().create(conn)
    svc.warehouse.forget_tables()


def _load(svc: Services, rows: Iterator[tuple[Any, ...]]) -> None:
    """The rows into crm.customers (COPY on Postgres), in chunks."""
    engine = svc.warehouse.engine("warehouse")
    names = ", ".join(COLUMNS)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            with cursor.copy(f"COPY crm.customers ({names}) FROM STDIN") as copying:
                for row in rows:
                    copying.write_row(row)
            return
        marks = ", ".join("?" for _ in COLUMNS)
        insert = f"INSERT INTO crm.customers ({names}) VALUES ({marks})"
        while chunk := [row for _, row in zip(range(LOAD_CHUNK), rows, strict=False)]:
            conn.exec_driver_sql(insert, chunk)


def _restore(svc: Services) -> None:
    """The backup restored over the table: every row as it was, the erased people's too."""
    engine = svc.warehouse.engine("warehouse")
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM crm.customers"))
    _load(svc, _rows(range(1, ROWS + 1)))
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE crm.customers"))
    svc.warehouse.forget_tables()


def _erase_subjects(svc: Services) -> int:
    """Every subject erased, half under the current pepper and half under a rotated one:
    REQUESTS through the workflow, the others by its tombstone step and a signed record.
    Returns how many went through the workflow."""
    numbers = _subjects()
    half = len(numbers) // 2
    real = {*range(REQUESTS // 2), *range(half, half + REQUESTS - REQUESTS // 2)}
    templates: dict[str, dict[str, Any]] = {}
    order = sorted(range(len(numbers)), key=lambda k: (k >= half, k not in real, k))
    run = uuid.uuid4().hex[:6].upper()
    for k in order:
        if k == half and half:
            svc.peppers.rotate()
        subject, ref = _subject(k, numbers[k]), f"DSR-BENCH-{run}-{k:06d}"
        if k in real:
            record = _through_workflow(svc, ref, subject)
            templates.setdefault(subject.type, record.body)
        else:
            template = templates.get(subject.type) or next(iter(templates.values()))
            _tombstoned_and_recorded(svc, ref, subject, template)
    return len(real & set(range(len(numbers))))


def _through_workflow(svc: Services, ref: str, subject: SubjectRef) -> CompletionRecord:
    """One request end to end, as the DAG's tasks run it; this estate needs no DPO."""
    data = {
        "request_ref": ref,
        "identifier_type": subject.type,
        "identifier": subject.value,
        "received_on": datetime.now(UTC).date().isoformat(),
        "legal_ground": "art17_1_a",
    }
    sealed = svc.submissions.seal(ErasureRequest.parse(data)).conf()
    workflow.register(svc, sealed, f"bench-{ref}")
    plan = workflow.plan_request(svc, ref)
    workflow.tombstone(svc, ref)
    for dataset in workflow.items_for(plan, Action.ERASE_ROWS):
        workflow.erase(svc, ref, dataset)
    pending = workflow.pending_escalations(svc, ref)
    if pending:
        raise SystemExit(f"{ref}: the plan escalates {[i.dataset.name for i in pending]}")
    workflow.verify(svc, ref)
    return workflow.complete(svc, ref)


def _tombstoned_and_recorded(
    svc: Services, ref: str, subject: SubjectRef, template: dict[str, Any]
) -> None:
    """The workflow's tombstone of every identity `locate` finds, and a signed `completed`
    record: the template's body with this subject's tombstone evidence."""
    pepper = svc.peppers.current()
    identities = locate(svc.catalog, svc.warehouse, subject).identities
    evidence = insert_tombstones(svc.suppression, pepper, identities, ref)
    body = copy.deepcopy(template)
    body["tombstone"] = {**body["tombstone"], **evidence.model_dump(mode="json")}
    identity = normalise_subject(svc.catalog, subject)
    hashed = subject_hash(pepper, identity.type, identity.value)
    svc.ledger.append(ref, hashed, RecordKind.COMPLETED, body, RecordStatus.COMPLETE)


# Measure ------------------------------------------------------------------------------------


def _bench(svc: Services, label: str, peak: PeakRss) -> None:
    start = time.perf_counter()
    _restore(svc)
    ds = svc.catalog.by_name(DATASET)
    table = svc.warehouse.table(ds)
    assert table is not None
    columns = [table.c[name] for name in identifier_columns(svc.catalog, ds)]
    print(
        f"{label} warehouse: backup of {ROWS:,} rows restored in "
        f"{time.perf_counter() - start:.1f} s (not measured); replay reads "
        f"{', '.join(c.name for c in columns)}"
    )

    scans = [peak.step(lambda: _scan(svc, ds, columns)) for _ in range(2)]
    scan, read = min(scans, key=lambda s: s[0].seconds)
    assert read == ROWS, f"the scan read {read:,} rows"
    filtered, (kept, dropped) = peak.step(lambda: _filter(svc, ds, columns))
    replayed, done = peak.step(lambda: replay(svc, dataset_named(svc.catalog, DATASET)))
    body = done.body

    print(f"  {'step':<36} {'seconds':>8} {'/ scan':>7} {'cpu s':>7} {'peak RSS':>12}  rows")
    for name, step, rows in (
        ("baseline: plain scan (best of 2)", scan, f"{read:,} read"),
        ("CRM ingest filter (scan + filter)", filtered, f"{dropped:,} dropped"),
        ("replay (erasure restore replay)", replayed, f"{body.rows_erased:,} erased"),
    ):
        print(
            f"  {name:<36} {step.seconds:>8.2f} {step.seconds / scan.seconds:>6.1f}x "
            f"{step.cpu_seconds:>7.2f} {step.peak_mib:>8,.0f} MiB  {rows}"
        )
    verification = body.verification
    print(
        f"  replay: {len(body.cited):,} completed requests cited, pepper versions "
        f"{body.pepper_versions}, {body.tombstones_checked:,} tombstones checked, "
        f"{sum(h.rows for h in body.held):,} rows held back; second read "
        f"{'passed' if verification.passed else 'FAILED'} ({verification.rows_read:,} rows)"
    )
    assert kept + dropped == ROWS and dropped == SUBJECTS, (kept, dropped)
    assert body.rows_erased == SUBJECTS and len(body.cited) == SUBJECTS, body.rows_erased
    assert verification.passed and not done.resumed
    assert _scan(svc, ds, columns) == ROWS - SUBJECTS


def _scan(svc: Services, ds: DatasetSpec, columns: list[sa.Column[Any]]) -> int:
    """Every row's identifier columns, BATCH at a time, as tuples."""
    read = 0
    query = sa.select(*columns).execution_options(yield_per=BATCH)
    with svc.warehouse.connect(ds) as conn:
        for partition in conn.execute(query).partitions():
            read += len(partition)
    return read


def _filter(svc: Services, ds: DatasetSpec, columns: list[sa.Column[Any]]) -> tuple[int, int]:
    """Every row through the ingest's filter, as the replay reads them: (kept, dropped)."""
    flt = SuppressionFilter(
        identifier_columns(svc.catalog, ds),
        svc.peppers.all_versions(),
        svc.suppression.hashes_by_version(),
    )
    kept = 0
    query = sa.select(*columns).execution_options(yield_per=BATCH)
    with svc.warehouse.connect(ds) as conn:
        for partition in conn.execute(query).mappings().partitions():
            kept += sum(1 for _ in flt.filter([dict(row) for row in partition]))
    return kept, flt.counts.read - kept


# Postgres -----------------------------------------------------------------------------------


def _postgres(base: Path, settings: Settings, peak: PeakRss) -> None:
    """The same dataset restored onto a Postgres warehouse: a fresh database, dropped after."""
    name = f"bench_replay_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        print(f"postgres: skipped ({str(exc.orig).strip().splitlines()[0]})")
        admin.dispose()
        return
    try:
        url = f"{POSTGRES.rpartition('/')[0]}/{name}"
        (base / "pg").mkdir()
        catalog = base / "pg" / "catalog.yaml"
        catalog.write_text(CATALOG.replace("URL", url))
        with Services.open(settings.model_copy(update={"catalog_path": catalog})) as svc:
            _create(svc)
            _bench(svc, "postgres", peak)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
