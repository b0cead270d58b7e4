"""The harness of the hostile-estate suite: copies of the demo estate, a request driven through
the real workflow, and the independent look at what the run left (raw SQL and Vault reads,
never the system's own verify).

A scenario edits its copy of the estate (warehouse rows, catalog, lineage), then one request
runs plan -> act -> verify -> complete as gdpr_erasure wires it. Escalations are answered as
the scenario's DPO would: the standard demo answers for the demo's own escalations, and for
anything else the ruling the scenario names (the tempting one, the honest one, or none: the
DPO sends it back and the request stops there).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from erasure import workflow
from erasure.actions.rebuild import RunOutcome
from erasure.audit.records import RecordKind
from erasure.config import Settings
from erasure.errors import ErasureError
from erasure.keys.envelope import EnvelopeCipher
from erasure.keys.keystore import keystore_from_settings
from erasure.keys.pepper import PepperStore
from erasure.keys.vault import EmbeddedOpenBao, connect
from erasure.model import Action, PlanItem
from erasure.provision import initialise
from erasure.pseudonym import normalise, subject_hash
from erasure.rulings import DpoAnswer, RulingOption, options_for
from erasure.sample.embedded import ARCHIVE, anchor_path_for, demo_settings
from erasure.sample.lake import rebuild_lake
from erasure.sample.rematerialise import rematerialise
from erasure.sample.seed import build_demo
from erasure.services import Services
from erasure.store.database import open_store
from tests.integration.fault_injection import PostgresAdmin
from tests.integration.workflow_support import ANSWERS, CONF, answer, register
from tests.integration.workflow_support import trigger as demo_trigger

BACKENDS = ("SQLite", "Postgres")
SUBJECT = "C0001"  # the demo subject, Alice: " Alice.Smith@Example.com", "020 7946 0958"


class Verdict(StrEnum):
    TRUE_COMPLETION = "true completion"
    STOPPED = "stopped with reason"
    FALSE_COMPLETION = "FALSE COMPLETION"
    WRONG_PERSON = "WRONG PERSON TOUCHED"
    UNCLEAR_STOP = "stopped without naming the cause"


class Dpo(StrEnum):
    """How the DPO answers an escalation the demo's standard answers do not cover."""

    NONE = "sends it back"  # no answer: the request waits (stops) on the prompt
    TEMPTING = "tempting ruling"  # what the hostile input makes look right
    HONEST = "honest ruling"


TEMPTING_ORDER = (
    RulingOption.DELETE_ROW,
    RulingOption.DELETE_ARTEFACT,
    RulingOption.NOT_HELD,
    RulingOption.NON_PERSONAL,
)
HONEST_ORDER = (RulingOption.RETAIN_EXEMPTION, RulingOption.REBUILD_BY_DATE)
LABELS = {
    RulingOption.DELETE_ROW: ("Delete this row", {}),
    RulingOption.DELETE_ARTEFACT: ("Delete the artefact", {}),
    RulingOption.NOT_HELD: ("Confirm the subject is not held", {}),
    RulingOption.NON_PERSONAL: ("Accept as non-personal", {}),
    RulingOption.RETAIN_EXEMPTION: ("Retain under an Art. 17(3) exemption", {"exemption": "e"}),
    RulingOption.REBUILD_BY_DATE: ("Rebuild or retrain by a date", {"scheduled_by": "2026-12-15"}),
}
# Rulings that say on the record that the data is still there (and why, or until when).
RETAINING = frozenset({"retain_exemption", "rebuild_by_date"})
# The rules the demo's own escalations are raised under (workflow_support.ANSWERS); 3a: the
# archive holds no key of a customer it never sealed events for.
DEMO_RULES = frozenset({"1", "2a", "3a", "4", "6"})


def ruling_for(item: PlanItem, dpo: Dpo) -> DpoAnswer | None:
    """The DPO's answer to an escalation outside the demo's standard ones."""
    order = {Dpo.TEMPTING: TEMPTING_ORDER, Dpo.HONEST: HONEST_ORDER}.get(dpo, ())
    offered = options_for(item)
    for option in order:
        if option in offered:
            label, params = LABELS[option]
            return answer(label, justification=f"{dpo.value}, hostile-estate suite", **params)
    return None


# ---------------------------------------------------------------------------------------------
# The estate copies


class HostileAdmin(PostgresAdmin):
    def quick(self, name: str) -> None:
        """Commits that do not wait for the disk: these databases are thrown away at the end
        (what a crash could lose is nothing the suite needs)."""
        self.conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')


@dataclass
class Estate:
    """One copy of the demo estate, its own erasure store, the shared OpenBao."""

    name: str
    backend: str
    settings: Settings
    base: Path
    admin: HostileAdmin | None
    server: str | None  # Postgres server URL without a database
    _reader: Services | None = None

    @property
    def catalog_path(self) -> Path:
        return Path(str(self.settings.catalog_path))

    @property
    def dir(self) -> Path:
        return self.catalog_path.parent

    def services(self) -> Services:
        """The system's services, over the catalog as the scenario left it."""
        return Services.open(self.settings)

    @contextmanager
    def reader(self) -> Iterator[Services]:
        """Services over the catalog as copied, before the scenario touched it: what the
        harness reads and writes with, whatever the scenario did to the system's catalog.
        Opened once per estate (closed by `close`); table shapes are read afresh each time."""
        if self._reader is None:
            reference = self.catalog_path.with_name("catalog.reference.yaml")
            self._reader = Services.open(
                self.settings.model_copy(update={"catalog_path": reference})
            )
        self._reader.warehouse.forget_tables()
        yield self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def execute(self, *statements: str, **params: Any) -> None:
        """Run statements on the estate's warehouse, in one transaction."""
        with self.reader() as svc, svc.warehouse.engine("warehouse").begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement), params)

    def refresh_derived(self) -> None:
        """Re-materialise the derived tables after a scenario changed the sources, so the
        estate is consistent before the request (as last night's runs would have left it)."""
        with self.reader() as svc:
            for dag_id in ("build_marts", "build_reports"):
                rematerialise(svc.catalog, svc.warehouse, dag_id)
            with svc.warehouse.engine("warehouse").begin() as conn:
                for name in REBUILT_BY_SQL:
                    conn.execute(sa.text(f"DROP TABLE {name}"))
                    conn.execute(sa.text(f"CREATE TABLE {name} AS {_sql_spec(name)}"))
            svc.warehouse.forget_tables()

    def edit_catalog(self, old: str, new: str, count: int = 1) -> None:
        text = self.catalog_path.read_text()
        assert text.count(old) == count, (old, text.count(old))
        self.catalog_path.write_text(text.replace(old, new))

    def add_events(self, *events: dict[str, Any]) -> None:
        with (self.dir / "lineage" / "events.jsonl").open("a") as out:
            for event in events:
                out.write(json.dumps(event) + "\n")

    def new_database(self, prefix: str) -> str:
        """A new empty database of the estate's backend; its URL."""
        if self.backend == "SQLite":
            return f"sqlite:///{self.dir / prefix}.db"
        assert self.admin is not None and self.server is not None
        name = f"hostile_{prefix}_{uuid.uuid4().hex[:8]}"
        self.admin.create(name)
        self.admin.quick(name)
        return f"{self.server}/{name}"


@dataclass
class Estates:
    """The demo estate built once per backend; each scenario acts on a copy of it."""

    base: Path
    bao: EmbeddedOpenBao
    admin: HostileAdmin | None
    server: str | None
    pristine: dict[str, Settings] = field(default_factory=dict)
    keys: dict[str, set[str]] = field(default_factory=dict)
    store_template: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def copy(self, name: str, backend: str, lane: int = 0) -> Estate:
        """A copy of the backend's estate; each lane (a thread of scenarios) has its own."""
        lane_name = f"{backend}-{lane}"
        source = self._pristine(backend, lane)
        where = self.base / lane_name / name
        while where.exists():  # played again (the first try failed in its setup)
            where = where.with_name(where.name + "+")
        shutil.copytree(Path(str(source.catalog_path)).parent, where / "estate")
        settings = source.model_copy(
            update={
                "catalog_path": where / "estate" / "catalog.yaml",
                "crm_export": where / "estate" / "crm_export.csv",
                "vault_anchor_path": anchor_path_for(where),  # a copied store, its own head
            }
        )
        if backend == "SQLite":
            (where / "store").mkdir()
            template = Path(self.store_template[lane_name].removeprefix("sqlite:///"))
            shutil.copy(template, where / "store" / "erasure.db")
            settings = settings.model_copy(
                update={"store_url": f"sqlite:///{where / 'store' / 'erasure.db'}"}
            )
        else:
            assert self.admin is not None
            warehouse, store = (f"hostile_{uuid.uuid4().hex[:10]}_{p}" for p in "ws")
            self.admin.create(warehouse, template=self._database(lane_name))
            self.admin.create(store, template=self._database(lane_name, "store"))
            for database in (warehouse, store):
                self.admin.quick(database)
            catalog = where / "estate" / "catalog.yaml"
            catalog.write_text(catalog.read_text().replace(self._database(lane_name), warehouse))
            settings = settings.model_copy(update={"store_url": f"{self.server}/{store}"})
        rebuild_lake(where / "estate")  # Iceberg's paths are absolute: the copy needs its own
        estate = Estate(name, backend, settings, where, self.admin, self.server)
        shutil.copy(estate.catalog_path, estate.catalog_path.with_name("catalog.reference.yaml"))
        with estate.reader() as svc:  # keys an earlier scenario shredded are sealed again
            missing = self.keys[lane_name] - set(svc.keystore.list_key_names())
            for key in missing:
                svc.keystore.create(key_hash(key), ARCHIVE)
            if svc.ledger.head()[0]:  # the copy's records: published as after a restore
                svc.ledger.anchor_head()
        return estate

    def _pristine(self, backend: str, lane: int) -> Settings:
        key = f"{backend}-{lane}"
        with self.lock:  # one thread builds a lane's estate; lanes share the admin connection
            if key in self.pristine:
                return self.pristine[key]
            url = None
            if backend == "Postgres":
                assert self.admin is not None
                for what in ("warehouse", "store"):
                    self.admin.create(self._database(key, what))
                    self.admin.quick(self._database(key, what))
                url = f"{self.server}/{self._database(key)}"
                self.store_template[key] = f"{self.server}/{self._database(key, 'store')}"
            else:
                template = self.base / key / "store-template.db"
                template.parent.mkdir(parents=True)
                self.store_template[key] = f"sqlite:///{template}"
        with open_store(self.store_template[key]):
            pass  # migrated once; each run's store is a copy of it
        settings = open_demo_on_mounts(self.base / key / "pristine", self.bao, key, url)
        with Services.open(settings) as svc:
            self.keys[key] = set(svc.keystore.list_key_names())
        self.pristine[key] = settings
        return settings

    def _database(self, lane: str, what: str = "warehouse") -> str:
        return f"hostile_pristine_{id(self):x}_{lane.lower().replace('-', '_')}_{what}"


def open_demo_on_mounts(
    base_dir: Path, bao: EmbeddedOpenBao, lane: str, url: str | None
) -> Settings:
    """`erasure.sample.embedded.open_demo`, on Vault mounts of the lane's own: lanes of
    scenarios run side by side, and each shreds the demo subject's key."""
    settings = demo_settings(base_dir, bao).model_copy(
        update={
            "vault_kv_mount": f"hostile-kv-{lane.lower()}",
            "vault_transit_mount": f"hostile-transit-{lane.lower()}",
        }
    )
    vault = connect(settings)
    initialise(vault, settings)
    keystore = keystore_from_settings(settings, vault)
    keystore.ensure_mount()
    pepper = PepperStore(vault, settings.vault_kv_mount).current()
    cipher = EnvelopeCipher(keystore)

    def seal(customer_id: str, dataset: str, plaintext: bytes) -> tuple[str, bytes]:
        hashed = subject_hash(pepper, "customer_id", normalise("strip", customer_id))
        keystore.create(hashed, dataset)
        return hashed, cipher.encrypt(hashed, dataset, plaintext)

    build_demo(base_dir, url=url, encrypt=seal)
    return settings


# ---------------------------------------------------------------------------------------------
# Driving one request


@dataclass
class Run:
    """What one request did: completed, or where and why it stopped."""

    completed: bool = False
    status: str = ""
    stopped_at: str = ""
    reason: str = ""
    error: str = ""  # the exception class, "" for a prompt left unanswered
    rulings: dict[str, str] = field(default_factory=dict)  # dataset -> option recorded


Hook = Callable[[Estate, Services, str], None]


@dataclass
class Drive:
    """How the scenario's run deviates from gdpr_erasure's normal course."""

    dpo: Dpo = Dpo.NONE
    # By dataset name; None: the DPO sends that prompt back (the request stops there).
    answers: dict[str, DpoAnswer | None] = field(default_factory=dict)
    after_act: Hook | None = None  # before verify
    after_verify: Hook | None = None  # before complete
    complete_after_failed_verify: bool = False  # someone marks verify success in the UI
    noop_dags: frozenset[str] = frozenset()  # runs that end `success` without rebuilding
    after_complete: Hook | None = None  # what happens to the estate once it completed


def request_conf(ref: str, id_type: str, identifier: str) -> dict[str, Any]:
    return {
        **CONF,
        "request_ref": ref,
        "identifier_type": id_type,
        "identifier": identifier,
        "notes": "",
    }


def trigger(svc: Services, how: Drive) -> workflow.TriggerDag:
    """A rematerialisation DAG run as Airflow runs it (workflow_support.trigger: the tables
    re-created, its OpenLineage COMPLETE stored); a no-op DAG's run ends `success` having
    done nothing, as a run marked success by hand does."""

    def run(dag_id: str, ready_at: datetime) -> RunOutcome:
        if dag_id in how.noop_dags:
            return RunOutcome(run_id=f"manual__{dag_id}", state="success")
        return demo_trigger(svc)(dag_id, ready_at)

    return run


def drive(estate: Estate, conf: dict[str, Any], how: Drive) -> Run:
    """One request from the desk's submission to its completion record, or to where it stops."""
    ref = str(conf["request_ref"])
    run = Run()
    step = "open services"
    try:
        with estate.services() as svc:
            try:
                step = "register"
                register(svc, conf, f"erasure-{ref}")
                step = "plan"
                plan = workflow.plan_request(svc, ref)
                step = "tombstone"
                workflow.tombstone(svc, ref)
                for ds in workflow.items_for(plan, Action.ERASE_ROWS):
                    step = f"erase_rows {ds.name}"
                    workflow.erase(svc, ref, ds)
                for ds in workflow.items_for(plan, Action.CRYPTO_SHRED):
                    step = f"crypto_shred {ds.name}"
                    workflow.shred(svc, ref, ds)
                for ds in workflow.items_for(plan, Action.REBUILD):
                    step = f"rebuild {ds.name}"
                    workflow.rebuild_artefact(svc, ref, ds, trigger(svc, how))
                for ds in workflow.items_for(plan, Action.AGGREGATE_OK):
                    step = f"aggregate_ok {ds.name}"
                    workflow.confirm_aggregate(svc, ref, ds)
                for item in workflow.pending_escalations(svc, ref):
                    step = f"dpo_decides {item.dataset.name}"
                    # The demo's own prompts get the demo's answers; anything the hostile
                    # estate raised gets the scenario's DPO.
                    if item.dataset.name in how.answers:
                        given = how.answers[item.dataset.name]
                    elif item.dataset.name in ANSWERS and item.rule in DEMO_RULES:
                        given = ANSWERS[item.dataset.name]
                    else:
                        given = ruling_for(item, how.dpo)
                    if given is None:
                        run.stopped_at, run.reason = step, f"awaiting the DPO: {item.reason}"
                        return _finish(svc, ref, run)
                    workflow.rule(svc, ref, item.dataset, given)
                if how.after_act is not None:
                    step = "between act and verify"
                    how.after_act(estate, svc, ref)
                step = "verify"
                try:
                    workflow.verify(svc, ref)
                except ErasureError:
                    if not how.complete_after_failed_verify:
                        raise
                    workflow.fail(svc, ref, "task verify failed", f"erasure-{ref}")
                if how.after_verify is not None:
                    step = "between verify and complete"
                    how.after_verify(estate, svc, ref)
                step = "complete"
                workflow.complete(svc, ref)
                if how.after_complete is not None:
                    step = "after complete"
                    how.after_complete(estate, svc, ref)
            except Exception as exc:  # every way a run can stop is an outcome
                run.stopped_at, run.error, run.reason = step, type(exc).__name__, str(exc)
            return _finish(svc, ref, run)
    except Exception as exc:  # the services did not open (a bad catalog)
        run.stopped_at, run.error, run.reason = step, type(exc).__name__, str(exc)
        return run


def _finish(svc: Services, ref: str, run: Run) -> Run:
    record = svc.requests.get(ref)
    run.status = record.status.value if record is not None else "not registered"
    run.completed = any(r.kind is RecordKind.COMPLETED for r in svc.ledger.show(ref))
    run.rulings = {r.dataset.name: r.option.value for r in svc.rulings.for_request(ref)}
    return run


# ---------------------------------------------------------------------------------------------
# The independent look: raw reads, own matching


def rows(conn: sa.Connection, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(sa.text(sql), params)]


def table_exists(conn: sa.Connection, name: str) -> bool:
    schema, _, table = name.rpartition(".")
    return sa.inspect(conn).has_table(table, schema=schema or None)


def fold(text: str | None) -> str:
    """A broad key for 'is this the same stored identifier': NFKC, no format characters or
    whitespace, case folded; an email's display name, brackets and comments dropped."""
    if text is None:
        return ""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Zs", "Cc"))
    angle = re.search(r"<([^<>]*)>", text)
    if angle:
        text = angle.group(1)
    text = re.sub(r"\([^()]*\)", "", text).strip()
    return unicodedata.normalize("NFKC", text.casefold())


def ids_key(value: Any) -> str:
    return fold(str(value)) if value is not None else ""


def _sorted(values: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr(tuple(str(v) for v in row)) for row in values)


@dataclass(frozen=True)
class People:
    """Who the request is about (customer ids) and what else of theirs to look for."""

    subject_ids: frozenset[str] = frozenset({SUBJECT})
    extra_databases: tuple[str, ...] = ()  # URLs of other databases holding crm.customers
    order_tables: tuple[str, ...] = ()  # where the orders are, if not crm.orders
    extra_keys: tuple[str, ...] = ()  # the subject's keys under names of the producer's own

    @property
    def orders(self) -> tuple[str, ...]:
        return self.order_tables or ("crm.orders",)


def subject_keys(svc: Services, people: People) -> set[str]:
    """The subject's archive keys under every pepper version, as the producer named them."""
    customer_ids = people.subject_ids
    names: set[str] = set(people.extra_keys)
    for pepper in svc.peppers.all_versions():
        for cid in customer_ids:
            names.add(subject_hash(pepper, "customer_id", normalise("strip", cid)))
    return names


def key_hash(name: str) -> str:
    """The subject hash a key store names a key by: `subjects/<hash>` in KV, `subject-<hash>`
    in transit."""
    return name.rpartition("/")[2].removeprefix("subject-")


def others_snapshot(estate: Estate, people: People) -> dict[str, list[str]]:
    """Every other person's rows in the systems of record and the immutable stores, and every
    other person's key: what no erasure of this subject may change."""
    ids = {ids_key(i) for i in people.subject_ids}
    snap: dict[str, list[str]] = {}
    with estate.reader() as svc:
        mine = subject_keys(svc, people)
        snap["vault keys"] = sorted(
            k for k in svc.keystore.list_key_names() if key_hash(k) not in mine
        )
        with svc.warehouse.engine("warehouse").connect() as conn:
            customers = rows(conn, "SELECT * FROM crm.customers")
            snap["crm.customers"] = _sorted([r for r in customers if ids_key(r[0]) not in ids])
            for name in people.orders:
                orders = rows(conn, f"SELECT * FROM {name}")
                snap[name] = _sorted([r for r in orders if ids_key(r[1]) not in ids])
            for name in ("crm.addresses", "crm.products", "ops.stock_levels"):
                snap[name] = _sorted(rows(conn, f"SELECT * FROM {name}"))
            backup = rows(conn, "SELECT * FROM backup.crm_nightly")
            snap["backup.crm_nightly"] = _sorted([r for r in backup if ids_key(r[0]) not in ids])
            archive = rows(conn, "SELECT id, subject_hash FROM archive.customer_events")
            snap["archive.customer_events"] = _sorted([r for r in archive if r[1] not in mine])
    for url in people.extra_databases:
        engine = database_engine(url)
        with engine.connect() as conn:
            found = rows(conn, "SELECT * FROM crm.customers")
        engine.dispose()
        snap[f"crm.customers at {url.rpartition('/')[2]}"] = _sorted(
            [r for r in found if ids_key(r[0]) not in ids]
        )
    return snap


def touched(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """Where another person's data changed, in counts (never values)."""
    found = []
    for name, was in before.items():
        now = after.get(name, [])
        gone = len(set(was) - set(now))  # a new row (the request's own key) touches nobody
        if gone:
            found.append(f"{name}: {gone} row(s) of other people gone or changed")
    return found


def database_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        engine = sa.create_engine(url)

        @sa.event.listens_for(engine, "connect")
        def attach(dbapi_conn: Any, _record: Any) -> None:
            crm = path.with_name(f"{path.stem}.crm.db")
            dbapi_conn.execute(f"ATTACH DATABASE '{crm}' AS crm")

        return engine
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def fresh(conn: sa.Connection, table: str, select: str) -> bool:
    """Whether `table` holds exactly what `select` computes from the sources now."""
    if not table_exists(conn, table):
        return True  # deleted: nothing of anyone left in it
    extra = rows(conn, f"SELECT COUNT(*) FROM (SELECT * FROM {table} EXCEPT {select}) AS d")
    lacking = rows(conn, f"SELECT COUNT(*) FROM ({select} EXCEPT SELECT * FROM {table}) AS d")
    return extra[0][0] == 0 and lacking[0][0] == 0


REBUILT_BY_SQL = ("marts.customer_ltv", "marts.popular_products")
REBUILT_BY_DAG = ("marts.orders_daily", "reports.monthly_revenue")


def residue(estate: Estate, people: People, retained: frozenset[str]) -> dict[str, str]:
    """Where the subject's data is still there (dataset -> what), read independently; minus
    the datasets the record says the DPO retained."""
    from erasure.sample.rematerialise import select_of

    ids = {ids_key(i) for i in people.subject_ids}
    left: dict[str, str] = {}
    with estate.reader() as svc:
        keys = subject_keys(svc, people)
        live = [k for k in keys if svc.keystore.exists(k)]
        if live:
            left[ARCHIVE] = f"{len(live)} key(s) of the subject still in Vault"
        catalog = svc.catalog
        with svc.warehouse.engine("warehouse").connect() as conn:
            checks = {
                "crm.customers": "SELECT id FROM crm.customers",
                **{name: f"SELECT customer_id FROM {name}" for name in people.orders},
                "marts.customer_ltv": "SELECT customer_id FROM marts.customer_ltv",
                "marts.customer_segments": "SELECT customer_id FROM marts.customer_segments",
                "marts.segment_history": "SELECT customer_id FROM marts.segment_history",
            }
            for name, sql in checks.items():
                if not table_exists(conn, name):
                    continue
                n = sum(1 for (value,) in rows(conn, sql) if ids_key(value) in ids)
                if n:
                    left[name] = f"{n} row(s) of the subject"
        selects = {name: select_of(catalog, name) for name in REBUILT_BY_DAG}
        selects.update({name: _sql_spec(name) for name in REBUILT_BY_SQL})
        for name, select in selects.items():
            try:
                with svc.warehouse.engine("warehouse").connect() as conn:
                    stale = not fresh(conn, name, select)
            except sa.exc.DBAPIError:
                continue  # a source it reads is gone (the scenario renamed it): not comparable
            if stale:
                left[name] = "differs from its SQL over the sources as they are now"
    for url in people.extra_databases:
        engine = database_engine(url)
        with engine.connect() as conn:
            n = sum(1 for (v,) in rows(conn, "SELECT id FROM crm.customers") if ids_key(v) in ids)
        engine.dispose()
        if n:
            left[f"crm.customers at {url.rpartition('/')[2]}"] = f"{n} row(s) of the subject"
    return {name: what for name, what in left.items() if name not in retained}


# The rebuild SQL of the pristine demo catalog: what the artefact must equal, whatever the
# scenario did to the catalog's own copy.
_DEMO_SELECTS: dict[str, str] = {}


def _sql_spec(name: str) -> str:
    from importlib import resources

    import yaml

    if not _DEMO_SELECTS:
        text = (resources.files("erasure.sample") / "estate" / "catalog.yaml").read_text()
        for ds in yaml.safe_load(text)["datasets"]:
            sql = (ds.get("rebuild") or {}).get("sql")
            if sql:
                _DEMO_SELECTS[ds["name"]] = re.sub(
                    r"^\s*CREATE TABLE \S+ AS\s*", "", sql, flags=re.IGNORECASE
                )
    return _DEMO_SELECTS.get(name, "")
